package computefake

import (
	"fmt"
	"regexp"
	"strings"
)

// term is one comparison of a list filter: field op value, where field is "name", "status" or "labels.KEY".
type term struct {
	field, op, value string
	re               *regexp.Regexp
}

type filter []term

// parseFilter accepts the forms Compute Engine's list filters take: "=", "!=", ":" (has), ":*" (present),
// and the regular-expression operators "eq"/"ne", joined by AND or juxtaposition, each optionally in
// parentheses, values optionally double-quoted. Anything else (OR, NOT, unknown fields) is an error, which
// the server answers with 400.
func parseFilter(s string) (filter, error) {
	toks, err := tokenize(s)
	if err != nil {
		return nil, err
	}
	var f filter
	for i := 0; i < len(toks); {
		t := toks[i]
		switch t {
		case "(", ")", "AND":
			i++
			continue
		case "OR", "NOT", "-":
			return nil, fmt.Errorf("%q is not supported in this filter", t)
		}
		if i+2 >= len(toks) {
			return nil, fmt.Errorf("incomplete expression near %q", t)
		}
		field, op, val := t, toks[i+1], toks[i+2]
		i += 3
		if field != "name" && field != "status" && !strings.HasPrefix(field, "labels.") {
			return nil, fmt.Errorf("unknown field %q", field)
		}
		tm := term{field: field, op: op, value: unquote(val)}
		switch op {
		case "=", "!=", ":":
		case "eq", "ne":
			re, err := regexp.Compile("^(?:" + tm.value + ")$")
			if err != nil {
				return nil, fmt.Errorf("invalid regular expression %q", tm.value)
			}
			tm.re = re
		default:
			return nil, fmt.Errorf("unknown operator %q", op)
		}
		f = append(f, tm)
	}
	return f, nil
}

func unquote(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		return v[1 : len(v)-1]
	}
	return v
}

// tokenize splits a filter into words, quoted strings, parentheses and the operators = != :.
func tokenize(s string) ([]string, error) {
	var toks []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '(' || c == ')' || c == '=' || c == ':':
			toks = append(toks, string(c))
			i++
		case c == '!' && i+1 < len(s) && s[i+1] == '=':
			toks = append(toks, "!=")
			i += 2
		case c == '"':
			j := strings.IndexByte(s[i+1:], '"')
			if j < 0 {
				return nil, fmt.Errorf("unterminated quote")
			}
			toks = append(toks, s[i:i+j+2])
			i += j + 2
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t()=:!\"", rune(s[j])) {
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

// labelled is what a filter reads of a resource: instances and addresses both have these.
type labelled interface {
	GetName() string
	GetStatus() string
	GetLabels() map[string]string
}

func (f filter) match(in labelled) bool {
	for _, t := range f {
		var v string
		var present bool
		switch t.field {
		case "name":
			v, present = in.GetName(), true
		case "status":
			v, present = in.GetStatus(), true
		default:
			v, present = in.GetLabels()[strings.TrimPrefix(t.field, "labels.")]
		}
		var ok bool
		switch t.op {
		case "=":
			ok = present && v == t.value
		case "!=":
			ok = !present || v != t.value
		case ":":
			ok = present && (t.value == "*" || v == t.value)
		case "eq":
			ok = present && t.re.MatchString(v)
		case "ne":
			ok = !present || !t.re.MatchString(v)
		}
		if !ok {
			return false
		}
	}
	return true
}
