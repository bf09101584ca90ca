package ec2fake

import (
	"encoding/base64"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Describe filters ("List and filter your resources" in the EC2 user guide; each action's Filter.N list in
// its API reference): Filter.N.Name and Filter.N.Value.M. A resource matches when, for every filter, one of
// its values for that name matches one of the filter's values (values are ORed, filters ANDed). Values take
// wildcards: * any run of characters, ? exactly one, \ escapes. tag:<key>, tag-key and tag-value work on
// every resource with tags. A name the action does not know is InvalidParameterValue.

type filter struct {
	name   string
	values []*regexp.Regexp
	raw    []string
}

// filterFields gives a resource's values for a filter name.
type filterFields func(name string) []string

// filters reads the request's filters; names are those the action takes besides the tag ones.
func (f form) filters(names map[string]bool) ([]filter, *apiError) {
	var out []filter
	for _, n := range f.indexes("Filter") {
		p := fmt.Sprintf("Filter.%d.", n)
		name := f.str(p + "Name")
		if name == "" {
			return nil, ec2Err("InvalidParameterValue", "The filter 'null' is invalid")
		}
		if !names[name] && !strings.HasPrefix(name, "tag:") && name != "tag-key" && name != "tag-value" {
			return nil, ec2Err("InvalidParameterValue", "The filter '%s' is invalid", name)
		}
		flt := filter{name: name}
		for _, v := range f.list(p + "Value") {
			flt.values = append(flt.values, wildcard(v))
			flt.raw = append(flt.raw, v)
		}
		out = append(out, flt)
	}
	return out, nil
}

// wildcard compiles a filter value.
func wildcard(v string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\' && i+1 < len(v):
			i++
			b.WriteString(regexp.QuoteMeta(string(v[i])))
		case c == '*':
			b.WriteString("(?s:.*)")
		case c == '?':
			b.WriteString("(?s:.)")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// matches reports whether a resource with these fields and tags passes every filter.
func matches(filters []filter, fields filterFields, tags map[string]string) bool {
	for _, f := range filters {
		var have []string
		switch {
		case strings.HasPrefix(f.name, "tag:"):
			if v, ok := tags[strings.TrimPrefix(f.name, "tag:")]; ok {
				have = []string{v}
			}
		case f.name == "tag-key":
			have = sortedKeys(tags)
		case f.name == "tag-value":
			for _, k := range sortedKeys(tags) {
				have = append(have, tags[k])
			}
		default:
			have = fields(f.name)
		}
		if !anyMatch(f.values, have) {
			return false
		}
	}
	return true
}

func anyMatch(patterns []*regexp.Regexp, have []string) bool {
	for _, p := range patterns {
		for _, h := range have {
			if p.MatchString(h) {
				return true
			}
		}
	}
	return false
}

// paginate pages items by MaxResults and NextToken ("EC2 API Reference: Pagination"): MaxResults must lie in
// [lo, hi]; without it every item is returned. The token is opaque to the client; one the fake did not give
// is InvalidPaginationToken.
func paginate[T any](f form, action string, items []T, lo, hi int) ([]T, string, *apiError) {
	maxResults, hasMax, e := f.integer("MaxResults")
	if e != nil {
		return nil, "", e
	}
	if hasMax && (maxResults < lo || maxResults > hi) {
		if maxResults < lo {
			return nil, "", ec2Err("InvalidParameterValue", "Value ( %d ) for parameter maxResults is invalid. Expecting a value greater than %d.", maxResults, lo)
		}
		return nil, "", ec2Err("InvalidParameterValue", "Value ( %d ) for parameter maxResults is invalid. Expecting a value less than %d.", maxResults, hi)
	}
	start := 0
	if tok := f.str("NextToken"); tok != "" {
		n, ok := decodeToken(action, tok)
		if !ok || n > len(items) {
			return nil, "", ec2Err("InvalidPaginationToken", "Invalid pagination token: %s", tok)
		}
		start = n
	}
	if !hasMax {
		return items[start:], "", nil
	}
	end := min(start+maxResults, len(items))
	next := ""
	if end < len(items) {
		next = encodeToken(action, end)
	}
	return items[start:end], next, nil
}

func encodeToken(action string, offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("ec2fake:" + action + ":" + strconv.Itoa(offset)))
}

func decodeToken(action, tok string) (int, bool) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, false
	}
	rest, ok := strings.CutPrefix(string(b), "ec2fake:"+action+":")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}
