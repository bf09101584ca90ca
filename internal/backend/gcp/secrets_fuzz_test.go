package gcp

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// The metadata items a proxy's settings render to hold its password, the password's hash and its TLS key in
// the documented keys only, whatever the settings; the Instance read back from them holds none either. The
// seed corpus runs with every `go test`; fuzz by hand with
// `go test -run '^$' -fuzz FuzzMetadataItemsHoldNoSecret -fuzztime 30s ./internal/backend/gcp/`.
func FuzzMetadataItemsHoldNoSecret(f *testing.F) {
	cert, key := testutil.SelfSignedPEM(f, "proxy.test")
	f.Add("u", "correct-horse-battery", ".example.com", true)
	f.Add("admin", `p@ss w0rd'"$`+"`"+`\{}[]`, "api.example.org", true)
	f.Add("u", "example.com", "example.com", false) // the password is also a destination: found by chance
	f.Add("proxy-user", "3128-3128", ".example.com", true)
	f.Add("u", "PRIVATE KEY", ".example.com", false)
	f.Fuzz(func(t *testing.T, user, password, destination string, withTLS bool) {
		s := proxyconf.Settings{
			Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{destination},
			Users: []proxyconf.BasicAuth{{Username: user, Password: password}},
		}
		if withTLS {
			s.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key}
		}
		items, err := renderedItems(s)
		if err != nil {
			t.Skip("settings refused before anything is written")
		}
		hashLine := items[gcpguest.MetadataHtpasswd]
		_, hash, _ := strings.Cut(strings.TrimSpace(hashLine), ":")
		secrets := map[string]string{"the htpasswd hash": hash}
		if withTLS {
			secrets["the private key"] = key
		}
		// A password that the same settings render anyway, with another password, is there by chance (it is
		// the username, a destination, a word of squid.conf): only a password that is not is looked for.
		placebo := s
		placebo.Users = []proxyconf.BasicAuth{{Username: user, Password: "placebo-password-0"}}
		if other, err := renderedItems(placebo); err == nil && !occursOutsideSecrets(other, password) {
			secrets["the password"] = password
		}
		for k, v := range items {
			if documentedSecretKeys[k] {
				continue
			}
			if found := leaks(v, secrets); len(found) > 0 && !inUserInput(s, privateKeyMarker) {
				t.Fatalf("metadata item %s holds %s", k, strings.Join(found, ", "))
			}
		}

		// What Get makes of these items, which the provider logs and maps into state, holds none either.
		in := &computepb.Instance{
			Name: proto.String("egress-fuzz"), Zone: proto.String("zones/us-central1-a"), Status: proto.String("RUNNING"),
			Labels:   map[string]string{backend.LabelManagedBy: backend.ManagedByValue},
			Metadata: &computepb.Metadata{},
		}
		for _, k := range sortedKeys(items) {
			in.Metadata.Items = append(in.Metadata.Items, &computepb.Items{Key: proto.String(k), Value: proto.String(items[k])})
		}
		inst, err := toInstance(testProject, in)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(inst)
		if found := leaks(string(b), secrets); len(found) > 0 && !inUserInput(s, privateKeyMarker) {
			t.Fatalf("the Instance read back holds %s", strings.Join(found, ", "))
		}
	})
}

// renderedItems are the metadata items Create writes for s, by key.
func renderedItems(s proxyconf.Settings) (map[string]string, error) {
	r, err := renderProxy(s, storedSpec{Image: DefaultImage}, "")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, it := range r.items(nil) {
		out[it.GetKey()] = it.GetValue()
	}
	return out, nil
}

// occursOutsideSecrets reports whether s is found in an item other than the documented secret keys.
func occursOutsideSecrets(items map[string]string, s string) bool {
	for k, v := range items {
		if !documentedSecretKeys[k] && slices.Contains(leaks(v, map[string]string{"s": s}), "s") {
			return true
		}
	}
	return false
}

// inUserInput reports whether the user's own words already contain s, which the readable settings then carry.
func inUserInput(s proxyconf.Settings, sub string) bool {
	return strings.Contains(strings.Join(proxyconf.Usernames(s.Users), " "), sub) || strings.Contains(strings.Join(s.AllowedDestinations, " "), sub)
}
