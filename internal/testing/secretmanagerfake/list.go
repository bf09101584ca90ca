package secretmanagerfake

import (
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"cloud.google.com/go/secretmanager/apiv1/secretmanagerpb"
	"google.golang.org/protobuf/proto"
)

// maxPageSize caps a list's page_size (ListSecretsRequest.page_size: "If the number is greater than 25000,
// it is capped at 25000").
const maxPageSize = 25000

// listSecrets lists the project's secrets that match the filter (S14), newest first, in pages: page_size 0
// lets the server choose (the fake: the cap), a negative one is INVALID_ARGUMENT; page_token is one the fake
// gave for the same filter, else INVALID_ARGUMENT. total_size counts the secrets, 0 when a filter is set.
func (s *Server) listSecrets(r *http.Request, member, project string) (proto.Message, *apiError) {
	if !s.adminMay(member, "secretmanager.secrets.list") {
		return nil, denied("secretmanager.secrets.list", "projects/"+project)
	}
	q := r.URL.Query()
	filter := q.Get("filter")
	match, err := parseFilter(filter)
	var unmodelled errUnmodelled
	switch {
	case errors.As(err, &unmodelled):
		return nil, newAPIError(http.StatusNotImplemented, "UNIMPLEMENTED", err.Error())
	case err != nil:
		return nil, invalid("Invalid filter [%s]: %v", filter, err)
	}
	size := maxPageSize
	if v := q.Get("pageSize"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, invalid("Invalid page_size [%s]: it must not be negative.", v)
		}
		if n > 0 {
			size = min(n, maxPageSize)
		}
	}
	offset := 0
	if tok := q.Get("pageToken"); tok != "" {
		if offset, err = readPageToken(tok, filter); err != nil {
			return nil, invalid("Invalid page_token [%s].", tok)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*secretmanagerpb.Secret
	for k, sec := range s.secrets {
		if p, _, _ := strings.Cut(k, "/"); p == project && match.match(sec.pb) {
			all = append(all, sec.pb)
		}
	}
	// Newest first (ListSecretsResponse.secrets), by name when created in the same instant.
	slices.SortFunc(all, func(a, b *secretmanagerpb.Secret) int {
		if c := b.GetCreateTime().AsTime().Compare(a.GetCreateTime().AsTime()); c != 0 {
			return c
		}
		return cmp.Compare(a.GetName(), b.GetName())
	})
	out := &secretmanagerpb.ListSecretsResponse{}
	if filter == "" {
		out.TotalSize = int32(len(all))
	}
	offset = min(offset, len(all))
	end := min(offset+size, len(all))
	for _, sec := range all[offset:end] {
		out.Secrets = append(out.Secrets, proto.CloneOf(sec))
	}
	if end < len(all) {
		out.NextPageToken = pageToken(end, filter)
	}
	return out, nil
}

// pageToken is the fake's own: where the next page starts, bound to the filter it was given for.
func pageToken(offset int, filter string) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d/%x", offset, fnv64(filter)))
}

func readPageToken(tok, filter string) (int, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, err
	}
	off, sum, ok := strings.Cut(string(b), "/")
	n, err := strconv.Atoi(off)
	if !ok || err != nil || n < 0 || sum != fmt.Sprintf("%x", fnv64(filter)) {
		return 0, fmt.Errorf("not a token of this list")
	}
	return n, nil
}
