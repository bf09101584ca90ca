package ec2fake

import (
	"encoding/json"
	"path"
	"strings"
)

// The identity-based policy of a role (Role.Policy), evaluated for the SSM requests its sessions sign (R45):
// what lets a test prove that one proxy's instance role cannot read another proxy's parameters. Only what
// the project's documented policies use is modelled: Allow and Deny statements, Action and Resource with
// the * and ? wildcards, the policy variables ${ec2:SourceInstanceARN} and ${aws:userid}, and the condition
// operators StringEquals, StringNotEquals, StringLike, ArnEquals and ArnLike over the keys
// ec2:SourceInstanceARN, aws:userid, aws:PrincipalArn, ssm:resourceTag/<key> and aws:ResourceTag/<key>.

type policyDocument struct {
	Statement []policyStatement `json:"Statement"`
}

type policyStatement struct {
	Effect    string                           `json:"Effect"`
	Action    stringList                       `json:"Action"`
	Resource  stringList                       `json:"Resource"`
	Condition map[string]map[string]stringList `json:"Condition"`
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

// requestContext is what a request brings to the evaluation: the caller's keys and the resource's tags.
type requestContext struct {
	keys map[string]string
	tags map[string]string
}

func (rc requestContext) value(key string) (string, bool) {
	for _, prefix := range []string{"ssm:resourceTag/", "aws:ResourceTag/"} {
		if k, ok := strings.CutPrefix(key, prefix); ok {
			v, ok := rc.tags[k]
			return v, ok
		}
	}
	for k, v := range rc.keys {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return "", false
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

// evaluate is IAM's decision for one action on one resource: an explicit Deny wins, then any Allow, and
// nothing else allows. It returns "" when allowed, and otherwise the end of AccessDeniedException's message.
func (d policyDocument) evaluate(action, resource string, rc requestContext) string {
	allowed := false
	for _, st := range d.Statement {
		if !st.matches(action, resource, rc) {
			continue
		}
		if st.Effect == "Deny" {
			return "with an explicit deny in an identity-based policy"
		}
		allowed = allowed || st.Effect == "Allow"
	}
	if allowed {
		return ""
	}
	return "because no identity-based policy allows the " + action + " action"
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
			got, present := rc.value(key)
			match := policyAnyMatch(values, func(v string) bool {
				v, ok := rc.substitute(v)
				if !ok || !present {
					return false
				}
				switch op {
				case "StringLike", "ArnLike":
					return iamWildcard(v, got)
				default:
					return v == got
				}
			})
			switch op {
			case "StringEquals", "StringLike", "ArnEquals", "ArnLike":
				if !match {
					return false
				}
			case "StringNotEquals":
				if match || !present {
					return false
				}
			default:
				return false // an operator the fake does not model matches nothing: such a policy fails loudly
			}
		}
	}
	return true
}

func policyAnyMatch(l []string, f func(string) bool) bool {
	for _, v := range l {
		if f(v) {
			return true
		}
	}
	return false
}

// ssmResources are the parameters an SSM request acts on, by name, from its body.
func ssmResources(action string, body []byte) []string {
	var in struct {
		Name, ResourceID, Path string
		Names                  []string
	}
	_ = json.Unmarshal(body, &in) // a body that does not parse is refused by the action itself
	switch {
	case action == "GetParameters" || action == "DeleteParameters":
		return in.Names
	case in.ResourceID != "":
		return []string{in.ResourceID}
	case in.Path != "":
		return []string{in.Path}
	case in.Name != "":
		return []string{in.Name}
	}
	return nil
}

// authorizeSSM checks an SSM request of a role session against its role's policy (R45); nil when the role
// has none (every other caller is allowed, as before). The caller holds s.mu.
func (s *Server) authorizeSSM(c *call) *apiError {
	if c.principal == nil || c.principal.session == nil {
		return nil
	}
	var policy string
	for _, r := range s.opts.Roles {
		if s.RoleARN(r.Name) == c.principal.session.RoleARN {
			policy = r.Policy
		}
	}
	if policy == "" {
		return nil
	}
	var doc policyDocument
	if err := json.Unmarshal([]byte(policy), &doc); err != nil {
		s.t.Errorf("ec2fake: role %s's policy does not parse: %v", c.principal.session.RoleARN, err)
		return ssmErr("InternalServerError", "")
	}
	keys := map[string]string{"aws:userid": c.principal.userID, "aws:PrincipalArn": c.principal.session.RoleARN}
	if id := c.principal.session.InstanceID; id != "" {
		keys["ec2:SourceInstanceARN"] = "arn:aws:ec2:" + c.region + ":" + s.opts.AccountID + ":instance/" + id
	}
	action := "ssm:" + c.action
	rg := s.regions[c.region]
	for _, name := range ssmResources(c.action, c.body) {
		var tags map[string]string
		if p := rg.params[name]; p != nil {
			tags = p.Tags
		}
		arn := "arn:aws:ssm:" + c.region + ":" + s.opts.AccountID + ":parameter" + name
		if !strings.HasPrefix(name, "/") {
			arn = "arn:aws:ssm:" + c.region + ":" + s.opts.AccountID + ":parameter/" + name
		}
		if why := doc.evaluate(action, arn, requestContext{keys: keys, tags: tags}); why != "" {
			return ssmErr("AccessDeniedException", "User: %s is not authorized to perform: %s on resource: %s %s", c.principal.arn, action, arn, why)
		}
	}
	return nil
}
