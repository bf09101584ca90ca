package aws

import (
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// TestReconfigureLogFormat: the log format changes in place on the same instance, the agent applies each
// config, and Get reads the format back from the settings parameter (text as the zero value, as a proxy made
// before the format existed reads). A proxy whose agent predates the JSON logformat (its config in
// FormatParts) is refused JSON before anything is written, and still takes text.
func TestReconfigureLogFormat(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	spec := testSpec(fake, "log-format")
	spec.Proxy.LogFormat = proxyconf.LogFormatJSON
	inst, err := b.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, b, inst.ID).Proxy.LogFormat; got != proxyconf.LogFormatJSON {
		t.Fatalf("Get after Create reads log format %q, want json", got)
	}
	for _, f := range []proxyconf.LogFormat{"", proxyconf.LogFormatJSON} {
		s := spec.Proxy
		s.LogFormat = f
		// Reconfigure returns once the guest reports the config applied: its guard admitted the logformat.
		got, err := b.Reconfigure(t.Context(), inst.ID, s)
		if err != nil {
			t.Fatalf("Reconfigure to %q: %v", f, err)
		}
		for when, inst := range map[string]backend.Instance{"Reconfigure": got, "Get": mustGet(t, b, inst.ID)} {
			if inst.Proxy == nil || inst.Proxy.LogFormat != f || inst.Drift != "" {
				t.Errorf("after Reconfigure to %q, %s reads back %+v, drift %q", f, when, inst.Proxy, inst.Drift)
			}
		}
	}

	// The same proxy as an older agent would have it: its config in FormatParts.
	r, o, err := b.resolve(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	text := spec.Proxy
	text.LogFormat = ""
	p, err := renderParameters(spec.Name, text, guest.FormatParts)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.putParameters(t.Context(), r, spec, newStoredSpec(text, o, p), p, ""); err != nil {
		t.Fatal(err)
	}
	before := proxyParameters(fake, spec.Name)[guest.ParameterConfig].Version
	_, err = b.Reconfigure(t.Context(), inst.ID, spec.Proxy)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "JSON") || !strings.Contains(backend.AdviceOf(err), "-replace") {
		t.Fatalf("Reconfigure to json on an older guest = %v, want Permanent advising a replacement", err)
	}
	if after := proxyParameters(fake, spec.Name)[guest.ParameterConfig].Version; after != before {
		t.Errorf("the refused Reconfigure wrote the config (version %d, was %d)", after, before)
	}
	if _, err := b.Reconfigure(t.Context(), inst.ID, text); err != nil {
		t.Errorf("Reconfigure to text on an older guest: %v", err)
	}
}
