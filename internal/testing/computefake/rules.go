package computefake

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"cloud.google.com/go/compute/apiv1/computepb"
)

// The documented rules the fake enforces beyond the discovery document's shapes. README.md lists each with
// its source; rules_test.go proves each one.

// checkRequest checks r against the discovery document (discovery.go). A document that cannot be read makes
// every request fail, loudly: a fake that silently stopped checking would pass what Compute Engine refuses.
func (s *Server) checkRequest(r *http.Request, body []byte) *apiError {
	if !strings.HasPrefix(r.URL.Path, apiPrefix) {
		return nil // not the Compute API: routed as before, and answered 501
	}
	d, err := discovery()
	if err != nil {
		return &apiError{http.StatusInternalServerError, "internalError", "computefake: " + err.Error()}
	}
	_, e := d.check(r, body)
	return e
}

// Metadata limits, from "Setting custom metadata" (Limitations) and the discovery document's Metadata.items:
// all keys and values together less than 512 KB, each value at most 256 KiB, each key matching
// [a-zA-Z0-9-_]{1,128} (checked from the document's pattern, discovery.go).
const (
	MaxMetadataValueBytes = 262144
	MaxMetadataTotalBytes = 512 * 1024
)

// checkMetadata checks a metadata body (insert or setMetadata) against the documented limits. field is the
// body's path to it, as the API names fields in its answers.
func checkMetadata(items []*computepb.Items, field string) *apiError {
	total := 0
	seen := map[string]bool{}
	for i, it := range items {
		k, v := it.GetKey(), it.GetValue()
		if len(v) > MaxMetadataValueBytes {
			return invalid("Invalid value for field '%s.items[%d].value': value of metadata key '%s' is %d bytes; the limit is %d bytes.",
				field, i, k, len(v), MaxMetadataValueBytes)
		}
		if seen[k] {
			return invalid("Invalid value for field '%s': duplicate metadata key '%s'.", field, k)
		}
		seen[k] = true
		total += len(k) + len(v)
	}
	if total >= MaxMetadataTotalBytes {
		return invalid("Invalid value for field '%s': the metadata keys and values total %d bytes; they must be less than %d bytes.",
			field, total, MaxMetadataTotalBytes)
	}
	return nil
}

// Labels, from "Labels overview" (Requirements for labels): at most 64 on a resource; keys 1 to 63
// characters, starting with a lowercase letter or an international character; values 0 to 63; both only
// lowercase letters, digits, '_' and '-' (international characters allowed).
const MaxLabels = 64

func labelRune(r rune) bool {
	return r == '_' || r == '-' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') ||
		(r > unicode.MaxASCII && (unicode.IsLower(r) || unicode.Is(unicode.Lo, r) || unicode.IsDigit(r)))
}

func validLabelPart(s string, key bool) bool {
	n := utf8.RuneCountInString(s)
	if n > 63 || (key && n == 0) || !utf8.ValidString(s) {
		return false
	}
	for i, r := range s {
		if !labelRune(r) {
			return false
		}
		if key && i == 0 && (r == '_' || r == '-' || ('0' <= r && r <= '9')) {
			return false
		}
	}
	return true
}

func checkLabels(labels map[string]string, field string) *apiError {
	if len(labels) > MaxLabels {
		return invalid("Invalid value for field '%s': %d labels; a resource can have at most %d.", field, len(labels), MaxLabels)
	}
	for _, k := range sortedKeys(labels) {
		if !validLabelPart(k, true) {
			return invalid("Invalid value for field '%s': '%s'. Label keys are 1 to 63 lowercase letters, digits, '_' or '-' and start with a lowercase letter.", field, k)
		}
		if v := labels[k]; !validLabelPart(v, false) {
			return invalid("Invalid value for field '%s.%s': '%s'. Label values are at most 63 lowercase letters, digits, '_' or '-'.", field, k, v)
		}
	}
	return nil
}

// EnableGuestAttributes is the metadata key that turns guest attributes on ("Setting and querying guest
// attributes": they are off by default, and on where the instance's or the project's metadata sets it TRUE;
// the instance's value wins, so FALSE there excludes one VM from a project that enables them).
const EnableGuestAttributes = "enable-guest-attributes"

// metadataBool reads a metadata boolean as Compute Engine does ("Setting custom metadata", Boolean values):
// TRUE, Y, Yes, 1 and FALSE, N, No, 0, in any case. ok is false for anything else.
func metadataBool(v string) (value, ok bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "y", "yes", "1":
		return true, true
	case "false", "n", "no", "0":
		return false, true
	}
	return false, false
}

// guestAttributesEnabled reports whether in may write and be queried for guest attributes. The caller holds s.mu.
func (s *Server) guestAttributesEnabled(project string, in *computepb.Instance) bool {
	if s.orgPolicies[project].guestAttributesOff {
		return false // R26: the organization policy overrides any metadata
	}
	for _, it := range in.GetMetadata().GetItems() {
		if it.GetKey() == EnableGuestAttributes {
			on, ok := metadataBool(it.GetValue())
			return on && ok
		}
	}
	on, ok := metadataBool(s.projectMeta[project][EnableGuestAttributes])
	return on && ok
}

// The guest attribute query limits of "Setting and querying guest attributes" (When to use guest
// attributes): at most 10 queries a minute per VM, in bursts of at most 3 a second.
const (
	GuestQueriesPerMinute = 10
	GuestQueriesPerSecond = 3
)

// guestQueryAllowed records a getGuestAttributes query of the instance at key and says whether it is within
// the limits. Every query counts, refused or not, as every request reaches the server. The caller holds s.mu.
func (s *Server) guestQueryAllowed(key string) bool {
	now := s.now()
	var kept []time.Time
	inSecond := 0
	for _, t := range s.guestQueries[key] {
		if now.Sub(t) < time.Minute {
			kept = append(kept, t)
			if now.Sub(t) < time.Second {
				inSecond++
			}
		}
	}
	allowed := len(kept) < GuestQueriesPerMinute && inSecond < GuestQueriesPerSecond
	s.guestQueries[key] = append(kept, now)
	if !allowed {
		s.guestViolations++
	}
	return allowed
}

// guestPathRE is a guest attribute's path below guest-attributes/: a namespace and a key, each of letters,
// digits, '_' and '-' ("Setting and querying guest attributes", Set guest attributes).
var guestPathRE = regexp.MustCompile(`^[A-Za-z0-9_-]+/[A-Za-z0-9_-]+$`)

// guestNotFound is the API's answer for a query path under which nothing was written (the wording gcloud
// itself matches on).
func guestNotFound(queryPath string) *apiError {
	return &apiError{http.StatusNotFound, "notFound", fmt.Sprintf("The resource '%s' of type 'Guest Attribute' was not found.", queryPath)}
}

// GuestAttributesDisabled is what the metadata server answers, 403, to a guest that reads or writes guest
// attributes while they are off (not in Google's documentation; seen in public code that reads the server).
const GuestAttributesDisabled = "Guest attributes endpoint access is disabled."
