package secretmanagerfake

import (
	"fmt"
	"regexp"
	"strings"

	"cloud.google.com/go/secretmanager/apiv1/secretmanagerpb"
)

// A list filter ("Filter lists of secrets and secret versions", S14): restrictions field op value, joined by
// AND or by juxtaposition, OR, NOT or a leading "-", and parentheses. OR binds tighter than AND, as in
// Google's list filters (AIP-160). The fields modelled are name and labels.KEY; the others Secret Manager
// filters on are not (unmodelled), and anything else is a malformed filter.

// expr is a parsed filter, matched against one secret.
type expr interface {
	match(s *secretmanagerpb.Secret) bool
}

type (
	and         []expr
	or          []expr
	not         struct{ e expr }
	restriction struct {
		field, op, value string
		pattern          *regexp.Regexp // ":" with a value other than "*"
	}
)

func (a and) match(s *secretmanagerpb.Secret) bool {
	for _, e := range a {
		if !e.match(s) {
			return false
		}
	}
	return true
}

func (o or) match(s *secretmanagerpb.Secret) bool {
	for _, e := range o {
		if e.match(s) {
			return true
		}
	}
	return false
}

func (n not) match(s *secretmanagerpb.Secret) bool { return !n.e.match(s) }

// match: "=" is equality, "!=" its negation (a missing label is not equal), ":" is has: "*" is presence, any
// other value a substring, in which "*" matches any run of characters (the page's name:mysecret and
// name:APIKEY*production).
func (r restriction) match(s *secretmanagerpb.Secret) bool {
	v, present := s.GetName(), true
	if key, ok := strings.CutPrefix(r.field, "labels."); ok {
		v, present = s.GetLabels()[key]
	}
	switch r.op {
	case "=":
		return present && v == r.value
	case "!=":
		return !present || v != r.value
	default: // ":"
		return present && (r.value == "*" || r.pattern.MatchString(v))
	}
}

// unmodelledFields are fields of a secret the API filters on that the fake does not.
var unmodelledFields = regexp.MustCompile(`^(create_time|expire_time|replication|version_aliases|annotations|topics|rotation|etag|ttl|customer_managed_encryption|version_destroy_ttl|tags)(\.|$)`)

// errUnmodelled marks a filter the fake cannot answer as the API would: 501, not 400.
type errUnmodelled struct{ what string }

func (e errUnmodelled) Error() string { return "the fake does not model " + e.what + " in a filter" }

// parseFilter parses a filter; an empty one matches everything.
func parseFilter(s string) (expr, error) {
	toks, err := tokenize(s)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	e, err := p.sequence()
	if err != nil {
		return nil, err
	}
	if p.i < len(p.toks) {
		return nil, fmt.Errorf("unexpected %q", p.toks[p.i])
	}
	return e, nil
}

type parser struct {
	toks []string
	i    int
}

func (p *parser) peek() string {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ""
}

// sequence is factors joined by AND or juxtaposition, up to the end or a closing parenthesis.
func (p *parser) sequence() (expr, error) {
	var out and
	for p.peek() != "" && p.peek() != ")" {
		if p.peek() == "AND" {
			if len(out) == 0 {
				return nil, fmt.Errorf("AND with nothing before it")
			}
			p.i++
		}
		f, err := p.factor()
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// factor is terms joined by OR.
func (p *parser) factor() (expr, error) {
	t, err := p.term()
	if err != nil {
		return nil, err
	}
	terms := or{t}
	for p.peek() == "OR" {
		p.i++
		if t, err = p.term(); err != nil {
			return nil, err
		}
		terms = append(terms, t)
	}
	if len(terms) == 1 {
		return terms[0], nil
	}
	return terms, nil
}

// term is a restriction or a parenthesized sequence, negated by NOT or a leading "-".
func (p *parser) term() (expr, error) {
	switch tok := p.peek(); {
	case tok == "NOT" || tok == "-":
		p.i++
		e, err := p.term()
		return not{e}, err
	case strings.HasPrefix(tok, "-") && len(tok) > 1:
		p.toks[p.i] = tok[1:]
		e, err := p.term()
		return not{e}, err
	case tok == "(":
		p.i++
		e, err := p.sequence()
		if err != nil {
			return nil, err
		}
		if p.peek() != ")" {
			return nil, fmt.Errorf("unbalanced parenthesis")
		}
		p.i++
		return e, nil
	case tok == "" || tok == ")" || tok == "AND" || tok == "OR" || isOperator(tok):
		return nil, fmt.Errorf("expected a restriction, found %q", tok)
	}
	if p.i+2 >= len(p.toks) {
		return nil, fmt.Errorf("incomplete restriction after %q", p.peek())
	}
	field, op, value := p.toks[p.i], p.toks[p.i+1], p.toks[p.i+2]
	p.i += 3
	return restrictionOf(field, op, value)
}

func restrictionOf(field, op, value string) (expr, error) {
	switch {
	case !isOperator(op):
		return nil, fmt.Errorf("expected an operator after %q, found %q", field, op)
	case isOperator(value) || value == "(" || value == ")":
		return nil, fmt.Errorf("expected a value after %s %s, found %q", field, op, value)
	case unmodelledFields.MatchString(field):
		return nil, errUnmodelled{"the field " + field}
	case field != "name" && !strings.HasPrefix(field, "labels."):
		return nil, fmt.Errorf("unknown field %q", field)
	case op != "=" && op != "!=" && op != ":":
		return nil, errUnmodelled{"the operator " + op}
	}
	r := restriction{field: field, op: op, value: unquote(value)}
	if op == ":" && r.value != "*" {
		parts := strings.Split(r.value, "*")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		r.pattern = regexp.MustCompile(strings.Join(parts, ".*"))
	}
	return r, nil
}

func isOperator(t string) bool {
	switch t {
	case "=", "!=", ":", "<", ">", "<=", ">=":
		return true
	}
	return false
}

func unquote(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		return v[1 : len(v)-1]
	}
	return v
}

// tokenize splits a filter into words, double-quoted strings, parentheses and the operators.
func tokenize(s string) ([]string, error) {
	var toks []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			i++
		case c == '(' || c == ')' || c == '=' || c == ':':
			toks = append(toks, string(c))
			i++
		case (c == '!' || c == '<' || c == '>') && i+1 < len(s) && s[i+1] == '=':
			toks = append(toks, s[i:i+2])
			i += 2
		case c == '<' || c == '>':
			toks = append(toks, string(c))
			i++
		case c == '"':
			j := strings.IndexByte(s[i+1:], '"')
			if j < 0 {
				return nil, fmt.Errorf("unterminated quote")
			}
			toks = append(toks, s[i:i+j+2])
			i += j + 2
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\n()=:!<>\"", rune(s[j])) {
				j++
			}
			if j == i {
				return nil, fmt.Errorf("unexpected %q", c)
			}
			toks = append(toks, s[i:j])
			i = j
		}
	}
	return toks, nil
}
