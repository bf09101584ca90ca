// Package loggingfake is a stateful Cloud Logging REST server (v2) for tests: entries.write, which a proxy VM
// calls with its service account's token to ship its access log, and entries.list, with which a test (or
// anyone granted the viewer role) reads the entries back. The client library is not in the project's module
// graph, so bodies are decoded field by field against the documented JSON representation, refusing any name
// the API does not have (L1). It enforces the documented rules listed in README.md, each with its source;
// where the fake is more lenient than the service, that is a bug of the fake.
//
// Principals are told apart by their bearer token (AddPrincipal); what each may do on a project is what the
// roles granted to it there hold (GrantRole): roles/logging.logWriter writes, roles/logging.viewer lists.
package loggingfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"
)

// The predefined roles the fake knows, with the permissions of theirs it checks ("Access control with IAM",
// Cloud Logging).
const (
	LogWriterRole = "roles/logging.logWriter"
	ViewerRole    = "roles/logging.viewer"
)

var rolePermissions = map[string][]string{
	LogWriterRole: {"logging.logEntries.create", "logging.logEntries.route"},
	ViewerRole:    {"logging.logEntries.list", "logging.logs.list"},
}

// Server is the fake. Its exported methods are safe for concurrent use with requests in flight.
type Server struct {
	URL string
	srv *httptest.Server

	mu         sync.Mutex
	now        func() time.Time
	principals map[string]string                     // bearer token -> IAM member
	grants     map[string]map[string]map[string]bool // project -> member -> permission
	entries    map[string][]Entry                    // project -> entries stored, in the order received
	writes     map[string][]time.Time                // project -> write requests in the last minute (L10)
	throttle   int                                   // the next writes answered 429 (Throttle)
	log        []Request
	seq        int
}

// Entry is a stored log entry, as entries.list answers it.
type Entry struct {
	LogName          string            `json:"logName"`
	Resource         MonitoredResource `json:"resource"`
	TextPayload      *string           `json:"textPayload,omitempty"`
	JSONPayload      json.RawMessage   `json:"jsonPayload,omitempty"`
	Timestamp        string            `json:"timestamp"`
	ReceiveTimestamp string            `json:"receiveTimestamp"`
	Severity         string            `json:"severity,omitempty"`
	InsertID         string            `json:"insertId"`
	Labels           map[string]string `json:"labels,omitempty"`
	Trace            string            `json:"trace,omitempty"`
	SpanID           string            `json:"spanId,omitempty"`
	TraceSampled     bool              `json:"traceSampled,omitempty"`
}

// MonitoredResource is an entry's resource: its type and labels.
type MonitoredResource struct {
	Type   string            `json:"type"`
	Labels map[string]string `json:"labels,omitempty"`
}

// Request is one request the server received.
type Request struct {
	Method, Path, Member string
	Status               int
	// Entries is how many entries a write carried.
	Entries int
}

// New starts a fake on a loopback port. Close it when done.
func New() *Server {
	s := &Server{now: time.Now, principals: map[string]string{}, grants: map[string]map[string]map[string]bool{},
		entries: map[string][]Entry{}, writes: map[string][]time.Time{}}
	s.srv = httptest.NewServer(s.Handler())
	s.URL = s.srv.URL
	return s
}

// Handler serves the fake's API, for a test that serves it elsewhere too (in a guest's network namespace,
// over TLS, as the real endpoint is).
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serve) }

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// AddPrincipal makes token the bearer token of member ("serviceAccount:EMAIL", "user:EMAIL").
func (s *Server) AddPrincipal(token, member string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.principals[token] = member
}

