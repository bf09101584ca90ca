package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

// TestDataplaneRender: each size renders a squid.conf Squid takes without a complaint; the large one holds
// the longest lists a proxy accepts, over its own lists and its rule sets (the benchmark's "large" follows the
// limits when they move); and the login the load generators send is one Squid's helper accepts against the
// rendered password file.
func TestDataplaneRender(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		args                      []string
		destinations, clientLists int // acl lines of each list are counted by their values
		ruleSets                  int
		login                     bool
	}{
		"small":     {[]string{"-size", "small"}, smallDestinations, 1, 0, false},
		"large TLS": {[]string{"-size", "large", "-tls"}, proxyconf.MaxAllowedDestinations, proxyconf.MaxAllowedClientCIDRs, largeRuleSets, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := squidtest.Dir(t)
			args := append([]string{"dataplane-render", "-dir", dir, "-listen", "198.18.0.2", "-origin", "origin.bench.example",
				"-client", "198.18.0.0/24"}, tc.args...)
			if err := run(context.Background(), args, nil, &bytes.Buffer{}); err != nil {
				t.Fatal(err)
			}
			conf, err := os.ReadFile(filepath.Join(dir, "squid.conf"))
			if err != nil {
				t.Fatal(err)
			}
			out, complaints, err := squidtest.Complaints(t, conf)
			if err != nil {
				t.Fatalf("squid -k parse: %v\n%s", err, out)
			}
			for _, line := range complaints {
				// Squid 5.7 says so of every https_port with tls-min-version=1.2, and of nothing else: it is
				// the project's TLS listener, which the proxyconf tests prove, not the benchmark's to change.
				if !strings.HasSuffix(line, "ERROR: Unknown TLS option ") {
					t.Errorf("squid -k parse: %s", line)
				}
			}
			if got := aclValues(string(conf), "dstdomain", ".example"); got != tc.destinations {
				t.Errorf("%d destinations rendered, want %d", got, tc.destinations)
			}
			if got := aclValues(string(conf), "src", ""); got != tc.clientLists {
				t.Errorf("%d client ranges rendered, want %d", got, tc.clientLists)
			}
			if got := strings.Count(string(conf), "annotate_transaction ruleset="); got != tc.ruleSets {
				t.Errorf("%d rule sets rendered, want %d", got, tc.ruleSets)
			}
			for _, want := range []string{"origin.bench.example", "198.18.0.0/24"} {
				if !strings.Contains(string(conf), " "+want) {
					t.Errorf("the config does not name %s", want)
				}
			}
			// The own-address guard every backend ships, over the proxy's address.
			own, err := os.ReadFile(filepath.Join(dir, "own-addresses"))
			if err != nil || strings.TrimSpace(string(own)) != "198.18.0.2" || !strings.Contains(string(conf), `acl own_addresses dst "`+filepath.Join(dir, "own-addresses")+`"`) {
				t.Errorf("the own-address guard is not rendered over the proxy's address (own-addresses %q, %v)", own, err)
			}
			auth, err := os.ReadFile(filepath.Join(dir, "client-auth"))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.login {
				if len(auth) != 0 {
					t.Errorf("client-auth holds %d bytes without a login", len(auth))
				}
				return
			}
			cred, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(string(auth), "Basic "))
			if err != nil {
				t.Fatalf("client-auth: %v", err)
			}
			user, password, _ := strings.Cut(string(cred), ":")
			helper := exec.Command(proxyconf.AuthHelperPath, filepath.Join(dir, "passwd"))
			helper.Stdin = strings.NewReader(user + " " + password + "\n")
			answer, err := helper.CombinedOutput()
			if err != nil || strings.TrimSpace(string(answer)) != "OK" {
				t.Errorf("the auth helper answered %q (%v) to the login client-auth holds", answer, err)
			}
		})
	}
}

// aclValues counts the values ending in suffix of every acl of type typ, over all their lines (the renderer
// splits long lists, and writes one list per rule set).
func aclValues(conf, typ, suffix string) int {
	n := 0
	for _, line := range strings.Split(conf, "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && f[0] == "acl" && f[2] == typ {
			for _, v := range f[3:] {
				if v != "-n" && strings.HasSuffix(v, suffix) {
					n++
				}
			}
		}
	}
	return n
}
