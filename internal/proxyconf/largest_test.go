package proxyconf_test

import (
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/proxyconftest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

// metadataValueBytes is Compute Engine's limit on one metadata value, which the list limits of validate.go
// are set by: a Compute Engine proxy carries squid.conf and the backstop as metadata values of their own.
const metadataValueBytes = 256 * 1024

// TestLargestSettingsFit renders the largest settings validation allows: squid.conf and the backstop fit one
// metadata value, and Squid parses the config. The kvm guest's TestLargestSettingsFit checks its seed at the
// same settings.
func TestLargestSettingsFit(t *testing.T) {
	t.Parallel()
	s := proxyconftest.LargestSettings(t)
	conf, err := proxyconf.RenderSquidConf(s, vmguest.RenderOptions())
	if err != nil {
		t.Fatal(err)
	}
	backstop, err := proxyconf.RenderNftables(s)
	if err != nil {
		t.Fatal(err)
	}
	for f, b := range map[string][]byte{proxyconf.ConfPath: conf, proxyconf.NftablesPath: backstop} {
		t.Logf("%s at maximum settings: %d bytes of GCE's %d for a metadata value", f, len(b), metadataValueBytes)
		if len(b) > metadataValueBytes {
			t.Errorf("%s is %d bytes, over GCE's %d limit for a metadata value", f, len(b), metadataValueBytes)
		}
	}
	// squid -k parse reads the certificate files, which are not where the VM has them: the conf without TLS
	// differs in the listening line alone.
	s.TLS = nil
	conf, err = proxyconf.RenderSquidConf(s, proxyconf.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := squidtest.Parse(t, conf); err != nil || strings.Contains(out, "ERROR") || strings.Contains(out, "unrecognized") {
		t.Errorf("squid -k parse: %v\n%.2000s", err, out)
	}
}

// TestLargestPolicyFits: the largest policy validation allows (proxyconftest.LargestPolicySettings) renders a
// squid.conf that fits one metadata value and that Squid parses.
func TestLargestPolicyFits(t *testing.T) {
	t.Parallel()
	s := proxyconftest.LargestPolicySettings(t)
	conf, err := proxyconf.RenderSquidConf(s, vmguest.RenderOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s at the largest policy: %d bytes of GCE's %d for a metadata value", proxyconf.ConfPath, len(conf), metadataValueBytes)
	if len(conf) > metadataValueBytes {
		t.Errorf("%s is %d bytes, over GCE's %d limit for a metadata value", proxyconf.ConfPath, len(conf), metadataValueBytes)
	}
	// Without TLS, so that squid -k parse need not read the certificate files; the subjects' rule sets need a
	// client CA, so they go too.
	s.TLS = nil
	for i := range s.RuleSets {
		s.RuleSets[i].Clients.CertificateSubjects = nil
	}
	conf, err = proxyconf.RenderSquidConf(s, proxyconf.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := squidtest.Parse(t, conf); err != nil || strings.Contains(out, "ERROR") || strings.Contains(out, "unrecognized") {
		t.Errorf("squid -k parse: %v\n%.2000s", err, out)
	}
}
