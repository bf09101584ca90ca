package computefake

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// Pause holds one request in the fake until the test lets it go on (Resume) or drops it (Drop).
type Pause = testutil.Pause

// PauseNext holds the next request of method ("" any) whose path matches pathRE (nil any): before the fake
// handles it, or, with after, once it is handled (the change made; for an insert with no operation latency,
// the object exists) and before it is answered. The request waits until Resume or Drop; Reached is closed
// once it waits. Close drops every pause still holding a request, so that the server can close.
func (s *Server) PauseNext(method string, pathRE *regexp.Regexp, after bool) *Pause {
	p := testutil.NewPause()
	s.AddFault(Fault{Method: method, PathRE: pathRE, After: after, Times: 1, pause: p})
	s.mu.Lock()
	s.pauses = append(s.pauses, p)
	s.mu.Unlock()
	return p
}

// dropPauses drops every pause, for Close.
func (s *Server) dropPauses() {
	s.mu.Lock()
	pauses := s.pauses
	s.mu.Unlock()
	for _, p := range pauses {
		p.Drop()
	}
}

// servePaused serves a request under the pause of f, if it has one, and reports whether it did: held before
// it is handled (then handled as any request, or dropped unhandled), or handled and held before its answer
// (then answered, or dropped with its change made). It returns the status the log records, 0 for a dropped
// connection. The caller does not hold s.mu.
func (s *Server) servePaused(w http.ResponseWriter, f *Fault, handle func(http.ResponseWriter) int) (int, bool) {
	if f == nil || f.pause == nil {
		return 0, false
	}
	if !f.After {
		if !f.pause.Hold() {
			dropConnection(w)
			return 0, true
		}
		return handle(w), true
	}
	rec := httptest.NewRecorder()
	status := handle(rec)
	if !f.pause.Hold() {
		dropConnection(w)
		return 0, true
	}
	maps.Copy(w.Header(), rec.Header())
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
	return status, true
}

// dropConnection closes the connection without an answer.
func dropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			_ = c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