// GrantRole grants member role on project; the fake knows LogWriterRole and ViewerRole.
func (s *Server) GrantRole(project, member, role string) {
	perms, ok := rolePermissions[role]
	if !ok {
		panic("loggingfake: unknown role " + role)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grants[project] == nil {
		s.grants[project] = map[string]map[string]bool{}
	}
	if s.grants[project][member] == nil {
		s.grants[project][member] = map[string]bool{}
	}
	for _, p := range perms {
		s.grants[project][member][p] = true
	}
}

// Throttle makes the next n entries.write requests answer 429 RESOURCE_EXHAUSTED, as when the project's
// write quota is spent (L10), whatever the rate: a client's retry is then tested without sending 120,000
// requests a minute.
func (s *Server) Throttle(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttle = n
}

// Entries returns the entries of project stored in the log logID (decoded, as in the logName's LOG_ID),
// in the order they were received; those entries.list would not show (L7) are left out.
func (s *Server) Entries(project, logID string) []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Entry
	for _, e := range s.entries[project] {
		if e.LogName == logName(project, logID) && s.listable(e) {
			out = append(out, e)
		}
	}
	return out
}

// Requests returns what the server received.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// logName is the log's name as the API answers it, its LOG_ID URL-encoded (a slash as %2F).
func logName(project, logID string) string {
	return "projects/" + project + "/logs/" + strings.ReplaceAll(logID, "/", "%2F")
}

// apiError is an error answer in the JSON form of Google's REST APIs: {"error": {code, message, status,
// details}} (AIP-193, google.rpc.Status).
type apiError struct {
	code    int
	status  string
	message string
	details []map[string]any
}

func newAPIError(code int, status, message string, details ...map[string]any) *apiError {
	return &apiError{code: code, status: status, message: message, details: details}
}

func invalid(format string, args ...any) *apiError {
	return newAPIError(http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf(format, args...))
}

func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(e.code)
	body := map[string]any{"code": e.code, "message": e.message, "status": e.status}
	if len(e.details) > 0 {
		body["details"] = e.details
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": body})
}

// denied is the answer to a principal without permission on resource (L9): an ErrorInfo of reason
// IAM_PERMISSION_DENIED names the permission; the API does not say whether the resource exists.
func denied(permission, resource string) *apiError {
	return newAPIError(http.StatusForbidden, "PERMISSION_DENIED",
		fmt.Sprintf("Permission '%s' denied on resource '%s' (or it may not exist).", permission, resource),
		map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "IAM_PERMISSION_DENIED",
			"domain": "iam.googleapis.com", "metadata": map[string]string{"permission": permission}})
}

type response struct {
	http.ResponseWriter
	status int
}

func (r *response) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	rw := &response{ResponseWriter: w, status: http.StatusOK}
	member := s.authenticate(r)
	n := 0
	defer func() {
		s.mu.Lock()
		s.log = append(s.log, Request{Method: r.Method, Path: r.URL.Path, Member: member, Status: rw.status, Entries: n})
		s.mu.Unlock()
	}()
	if member == "" {
		// L11: Google APIs' standard 401.
		writeError(rw, newAPIError(http.StatusUnauthorized, "UNAUTHENTICATED",
			"Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."))
		return
	}
	var out any
	var e *apiError
	switch {
	case r.URL.Path == "/v2/entries:write" && r.Method == http.MethodPost:
		n, e = s.write(r, member)
		out = struct{}{}
	case r.URL.Path == "/v2/entries:list" && r.Method == http.MethodPost:
		out, e = s.list(r, member)
	case strings.HasPrefix(r.URL.Path, "/v2/"):
		e = newAPIError(http.StatusNotImplemented, "UNIMPLEMENTED", "the fake does not serve "+r.Method+" "+r.URL.Path)
	default:
		e = newAPIError(http.StatusNotFound, "NOT_FOUND", "The requested URL "+r.URL.Path+" was not found on this server.")
	}
	if e != nil {
		writeError(rw, e)
		return
	}
	rw.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_ = json.NewEncoder(rw).Encode(out)
}

// authenticate names the request's principal from its bearer token, "" for none or an unknown one (L11).
func (s *Server) authenticate(r *http.Request) string {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.principals[tok]
}

// may says whether member holds permission on project. The caller holds s.mu.
func (s *Server) may(member, project, permission string) bool {
	return s.grants[project][member][permission]
}
