package ec2fake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"strings"
)

// The IAM policy evaluator (R45, R51): identity-based policies of the fake's user (Options.CallerPolicies) and
// of its roles (Role.Policy), evaluated for every request their credentials sign. Only what the project's
// documented policies use is modelled, and a policy that uses anything else does not load (New fails the
// test), so a document cannot pass here by an element the fake ignores:
//
//   - Version, Id, Statement (one or a list); a statement's Sid, Effect (Allow or Deny), Action and
//     Resource (one or a list, with the * and ? wildcards; Action case-insensitive) and Condition;
//     NotAction, NotResource and Principal are refused;
//   - the condition operators StringEquals, StringNotEquals, StringEqualsIgnoreCase,
//     StringNotEqualsIgnoreCase, StringLike, StringNotLike, ArnEquals, ArnLike, ArnNotEquals, ArnNotLike, Bool
//     (each also with IfExists) and Null; the set qualifiers ForAnyValue and ForAllValues are refused;
//   - policy variables ${key} in Resource and in condition values, resolved from the request context.
//
// Evaluation is IAM's ("Policy evaluation logic"): an explicit Deny wins, then any Allow, and nothing else
// allows. Within a condition, operators and keys are ANDed, a key's values ORed (NORed for a negated operator);
// a key the request does not have fails the operator, but passes a negated one and any ...IfExists one
// ("IAM JSON policy elements: Condition operators").

// policyDocument is one parsed policy.
type policyDocument struct {
	Statement []policyStatement
}

type policyStatement struct {
	Sid       string
	Effect    string
	Action    stringList
	Resource  stringList
	Condition map[string]map[string]stringList
}

// stringList is a policy value that is one string or a list of them.
type stringList []string

func (l *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*l = []string{one}
		return nil
	}
	var many []string
	err := json.Unmarshal(b, &many)
	*l = many
	return err
}

// modelledOperators are the condition operators the evaluator knows, without their IfExists suffix; the
// value says whether the operator is negated.
var modelledOperators = map[string]bool{
	"StringEquals": false, "StringNotEquals": true, "StringEqualsIgnoreCase": false, "StringNotEqualsIgnoreCase": true,
	"StringLike": false, "StringNotLike": true, "ArnEquals": false, "ArnLike": false, "ArnNotEquals": true, "ArnNotLike": true,
	"Bool": false, "Null": false,
}

// parsePolicy reads a policy document, refusing any element the evaluator does not model.
func parsePolicy(doc string) (policyDocument, error) {
	var raw struct {
		Version, Id string          // IAM's element names
		Statement   json.RawMessage `json:"Statement"`
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return policyDocument{}, fmt.Errorf("the policy does not parse as the fake models it: %w", err)
	}
	if raw.Version != "" && raw.Version != "2012-10-17" && raw.Version != "2008-10-17" {
		return policyDocument{}, fmt.Errorf("policy Version %q is none of IAM's", raw.Version)
	}
	var statements []json.RawMessage
	if bytes.HasPrefix(bytes.TrimSpace(raw.Statement), []byte("{")) {
		statements = []json.RawMessage{raw.Statement}
	} else if err := json.Unmarshal(raw.Statement, &statements); err != nil {
		return policyDocument{}, fmt.Errorf("the policy's Statement is neither an object nor a list: %w", err)
	}
	var d policyDocument
	for i, s := range statements {
		var st policyStatement
		dec := json.NewDecoder(bytes.NewReader(s))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&st); err != nil {
			return d, fmt.Errorf("statement %d: %w (NotAction, NotResource and Principal are not modelled)", i, err)
		}
		if st.Effect != "Allow" && st.Effect != "Deny" {
			return d, fmt.Errorf("statement %d: Effect %q is neither Allow nor Deny", i, st.Effect)
		}
		if len(st.Action) == 0 || len(st.Resource) == 0 {
			return d, fmt.Errorf("statement %d has no Action or no Resource", i)
		}
		for op := range st.Condition {
			if _, ok := modelledOperators[strings.TrimSuffix(op, "IfExists")]; !ok || op == "NullIfExists" {
				return d, fmt.Errorf("statement %d: the condition operator %s is not modelled", i, op)
			}
		}
		d.Statement = append(d.Statement, st)
	}
	return d, nil
}

// requestContext is what a request brings to the evaluation: its keys (aws:userid, ec2:CreateAction, ...),
// the tags of the resource it acts on (aws:ResourceTag/<key>, and the services' own ssm:resourceTag/<key>,
// ec2:ResourceTag/<key> and iam:ResourceTag/<key>), and the tags it asks for (aws:RequestTag/<key>).
type requestContext struct {
	keys        map[string]string
	tags        map[string]string
	requestTags map[string]string
}

