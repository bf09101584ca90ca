package aws

import (
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// A proxy whose guest was launched before the agent ran the metrics programs (guest.FormatClientCA) would
// refuse a config with metrics (its guard never learnt the cache manager's line, its MAC leaves the ports out)
// and never run them: Reconfigure refuses metrics before writing anything, advising a replacement, and takes
// the same proxy's other changes. A proxy of today's format takes them.
func TestOlderGuestRefusesMetrics(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	spec := testSpec(fake, "older-metrics")
	spec.Proxy.LogFormat = proxyconf.LogFormatJSON
	inst, err := b.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	withMetrics := spec.Proxy
	withMetrics.Metrics = &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"192.0.2.0/24"}}
	if _, err := b.Reconfigure(t.Context(), inst.ID, withMetrics); err != nil {
		t.Fatalf("Reconfigure with metrics on a guest of today's format: %v", err)
	}
	if c, _ := loadConfig(t, fake, spec.Name); c.Metrics == nil {
		t.Fatal("the guest's config carries no metrics ports")
	}

	// The same proxy as an older agent would have it: its config in FormatClientCA.
	r, o, err := b.resolve(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	p, err := renderParameters(spec.Name, spec.Proxy, guest.FormatClientCA)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.putParameters(t.Context(), r, spec, newStoredSpec(spec.Proxy, o, p), p, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return applied(t, fake, spec.Name).ConfigID == p.configID })
	before := proxyParameters(fake, spec.Name)[guest.ParameterConfig].Version
	_, err = b.Reconfigure(t.Context(), inst.ID, withMetrics)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "metrics") || !strings.Contains(backend.AdviceOf(err), "-replace") {
		t.Fatalf("Reconfigure with metrics on an older guest = %v, want Permanent advising a replacement", err)
	}
	if after := proxyParameters(fake, spec.Name)[guest.ParameterConfig].Version; after != before {
		t.Errorf("the refused Reconfigure wrote the config (version %d, was %d)", after, before)
	}
	other := spec.Proxy
	other.AllowedDestinations = append([]string{"other.example"}, other.AllowedDestinations...)
	if _, err := b.Reconfigure(t.Context(), inst.ID, other); err != nil {
		t.Errorf("Reconfigure without metrics on an older guest: %v", err)
	}
}
