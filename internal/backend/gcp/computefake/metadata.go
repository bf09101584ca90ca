package computefake

import (
	"io"
	"net/http"
	"strings"
)

// MetadataInstance chooses which instance the metadata server paths describe: the one whose startup script
// a test runs as the guest environment would.
func (s *Server) MetadataInstance(project, zone, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mdKey = key(project, zone, name)
}

// MetadataHandler serves only the metadata server paths, for a listener the test chooses
// (169.254.169.254:80 inside a network namespace).
func (s *Server) MetadataHandler() http.Handler { return http.HandlerFunc(s.serveMetadata) }

// serveMetadata answers the GCE metadata server paths the startup script uses: instance attributes (read) and
// guest attributes (written back). Like the real server it refuses requests without Metadata-Flavor: Google,
// which stops a proxied or redirected request from reading it.
func (s *Server) serveMetadata(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Metadata-Flavor") != "Google" {
		http.Error(w, "Missing Metadata-Flavor:Google header.", http.StatusForbidden)
		return
	}
	w.Header().Set("Metadata-Flavor", "Google")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	in, ok := s.instances[s.mdKey]
	if !ok {
		http.Error(w, "no instance chosen", http.StatusNotFound)
		return
	}
	const attrs, guest = "/computeMetadata/v1/instance/attributes/", "/computeMetadata/v1/instance/guest-attributes/"
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, attrs):
		k := strings.TrimPrefix(r.URL.Path, attrs)
		for _, it := range in.GetMetadata().GetItems() {
			if it.GetKey() == k {
				w.Header().Set("Content-Type", "application/text")
				_, _ = io.WriteString(w, it.GetValue())
				return
			}
		}
		http.Error(w, "not found", http.StatusNotFound)
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, guest):
		p := strings.TrimPrefix(r.URL.Path, guest)
		if strings.Count(p, "/") != 1 {
			http.Error(w, "guest attribute path must be namespace/key", http.StatusBadRequest)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if s.guest[s.mdKey] == nil {
			s.guest[s.mdKey] = map[string]string{}
		}
		s.guest[s.mdKey][p] = string(b)
	default:
		http.Error(w, "not implemented by computefake", http.StatusNotImplemented)
	}
}
