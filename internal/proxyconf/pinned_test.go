package proxyconf_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/proxyconftest"
)

var updatePinned = flag.Bool("update-pinned", false, "rewrite testdata/pinned from the renderer (only for a change every existing proxy must take)")

// TestExistingConfigsRenderAsBefore pins the squid.conf of every parse case that sets no rule set, denied
// destination or client CA, with and without TLS, to what the renderer wrote before those existed
// (testdata/pinned, recorded at 572f453; "several users", added by the users change, at 53cfe1f). A proxy
// applied by an earlier version then keeps its squid.conf byte for byte: the backends that keep the rendered
// file (SSM parameters, GCE metadata) see no change, and its traffic is judged as before.
func TestExistingConfigsRenderAsBefore(t *testing.T) {
	t.Parallel()
	opts := proxyconf.RenderOptions{OwnAddressesFile: proxyconf.OwnAddressesPath}
	cert, key := proxyconftest.TLSPair()
	cases := map[string]proxyconf.Settings{}
	for name, s := range proxyconftest.ParseCases() {
		if len(s.RuleSets) > 0 || len(s.DeniedDestinations) > 0 || (s.TLS != nil && s.TLS.ClientCAPEM != "") {
			continue
		}
		cases[name] = s
		// The same with a TLS listener (its certificate is not in squid.conf, only the paths).
		s.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key}
		cases[name+" tls"] = s
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conf, err := proxyconf.RenderSquidConf(s, opts)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "pinned", strings.ReplaceAll(name, " ", "-")+".conf")
			if *updatePinned {
				if err := os.WriteFile(path, conf, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (a new case without a rule set is recorded with -update-pinned)", err)
			}
			if string(conf) != string(want) {
				t.Errorf("squid.conf of %q differs from %s, which every existing proxy runs:\n%s", name, path, lineDiff(string(want), string(conf)))
			}
		})
	}
}

// lineDiff lists the lines only one side has, enough to see what moved.
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var out []string
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			out = append(out, "+ "+l)
		}
	}
	if len(out) == 0 {
		return "(the same lines in another order)"
	}
	return strings.Join(out, "\n")
}