// with is rc with more keys, rc's own unchanged.
func (rc requestContext) with(kv ...string) requestContext {
	keys := make(map[string]string, len(rc.keys)+len(kv)/2)
	for k, v := range rc.keys {
		keys[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		keys[kv[i]] = kv[i+1]
	}
	rc.keys = keys
	return rc
}

// cutPrefixFold is strings.CutPrefix with the prefix matched in any case: condition key names are not
// case-sensitive ("IAM JSON policy elements: Condition").
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}

func lookupFold(m map[string]string, key string) (string, bool) {
	for k, v := range m {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return "", false
}

func (rc requestContext) value(key string) (string, bool) {
	for _, prefix := range []string{"aws:ResourceTag/", "ssm:resourceTag/", "ec2:ResourceTag/", "iam:ResourceTag/"} {
		if k, ok := cutPrefixFold(key, prefix); ok {
			return lookupFold(rc.tags, k)
		}
	}
	if k, ok := cutPrefixFold(key, "aws:RequestTag/"); ok {
		return lookupFold(rc.requestTags, k)
	}
	return lookupFold(rc.keys, key)
}

// substitute replaces the policy variables of s; a variable with no value leaves the statement unmatched
// (IAM: "If AWS cannot resolve a variable this might cause the entire statement to be invalid").
func (rc requestContext) substitute(s string) (string, bool) {
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			return s, true
		}
		j := strings.Index(s[i:], "}")
		if j < 0 {
			return s, true
		}
		v, ok := rc.value(s[i+2 : i+j])
		if !ok {
			return "", false
		}
		s = s[:i] + v + s[i+j+1:]
	}
}

// iamWildcard matches s against a pattern of * and ? (IAM's wildcards in Action, Resource and StringLike).
func iamWildcard(pattern, s string) bool {
	// path.Match treats / specially: IAM does not, so both sides trade it for a byte neither holds.
	const slash = "\x00"
	ok, err := path.Match(strings.ReplaceAll(escapeBrackets(pattern), "/", slash), strings.ReplaceAll(s, "/", slash))
	return err == nil && ok
}

func escapeBrackets(p string) string {
	return strings.NewReplacer(`\`, `\\`, "[", `\[`, "]", `\]`).Replace(p)
}

// Why a request was refused, in the words IAM's denials end with.
const (
	whyExplicitDeny = "with an explicit deny in an identity-based policy"
	whyNoAllow      = "because no identity-based policy allows the %s action"
)

// evaluate is IAM's decision for one action on one resource over every policy of the principal: an explicit
// Deny wins, then any Allow, and nothing else allows. It returns "" when allowed, and otherwise the end of the
// denial's message; matched are the statements that decided it (the Deny, or every Allow).
func evaluate(docs []policyDocument, action, resource string, rc requestContext) (why string, matched []policyStatement) {
	var allows []policyStatement
	for _, d := range docs {
		for _, st := range d.Statement {
			if !st.matches(action, resource, rc) {
				continue
			}
			if st.Effect == "Deny" {
				return whyExplicitDeny, []policyStatement{st}
			}
			allows = append(allows, st)
		}
	}
	if len(allows) > 0 {
		return "", allows
	}
	return fmt.Sprintf(whyNoAllow, action), nil
}

func (st policyStatement) matches(action, resource string, rc requestContext) bool {
	if !policyAnyMatch(st.Action, func(p string) bool { return iamWildcard(strings.ToLower(p), strings.ToLower(action)) }) {
		return false
	}
	if !policyAnyMatch(st.Resource, func(p string) bool {
		p, ok := rc.substitute(p)
		return ok && iamWildcard(p, resource)
	}) {
		return false
	}
	for op, keys := range st.Condition {
		for key, values := range keys {
			if !conditionHolds(op, key, values, rc) {
				return false
			}
		}
	}
	return true
}

// conditionHolds evaluates one operator on one key against its values. A value whose variable has no value
// fails the statement, whatever the operator.
func conditionHolds(op, key string, values []string, rc requestContext) bool {
	base, ifExists := strings.CutSuffix(op, "IfExists")
	negated, modelled := modelledOperators[base]
	if !modelled {
		return false // not loaded by parsePolicy; a policy built otherwise matches nothing
	}
	got, present := rc.value(key)
	if base == "Null" {
		// Null: "true" holds when the key is absent, "false" when it is present.
		return policyAnyMatch(values, func(v string) bool { return strings.EqualFold(v, "true") != present })
	}
	resolved := make([]string, 0, len(values))
	for _, v := range values {
		v, ok := rc.substitute(v)
		if !ok {
			return false
		}
		resolved = append(resolved, v)
	}
	if !present {
		return ifExists || negated
	}
	match := policyAnyMatch(resolved, func(v string) bool {
		switch base {
		case "StringLike", "StringNotLike", "ArnEquals", "ArnLike", "ArnNotEquals", "ArnNotLike":
			return iamWildcard(v, got)
		case "StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase", "Bool":
			return strings.EqualFold(v, got)
		}
		return v == got
	})
	return match != negated
}

func policyAnyMatch(l []string, f func(string) bool) bool {
	for _, v := range l {
		if f(v) {
			return true
		}
	}
	return false
}
