package kvm

import (
	"bytes"
	"context"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// TestFakeReconfigureLogFormat: the log format changes in place both ways: the guest's Squid runs the config
// rendered with it, the seed carries the same for a rebuild, and Get reads the format back from the domain's
// metadata (text as the zero value, which a domain made before the format existed has).
func TestFakeReconfigureLogFormat(t *testing.T) {
	t.Parallel()
	x := newReconfFixture(t, "reconf-log")
	for _, f := range []proxyconf.LogFormat{proxyconf.LogFormatJSON, ""} {
		next := x.spec.Proxy
		next.LogFormat = f
		if _, err := x.b.Reconfigure(context.Background(), x.id, next); err != nil {
			t.Fatalf("Reconfigure to %q: %v", f, err)
		}
		if _, enforced, _ := x.guest(proxyconf.ConfPath); !bytes.Equal(enforced, render(t, next)) {
			t.Errorf("to %q: the guest's Squid does not run the config rendered with it", f)
		}
		if files, m := x.seedFiles(t); !bytes.Equal(files[proxyconf.ConfPath], render(t, next)) || m.Proxy.LogFormat != string(f) {
			t.Errorf("to %q: the seed carries log format %q and another config", f, m.Proxy.LogFormat)
		}
		got, err := x.b.Get(context.Background(), x.id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Proxy == nil || got.Proxy.LogFormat != f || got.Drift != "" {
			t.Errorf("to %q: Get reads back %+v, drift %q", f, got.Proxy, got.Drift)
		}
	}
}
