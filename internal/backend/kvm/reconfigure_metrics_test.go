package kvm

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

// TestFakeReconfigureMetrics: metrics turned on, moved, kept and turned off in place. The programs start only
// once the backstop with their ports' rule is loaded and Squid runs the config with its cache manager; they
// stop before a backstop without that rule (or with other ports) is loaded; the same settings again touch
// nothing; Get and the seed say what the guest runs.
func TestFakeReconfigureMetrics(t *testing.T) {
	t.Parallel()
	x := newReconfFixture(t, "reconf-metrics")
	base := x.spec.Proxy
	base.LogFormat = proxyconf.LogFormatJSON
	if _, err := x.b.Reconfigure(context.Background(), x.id, base); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		metrics *proxyconf.MetricsSettings
		// stopsFirst: the programs are stopped before the new backstop is loaded; starts: they are started
		// after Squid's reload.
		stopsFirst, starts bool
	}{
		{"on", &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"10.9.0.0/16"}}, false, true},
		{"other ranges", &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"10.8.0.0/16"}}, false, false},
		{"moved", &proxyconf.MetricsSettings{Port: 9100, AllowedClientCIDRs: []string{"10.8.0.0/16"}}, true, true},
		{"the same again", &proxyconf.MetricsSettings{Port: 9100, AllowedClientCIDRs: []string{"10.8.0.0/16"}}, false, false},
		{"off", nil, true, false},
	}
	for _, st := range steps {
		s := base
		s.Metrics = st.metrics
		a := x.agent()
		a.ran = nil
		inst, err := x.b.Reconfigure(context.Background(), x.id, s)
		if err != nil {
			t.Fatalf("%s: Reconfigure: %v", st.name, err)
		}
		var ran []string
		for _, argv := range a.ran {
			ran = append(ran, strings.Join(argv, " "))
		}
		at := func(cmd string) int { return slices.Index(ran, cmd) }
		stop := at("/bin/systemctl disable --now " + strings.Join(vmguest.MetricsUnits, " "))
		start := at("/bin/sh -c " + vmguest.MetricsIfMissing)
		load := at("/bin/sh " + vmguest.PrestartPath + " " + vmguest.PrestartBackstop)
		reload := at(squidBin + " -k reconfigure")
		if (stop >= 0) != st.stopsFirst || (st.stopsFirst && load >= 0 && stop > load) {
			t.Errorf("%s: stop at %d, backstop load at %d; want a stop %v, before the load:\n%s", st.name, stop, load, st.stopsFirst, strings.Join(ran, "\n"))
		}
		if (start >= 0) != st.starts || (st.starts && reload >= 0 && start < reload) {
			t.Errorf("%s: start at %d, Squid's reload at %d; want a start %v, after the reload:\n%s", st.name, start, reload, st.starts, strings.Join(ran, "\n"))
		}
		opts := vmguest.MetricsSquidOptions(s, vmguest.RenderOptions())
		want := vmguest.MetricsFiles(s, opts.ManagerPort)
		for _, p := range metricsPaths {
			got, _, ok := x.guest(p)
			i := slices.IndexFunc(want, func(f vmguest.File) bool { return f.Path == p })
			if ok != (i >= 0) || (ok && !bytes.Equal(got, want[i].Content)) {
				t.Errorf("%s: %s in the guest: %v, want %v", st.name, p, ok, i >= 0)
			}
		}
		backstop, _ := proxyconf.RenderNftables(s)
		if !bytes.Equal(a.backstopLoaded, backstop) {
			t.Errorf("%s: the loaded backstop is not the new one", st.name)
		}
		if a.metricsRunning != (s.Metrics != nil) {
			t.Errorf("%s: metrics programs running %v", st.name, a.metricsRunning)
		}
		if a.metricsRunning && !bytes.Equal(a.metricsBackstop, backstop) && st.starts {
			t.Errorf("%s: the programs started under another backstop than the new one", st.name)
		}
		got := inst.Proxy.Metrics
		if (got == nil) != (s.Metrics == nil) || (got != nil && (got.Port != s.Metrics.Port && s.Metrics.Port != 0 ||
			!slices.Equal(got.AllowedClientCIDRs, s.Metrics.AllowedClientCIDRs))) {
			t.Errorf("%s: Get reads metrics %+v, want %+v", st.name, got, s.Metrics)
		}
		files, _ := x.seedFiles(t)
		if _, ok := files[vmguest.MtailDropInPath]; ok != (s.Metrics != nil) {
			t.Errorf("%s: the seed's user-data has the mtail drop-in: %v", st.name, ok)
		}
	}
}

// A guest whose metrics began before the in-flight service has no unit file for it, and systemctl refuses to
// disable a unit it cannot find: stopMetrics names ours only where their file is.
func TestMetricsUnitsPresent(t *testing.T) {
	t.Parallel()
	packages := []string{vmguest.MtailUnit, vmguest.SquidExporterUnit}
	tests := map[string]struct {
		present map[string]bool
		want    []string
	}{
		"files of an earlier version": {map[string]bool{vmguest.MtailDropInPath: true, vmguest.SquidExporterDropInPath: true}, packages},
		"every file":                  {map[string]bool{vmguest.MtailDropInPath: true, vmguest.ActiveUnitPath: true}, vmguest.MetricsUnits},
	}
	for name, tc := range tests {
		if got := metricsUnitsPresent(tc.present); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}
