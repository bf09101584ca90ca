package computefake

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
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

// serveMetadata answers the GCE metadata server paths the startup script uses: instance attributes and the
// network interfaces' addresses (read), and guest attributes (written back, and read). Like the real server it
// refuses requests without Metadata-Flavor: Google, which stops a proxied or redirected request from reading it,
// and guest attribute requests while guest attributes are off for the instance (guestWrite).
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
	const nics = "/computeMetadata/v1/instance/network-interfaces/"
	const token = "/computeMetadata/v1/instance/service-accounts/default/token"
	switch {
	case r.Method == http.MethodGet && r.URL.Path == token:
		// R28: the token of the account the VM runs as; none without one.
		sas := in.GetServiceAccounts()
		if len(sas) == 0 || s.opts.ServiceAccountToken == nil {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"access_token":%q,"expires_in":3599,"token_type":"Bearer"}`, s.opts.ServiceAccountToken(sas[0].GetEmail()))
	case r.Method == http.MethodGet && r.URL.Path == "/computeMetadata/v1/instance/id":
		// R33: the instance's numeric id, its zone as projects/NUMBER/zones/ZONE, and the project's ID.
		w.Header().Set("Content-Type", "application/text")
		_, _ = io.WriteString(w, strconv.FormatUint(in.GetId(), 10))
	case r.Method == http.MethodGet && r.URL.Path == "/computeMetadata/v1/instance/zone":
		project, rest, _ := strings.Cut(s.mdKey, "/")
		zone, _, _ := strings.Cut(rest, "/")
		w.Header().Set("Content-Type", "application/text")
		_, _ = fmt.Fprintf(w, "projects/%d/zones/%s", projectNumber(project), zone)
	case r.Method == http.MethodGet && r.URL.Path == "/computeMetadata/v1/project/project-id":
		project, _, _ := strings.Cut(s.mdKey, "/")
		w.Header().Set("Content-Type", "application/text")
		_, _ = io.WriteString(w, project)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, nics):
		v, ok := networkInterfaceValue(in, strings.TrimPrefix(r.URL.Path, nics))
		if !ok {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/text")
		_, _ = io.WriteString(w, v)
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
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		project, _, _ := strings.Cut(s.mdKey, "/")
		if e := s.guestWrite(project, s.mdKey, in, strings.TrimPrefix(r.URL.Path, guest), string(b)); e != nil {
			http.Error(w, e.message, e.status)
		}
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, guest):
		project, _, _ := strings.Cut(s.mdKey, "/")
		if !s.guestAttributesEnabled(project, in) {
			http.Error(w, GuestAttributesDisabled, http.StatusForbidden)
			return
		}
		v, ok := s.guest[s.mdKey][strings.TrimPrefix(r.URL.Path, guest)]
		if !ok {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/text")
		_, _ = io.WriteString(w, v)
	default:
		http.Error(w, "not implemented by computefake", http.StatusNotImplemented)
	}
}

// networkInterfaceValue answers the paths under instance/network-interfaces/ as the metadata server does: a
// directory lists its entries one a line, each ending in "/", and a leaf holds its value with no newline.
// Served: N/ip, N/access-configs/ and N/access-configs/M/external-ip.
func networkInterfaceValue(in *computepb.Instance, p string) (string, bool) {
	list := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "%d/\n", i)
		}
		return b.String()
	}
	nics := in.GetNetworkInterfaces()
	if p == "" {
		return list(len(nics)), true
	}
	parts := strings.Split(strings.TrimSuffix(p, "/"), "/")
	n, err := strconv.Atoi(parts[0])
	if err != nil || n < 0 || n >= len(nics) {
		return "", false
	}
	nic := nics[n]
	switch {
	case len(parts) == 2 && parts[1] == "ip":
		return nic.GetNetworkIP(), true
	case len(parts) == 2 && parts[1] == "access-configs":
		return list(len(nic.GetAccessConfigs())), true
	case len(parts) == 4 && parts[1] == "access-configs" && parts[3] == "external-ip":
		m, err := strconv.Atoi(parts[2])
		if err != nil || m < 0 || m >= len(nic.GetAccessConfigs()) {
			return "", false
		}
		return nic.GetAccessConfigs()[m].GetNatIP(), true
	}
	return "", false
}
