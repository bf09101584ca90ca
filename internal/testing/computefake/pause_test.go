package computefake

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// A pause holds the one request it selects (by method and path), before or after the fake handles it: a
// request dropped before is never handled, one dropped after keeps its change and loses its answer, a
// resumed one is answered as if never held; requests it does not select, and the ones after it, pass.
func TestPauseNext(t *testing.T) {
	t.Parallel()
	const hcs = regionPath + "/healthChecks"
	hcRE := regexp.MustCompile(`/regions/us-central1/healthChecks$`)
	body := func(name string) string {
		return `{"name":"` + name + `","type":"HTTP","httpHealthCheck":{"port":3129,"requestPath":"/health"}}`
	}
	for name, tc := range map[string]struct {
		after, resume bool
		// existsHeld: the health check exists while the request is held; exists: once it was let go or
		// dropped; answered: the client has an answer (200), not a closed connection.
		existsHeld, exists, answered bool
	}{
		"before, dropped": {after: false, resume: false, existsHeld: false, exists: false, answered: false},
		"before, resumed": {after: false, resume: true, existsHeld: false, exists: true, answered: true},
		"after, dropped":  {after: true, resume: false, existsHeld: true, exists: true, answered: false},
		"after, resumed":  {after: true, resume: true, existsHeld: true, exists: true, answered: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := New(Options{})
			defer s.Close()
			p := s.PauseNext(http.MethodPost, hcRE, tc.after)
			// Not selected: another method on the path, another path.
			if code, b := send(t, s, http.MethodGet, hcs+"/none", ""); code != http.StatusNotFound {
				t.Fatalf("a GET under the paused path: %d %s", code, b)
			}
			if code, b := send(t, s, http.MethodPost, zoneAPath+"/instanceGroups", `{"name":"ig"}`); code != http.StatusOK {
				t.Fatalf("a POST elsewhere: %d %s", code, b)
			}
			type result struct {
				code int
				err  error
			}
			done := make(chan result, 1)
			go func() {
				code, _, err := try(s, http.MethodPost, hcs, body("held"))
				done <- result{code, err}
			}()
			<-p.Reached()
			if got := s.HealthCheck("p", "us-central1", "held") != nil; got != tc.existsHeld {
				t.Errorf("while held, the health check exists: %v, want %v", got, tc.existsHeld)
			}
			select {
			case r := <-done:
				t.Fatalf("the held request was answered (%d, %v) before it was let go", r.code, r.err)
			default:
			}
			// The pause fires once: the same request again passes while the first is held.
			if code, b := send(t, s, http.MethodPost, hcs, body("next")); code != http.StatusOK {
				t.Fatalf("the next request of the paused kind: %d %s", code, b)
			}
			if tc.resume {
				p.Resume()
			} else {
				p.Drop()
			}
			r := <-done
			if answered := r.err == nil && r.code == http.StatusOK; answered != tc.answered {
				t.Errorf("the held request's client got %d, %v; want answered %v", r.code, r.err, tc.answered)
			}
			if got := s.HealthCheck("p", "us-central1", "held") != nil; got != tc.exists {
				t.Errorf("once let go, the health check exists: %v, want %v", got, tc.exists)
			}
		})
	}
}

// Close drops a request a pause still holds, instead of waiting for it forever.
func TestCloseDropsAPausedRequest(t *testing.T) {
	t.Parallel()
	s := New(Options{})
	p := s.PauseNext("", nil, false)
	done := make(chan error, 1)
	go func() {
		_, _, err := try(s, http.MethodGet, regionPath+"/healthChecks/x", "")
		done <- err
	}()
	<-p.Reached()
	s.Close()
	if err := <-done; err == nil {
		t.Error("the held request was answered after Close, want its connection closed")
	}
}

func try(s *Server, method, path, body string) (int, string, error) {
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func send(t *testing.T, s *Server, method, path, body string) (int, string) {
	t.Helper()
	code, b, err := try(s, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, b
}
