package computefake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

const apiPrefix = "/compute/v1/projects/"

// statusWriter remembers the status for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/computeMetadata/") {
		s.serveMetadata(w, r)
		return
	}
	s.mu.Lock()
	f := s.fault(r)
	arrived := s.now()
	s.mu.Unlock()
	status := 0
	defer func() {
		s.mu.Lock()
		s.log = append(s.log, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Status: status, Time: arrived})
		s.mu.Unlock()
	}()
	if st, paused := s.servePaused(w, f, func(w http.ResponseWriter) int { return s.handle(w, r, nil) }); paused {
		status = st
		return
	}
	if f != nil && !f.After {
		status = f.apply(w)
		return
	}
	status = s.handle(w, r, f)
}

// handle checks and routes a request, and returns its status. With f (a fault that fires after), the work is
// done and the answer lost: f's answer is given instead.
func (s *Server) handle(w http.ResponseWriter, r *http.Request, f *Fault) int {
	s.mu.Lock()
	token := s.opts.Token
	s.mu.Unlock()
	if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
		writeError(w, http.StatusUnauthorized, "authError", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.")
		return http.StatusUnauthorized
	}
	if st, ok := s.serveResourceManager(w, r); ok {
		return st
	}
	// Every request is checked against the discovery document before any route sees it (discovery.go).
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "reading the request body: "+err.Error())
		return http.StatusBadRequest
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if e := s.checkRequest(r, body); e != nil {
		writeError(w, e.status, e.reason, e.message)
		return e.status
	}
	// Then the caller's permissions (iam.go), which may depend on what the fake holds (an address, an instance).
	s.mu.Lock()
	denied := s.authorize(r, body)
	s.mu.Unlock()
	if denied != nil {
		writeError(w, denied.status, denied.reason, denied.message)
		return denied.status
	}
	if f != nil {
		// Do the work, then lose the answer.
		sw := &statusWriter{ResponseWriter: discard{h: w.Header()}}
		s.route(sw, r)
		return f.apply(w)
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	s.route(sw, r)
	return sw.status
}

// discard is a ResponseWriter that throws the answer away.
type discard struct{ h http.Header }

func (d discard) Header() http.Header         { return http.Header{} }
func (d discard) Write(b []byte) (int, error) { return len(b), nil }
func (d discard) WriteHeader(int)             {}

// route dispatches /compute/v1/projects/{project}/... by its segments.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, apiPrefix) {
		notImplemented(w, r)
		return
	}
	p := strings.Split(strings.TrimPrefix(r.URL.Path, apiPrefix), "/")
	project := p[0]
	m := r.Method
	switch {
	case len(p) == 3 && p[1] == "aggregated" && p[2] == "instances" && m == http.MethodGet:
		s.aggregatedInstances(w, r, project)
	case len(p) == 3 && p[1] == "aggregated" && p[2] == "addresses" && m == http.MethodGet:
		s.aggregatedAddresses(w, r, project)
	case len(p) == 3 && p[1] == "aggregated" && p[2] == "forwardingRules" && m == http.MethodGet:
		s.aggregatedRules(w, r, project)
	case len(p) == 3 && p[1] == "zones" && m == http.MethodGet:
		s.getZone(w, project, p[2])
	case len(p) == 3 && p[1] == "regions" && m == http.MethodGet:
		s.getRegion(w, project, p[2])
	case len(p) == 5 && p[1] == "zones" && p[3] == "operations" && m == http.MethodGet:
		s.getOp(w, r, project, "zones/"+p[2], p[4], false)
	case len(p) == 6 && p[1] == "zones" && p[3] == "operations" && p[5] == "wait" && m == http.MethodPost:
		s.getOp(w, r, project, "zones/"+p[2], p[4], true)
	case len(p) == 5 && p[1] == "regions" && p[3] == "operations" && m == http.MethodGet:
		s.getOp(w, r, project, "regions/"+p[2], p[4], false)
	case len(p) == 6 && p[1] == "regions" && p[3] == "operations" && p[5] == "wait" && m == http.MethodPost:
		s.getOp(w, r, project, "regions/"+p[2], p[4], true)
	case len(p) == 4 && p[1] == "zones" && p[3] == "instances" && m == http.MethodPost:
		s.insertInstance(w, r, project, p[2])
	case len(p) == 4 && p[1] == "zones" && p[3] == "instances" && m == http.MethodGet:
		s.listInstances(w, r, project, p[2])
	case len(p) == 5 && p[1] == "zones" && p[3] == "instances" && m == http.MethodGet:
		s.getInstance(w, project, p[2], p[4])
	case len(p) == 5 && p[1] == "zones" && p[3] == "instances" && m == http.MethodDelete:
		s.deleteInstance(w, project, p[2], p[4])
	case len(p) == 6 && p[1] == "zones" && p[3] == "instances" && p[5] == "setLabels" && m == http.MethodPost:
		s.setLabels(w, r, project, p[2], p[4])
	case len(p) == 6 && p[1] == "zones" && p[3] == "instances" && p[5] == "setMetadata" && m == http.MethodPost:
		s.setMetadata(w, r, project, p[2], p[4])
	case len(p) == 6 && p[1] == "zones" && p[3] == "instances" && p[5] == "getGuestAttributes" && m == http.MethodGet:
		s.getGuestAttributes(w, r, project, p[2], p[4])
	case len(p) == 4 && p[1] == "regions" && p[3] == "addresses" && m == http.MethodPost:
		s.insertAddress(w, r, project, p[2])
	case len(p) == 5 && p[1] == "regions" && p[3] == "addresses" && m == http.MethodGet:
		s.getAddress(w, project, p[2], p[4])
	case len(p) == 5 && p[1] == "regions" && p[3] == "addresses" && m == http.MethodDelete:
		s.deleteAddress(w, project, p[2], p[4])
	default:
		if !s.routeLB(w, r, p) {
			notImplemented(w, r)
		}
	}
}

func notImplemented(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotImplemented, "notImplemented", fmt.Sprintf("computefake does not implement %s %s", r.Method, r.URL.Path))
}

// readBody decodes the request strictly: a field computepb does not know is a 400, as a typo in the
// backend's request would be a silent no-op on a lenient fake.
func readBody(w http.ResponseWriter, r *http.Request, m proto.Message) bool {
	b, err := io.ReadAll(r.Body)
	if err == nil {
		err = protojson.UnmarshalOptions{DiscardUnknown: false}.Unmarshal(b, m)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "Invalid JSON payload received. "+err.Error())
		return false
	}
	return true
}

// writeProto answers 200 with m, encoded as the API encodes it.
func writeProto(w http.ResponseWriter, m proto.Message) {
	status := http.StatusOK
	b, err := protojson.Marshal(m)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":500,"message":"encoding"}}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeError writes Compute Engine's error body: {"error": {code, message, errors: [{domain, reason, message}]}}.
func writeError(w http.ResponseWriter, status int, reason, message string) {
	body := map[string]any{"error": map[string]any{
		"code": status, "message": message,
		"errors": []map[string]string{{"domain": "global", "reason": reason, "message": message}},
	}}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func (s *Server) link(project, rest string) string {
	return s.URL + apiPrefix + project + "/" + rest
}
