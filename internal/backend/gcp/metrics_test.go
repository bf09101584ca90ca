package gcp

import (
	"maps"
	"strconv"
	"strings"
	"testing"

	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

// Metrics reach the guest in metadata, as the rest of the config: with metrics the three metrics files under
// their keys (the program and the two drop-ins on the proxy's ports), squid.conf with the cache manager on
// 127.0.0.1, and the backstop's metrics chain for the metrics ranges alone; each change a new config id, in
// place (the same VM). Without metrics none of the keys, and the config id and squid.conf of a proxy made
// before metrics existed (the id itself differs: the password file's hash has a new salt). Get reads the
// settings back.
func TestMetricsInMetadata(t *testing.T) {
	t.Parallel()
	fake, b, _ := newTestWithGuest(t)
	ctx := ctxT(t)
	spec := testSpec("uid-metrics", "us-central1-a")
	spec.Proxy.LogFormat = proxyconf.LogFormatJSON
	fake.MetadataInstance(testProject, "us-central1-a", spec.Name)
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	vmID := fake.Instance(testProject, "us-central1-a", spec.Name).GetId()
	created := fake.Instance(testProject, "us-central1-a", spec.Name)
	plainID, _ := metadataValue(created, gcpguest.MetadataConfigID)
	plainConf, _ := metadataValue(created, gcpguest.MetadataSquidConf)
	plainBackstop, _ := metadataValue(created, gcpguest.MetadataBackstop)
	manager := "http_port 127.0.0.1:" + strconv.Itoa(proxyconf.DefaultManagerPort)
	seen := map[string]string{plainID: "created without metrics"}

	for _, c := range []struct {
		name    string
		metrics *proxyconf.MetricsSettings
		// words the backstop holds; the drop-ins' ports come from vmguest.MetricsFiles
		backstop []string
	}{
		{name: "turned on", metrics: &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"10.8.0.0/24"}},
			backstop: []string{proxyconf.NftablesMetricsChain, "10.8.0.0/24", "3903, 9301"}},
		{name: "other ports", metrics: &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"10.8.0.0/24"}, Port: 4903, SquidPort: 9401},
			backstop: []string{"10.8.0.0/24", "4903, 9401"}},
		{name: "other ranges", metrics: &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"10.9.0.0/24", "fd00::/64"}, Port: 4903, SquidPort: 9401},
			backstop: []string{"10.9.0.0/24", "fd00::/64", "4903, 9401"}},
		{name: "turned off"},
		{name: "on again", metrics: &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"10.8.0.0/24"}},
			backstop: []string{"10.8.0.0/24", "3903, 9301"}},
	} {
		next := spec.Proxy
		next.Metrics = c.metrics
		got, err := b.Reconfigure(ctx, inst.ID, next)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		in := fake.Instance(testProject, "us-central1-a", spec.Name)
		if in.GetId() != vmID {
			t.Fatalf("%s: the VM was replaced", c.name)
		}
		conf, _ := metadataValue(in, gcpguest.MetadataSquidConf)
		backstop, _ := metadataValue(in, gcpguest.MetadataBackstop)
		id, _ := metadataValue(in, gcpguest.MetadataConfigID)
		want := map[string]string{}
		for _, f := range vmguest.MetricsFiles(next, proxyconf.DefaultManagerPort) {
			for k, p := range gcpguest.MetricsKeys {
				if p == f.Path {
					want[k] = string(f.Content)
				}
			}
		}
		for k := range gcpguest.MetricsKeys {
			v, has := metadataValue(in, k)
			if w, ok := want[k]; has != ok || v != w {
				t.Errorf("%s: metadata %s = %q (present %v), want %q", c.name, k, v, has, w)
			}
		}
		if c.metrics == nil {
			if strings.Contains(conf, manager) || strings.Contains(backstop, proxyconf.NftablesMetricsChain) {
				t.Errorf("%s: the cache manager or the metrics chain without metrics:\n%s\n%s", c.name, conf, backstop)
			}
			if conf != plainConf || backstop != plainBackstop {
				t.Errorf("%s: squid.conf or the backstop differ from those of the same settings made without metrics", c.name)
			}
			if got.Proxy == nil || got.Proxy.Metrics != nil {
				t.Errorf("%s: settings read back %+v, want no metrics", c.name, got.Proxy)
			}
			continue
		}
		port, squidPort := c.metrics.Ports()
		if !strings.Contains(want[gcpguest.MetadataMtailDropIn], "--port "+strconv.Itoa(port)+" ") ||
			!strings.Contains(want[gcpguest.MetadataSquidExporterDropIn], "-listen :"+strconv.Itoa(squidPort)+" ") {
			t.Errorf("%s: the drop-ins do not name ports %d and %d", c.name, port, squidPort)
		}
		if !strings.Contains(conf, manager) {
			t.Errorf("%s: squid.conf has no cache manager (%q)", c.name, manager)
		}
		for _, w := range c.backstop {
			if !strings.Contains(backstop, w) {
				t.Errorf("%s: the backstop lacks %q:\n%s", c.name, w, backstop)
			}
		}
		if prev, ok := seen[id]; ok && c.name != "on again" {
			t.Errorf("%s: config id %s is the one of %q: the guest would not apply it", c.name, id, prev)
		}
		seen[id] = c.name
		if got.Proxy == nil || got.Proxy.Metrics == nil || strings.Join(got.Proxy.Metrics.AllowedClientCIDRs, ",") != strings.Join(c.metrics.AllowedClientCIDRs, ",") {
			t.Errorf("%s: settings read back %+v, want metrics %+v", c.name, got.Proxy, c.metrics)
		}
	}
}

// The config id names the metrics files too: a new mtail program (a new provider version's) is a config the
// guest applies, though squid.conf and the backstop stay; without metrics the id is the one before metrics.
func TestConfigIDNamesMetricsFiles(t *testing.T) {
	t.Parallel()
	s := proxyconf.Settings{LogFormat: proxyconf.LogFormatJSON, Metrics: &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"10.8.0.0/24"}}}
	items := metricsItems(vmguest.MetricsFiles(s, proxyconf.DefaultManagerPort))
	if len(items) != len(gcpguest.MetricsKeys) {
		t.Fatalf("metrics items %v, want one per key of %v", sortedKeys(items), sortedKeys(gcpguest.MetricsKeys))
	}
	const id = "0123456789abcdef"
	if got := withMetrics(id, nil); got != id {
		t.Errorf("without metrics: id %s, want %s", got, id)
	}
	with := withMetrics(id, items)
	if with == id {
		t.Errorf("with metrics: id %s, the id without", with)
	}
	for k := range items {
		other := maps.Clone(items)
		other[k] += "\n"
		if got := withMetrics(id, other); got == with {
			t.Errorf("%s changed: id %s stays", k, got)
		}
	}
}
