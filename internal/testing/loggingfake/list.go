package loggingfake

import (
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// listFilterRE is the one restriction the fake's entries.list understands: logName="NAME" (L16).
var listFilterRE = regexp.MustCompile(`^\s*logName\s*=\s*"([^"]*)"\s*$`)

// list is entries.list (L16): the listable entries (L7) of the projects named, matching the filter, oldest
// first (or newest first), in pages of at most pageSize (50 by default, at most 1000).
func (s *Server) list(r *http.Request, member string) (any, *apiError) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes+1))
	if err != nil {
		return nil, invalid("reading the body: %v", err)
	}
	m, e := strictObject(body, "", []string{"resourceNames", "filter", "orderBy", "pageSize", "pageToken"}, []string{"projectIds"})
	if e != nil {
		return nil, e
	}
	var (
		names             []string
		filter, order, pt string
		size              int
	)
	for name, v := range map[string]any{"resourceNames": &names, "filter": &filter, "orderBy": &order, "pageSize": &size, "pageToken": &pt} {
		if e := field(m, name, "", v); e != nil {
			return nil, e
		}
	}
	if len(names) == 0 {
		return nil, invalid("resourceNames: at least one parent resource is required.")
	}
	if len(filter) > 20000 {
		return nil, invalid("filter: the maximum length of a filter is 20,000 characters.")
	}
	var want string
	if strings.TrimSpace(filter) != "" {
		fm := listFilterRE.FindStringSubmatch(filter)
		if fm == nil {
			return nil, newAPIError(http.StatusNotImplemented, "UNIMPLEMENTED", `the fake's filter is logName="NAME" alone, not `+filter)
		}
		want = strings.TrimPrefix(fm[1], "/")
	}
	switch order {
	case "", "timestamp asc", "timestamp desc":
	default:
		return nil, invalid(`orderBy: the only permitted values are "timestamp asc" and "timestamp desc".`)
	}
	switch {
	case size < 0 || size > 1000:
		return nil, invalid("pageSize: %d is negative or exceeds 1000.", size)
	case size == 0:
		size = 50
	}
	offset := 0
	if pt != "" {
		if offset, err = strconv.Atoi(pt); err != nil || offset < 0 {
			return nil, invalid("pageToken: not a token this method gave.")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Entry
	for _, n := range names {
		project, ok := strings.CutPrefix(n, "projects/")
		if !ok || strings.Contains(project, "/") {
			return nil, newAPIError(http.StatusNotImplemented, "UNIMPLEMENTED", "the fake lists only projects' entries, not "+n)
		}
		if !s.may(member, project, "logging.logEntries.list") {
			return nil, denied("logging.logEntries.list", n)
		}
		for _, en := range s.entries[project] {
			if s.listable(en) && (want == "" || en.LogName == want) {
				out = append(out, en)
			}
		}
	}
	// Oldest first, equal timestamps by insertId; RFC 3339 in UTC with the same layout sorts as text only
	// when the fractions have the same length, so the times are compared.
	slices.SortStableFunc(out, func(a, b Entry) int {
		if c := strings.Compare(sortKey(a.Timestamp), sortKey(b.Timestamp)); c != 0 {
			return c
		}
		return strings.Compare(a.InsertID, b.InsertID)
	})
	if order == "timestamp desc" {
		slices.Reverse(out)
	}
	if offset > len(out) {
		offset = len(out)
	}
	page := out[offset:min(offset+size, len(out))]
	resp := struct {
		Entries       []Entry `json:"entries,omitempty"`
		NextPageToken string  `json:"nextPageToken,omitempty"`
	}{Entries: page}
	if offset+size < len(out) {
		resp.NextPageToken = strconv.Itoa(offset + size)
	}
	return resp, nil
}

// sortKey makes an RFC 3339 UTC time sortable as text: its fraction padded to nine digits.
func sortKey(ts string) string {
	base, frac, _ := strings.Cut(strings.TrimSuffix(ts, "Z"), ".")
	return base + "." + frac + strings.Repeat("0", 9-min(9, len(frac)))
}
