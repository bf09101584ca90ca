package gcp

import (
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// TestReconfigureLogFormat: the log format changes in place both ways: the guest's squid.conf in the
// instance's metadata logs as asked, and Reconfigure and Get read the format back from the stored spec (text as
// the zero value, which a proxy made before the format existed has).
func TestReconfigureLogFormat(t *testing.T) {
	t.Parallel()
	fake, b, _ := newTestWithGuest(t)
	ctx := ctxT(t)
	const zone = "us-central1-a"
	spec := testSpec("uid-log-format", zone)
	fake.MetadataInstance(testProject, zone, spec.Name)
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		format proxyconf.LogFormat
		line   string // what the logformat directive starts with
	}{
		{proxyconf.LogFormatJSON, `logformat egress {"time":`},
		{"", "logformat egress %ts.%03tu client="},
	} {
		s := spec.Proxy
		s.LogFormat = step.format
		after, err := b.Reconfigure(ctx, inst.ID, s)
		if err != nil {
			t.Fatalf("to %q: %v", step.format, err)
		}
		got, err := b.Get(ctx, inst.ID)
		if err != nil {
			t.Fatal(err)
		}
		for when, inst := range map[string]backend.Instance{"Reconfigure": after, "Get": got} {
			if inst.Proxy == nil || inst.Proxy.LogFormat != step.format || inst.Drift != "" {
				t.Errorf("to %q: %s reads back %+v, drift %q", step.format, when, inst.Proxy, inst.Drift)
			}
		}
		conf, _ := metadataValue(fake.Instance(testProject, zone, spec.Name), gcpguest.MetadataSquidConf)
		if !strings.Contains(conf, "\n"+step.line) {
			t.Errorf("to %q: the guest's squid.conf has no line starting %q", step.format, step.line)
		}
	}
}
