package main

import (
	"crypto/x509"
	"encoding/pem"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	kbackend "github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Plain Squid's pod keeps the rendered pod's log, pid and core dump places (the root file system is
// read-only there) and nothing of its access rules.
func TestPlainSquidConfInPod(t *testing.T) {
	cm, _, _, err := kbackend.BenchObjects("dp-squid-plain", "ns", "image")
	if err != nil {
		t.Fatal(err)
	}
	rendered := cm.Data[guest.ConfigKey]
	conf := plainSquidConf(rendered)
	lines := map[string]string{}
	for _, l := range strings.Split(conf, "\n") {
		if f := strings.Fields(l); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			if _, dup := lines[f[0]]; dup && f[0] != "http_access" {
				t.Errorf("%s twice in:\n%s", f[0], conf)
			}
			lines[f[0]] = l
		}
	}
	for _, tc := range []struct {
		directive string
		want      string // "" means: as in the rendered configuration
	}{
		{"http_port", "http_port 3128"},
		{"http_access", "http_access allow all"},
		{"cache", "cache deny all"},
		{"access_log", "access_log stdio:/dev/stdout"}, // Squid's own format: the rendered one's is not defined here
		{"cache_log", ""},
		{"pid_filename", ""},
		{"coredump_dir", ""},
	} {
		got, ok := lines[tc.directive]
		if !ok {
			t.Errorf("no %s in:\n%s", tc.directive, conf)
			continue
		}
		if tc.want == "" {
			if !strings.Contains(rendered, got+"\n") {
				t.Errorf("%q is not the rendered configuration's line", got)
			}
		} else if got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.directive, got, tc.want)
		}
	}
	for _, absent := range []string{"acl", "http_reply_access", "auth_param"} {
		if _, ok := lines[absent]; ok {
			t.Errorf("plain Squid's configuration has %s:\n%s", absent, conf)
		}
	}
}

func TestParsePorts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		err  bool
	}{
		{in: "18080,18443", want: []int{18080, 18443}},
		{in: "443", want: []int{443}},
		{in: "", err: true},
		{in: "0", err: true},
		{in: "65536", err: true},
		{in: "80,x", err: true},
	} {
		got, err := parsePorts(tc.in)
		if (err != nil) != tc.err || (!tc.err && !slices.Equal(got, tc.want)) {
			t.Errorf("parsePorts(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// Each size gets what it gets on the machine: a login for the large one, TLS with -tls, with a certificate
// the clients verify by the name the pods leg gives them (the pod's address is not known when it is made).
func TestPodLoginAndTLS(t *testing.T) {
	for _, tc := range []struct {
		size             string
		tls, login, cert bool
	}{
		{size: "small"},
		{size: "small", tls: true, cert: true},
		{size: "large", login: true},
		{size: "large", tls: true, login: true, cert: true},
		{size: variantNoAuth},
		{size: variantNoRules, login: true},
	} {
		s, err := renderedSettings(tc.size, "origin.example", netip.MustParsePrefix("198.18.2.0/24"), proxyconf.DefaultPort)
		if err != nil {
			t.Fatal(err)
		}
		auth, ca, err := podLoginAndTLS(&s, tc.size, tc.tls)
		if err != nil {
			t.Fatal(err)
		}
		if (auth != "") != tc.login || (len(s.Users) == 1) != tc.login {
			t.Errorf("%s tls=%v: login %q, users %d; want a login: %v", tc.size, tc.tls, auth, len(s.Users), tc.login)
		}
		if (s.TLS != nil) != tc.cert || (ca != nil) != tc.cert {
			t.Errorf("%s tls=%v: TLS settings %v, CA %d bytes", tc.size, tc.tls, s.TLS != nil, len(ca))
			continue
		}
		if !tc.cert {
			continue
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			t.Fatal("no CA")
		}
		block, _ := pem.Decode([]byte(s.TLS.CertificatePEM))
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: podProxyName}); err != nil {
			t.Errorf("the pods' certificate does not verify for %s: %v", podProxyName, err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "other.example"}); err == nil {
			t.Error("the pods' certificate verifies for any name")
		}
	}
}

// Every subject's name is a valid name for the Deployment, its ConfigMap, Secret and Service.
func TestPodProxyObjectNames(t *testing.T) {
	for _, s := range []string{"squid-plain", "rendered-small", "rendered-small-tls", "rendered-large", "rendered-large-tls", "rendered-large-noauth", "rendered-large-norules"} {
		if errs := validation.IsDNS1035Label(podProxyObjectName(s)); len(errs) > 0 {
			t.Errorf("%s: %v", podProxyObjectName(s), errs)
		}
	}
}

// The large size's variants differ from it in the one part each names: the norules variant allows the same
// destinations, to the same clients, without a rule set; the noauth variant's settings are the large size's
// (its login is left out by podLoginAndTLS, above).
func TestLargeVariants(t *testing.T) {
	client := netip.MustParsePrefix("198.18.2.0/24")
	large, err := renderedSettings("large", "origin.example", client, proxyconf.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	noAuth, err := renderedSettings(variantNoAuth, "origin.example", client, proxyconf.DefaultPort)
	if err != nil || !reflect.DeepEqual(noAuth, large) {
		t.Errorf("%s settings differ from the large size's (%v)", variantNoAuth, err)
	}
	noRules, err := renderedSettings(variantNoRules, "origin.example", client, proxyconf.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(large.AllowedDestinations)
	for _, r := range large.RuleSets {
		want = append(want, r.Destinations...)
	}
	if len(noRules.RuleSets) != 0 || !slices.Equal(noRules.AllowedDestinations, want) || !slices.Contains(noRules.AllowedDestinations, "origin.example") ||
		!slices.Equal(noRules.AllowedClientCIDRs, large.AllowedClientCIDRs) || !slices.Contains(noRules.AllowedClientCIDRs, client.String()) {
		t.Errorf("%s: %d rule sets, %d destinations (origin allowed: %v), clients %d; want none, the large size's %d, and its clients",
			variantNoRules, len(noRules.RuleSets), len(noRules.AllowedDestinations), slices.Contains(noRules.AllowedDestinations, "origin.example"),
			len(noRules.AllowedClientCIDRs), len(want))
	}
	if _, err := renderedSettings("large-other", "origin.example", client, proxyconf.DefaultPort); err == nil {
		t.Error("an unknown variant was accepted")
	}
}
