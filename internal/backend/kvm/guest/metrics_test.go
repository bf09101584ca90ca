package guest

import (
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/metrics"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

func TestRenderUserDataMetrics(t *testing.T) {
	t.Parallel()
	base := proxyconf.Settings{Port: 3128, AllowedDestinations: []string{".example.com"}, LogFormat: proxyconf.LogFormatJSON}
	with := func(m proxyconf.MetricsSettings) proxyconf.Settings {
		s := base
		s.Metrics = &m
		return s
	}
	tests := map[string]struct {
		s                      proxyconf.Settings
		mtailArgs, exporterArg string // in the drop-ins' ExecStart; "" without metrics
	}{
		"without metrics": {s: base},
		"default ports": {s: with(proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"10.9.0.0/16"}}),
			mtailArgs:   "--port 3903 --logs /var/log/squid/access.log --logs /run/egress-proxy-active-requests/active",
			exporterArg: "-listen :9301 -squid-hostname 127.0.0.1 -squid-port 3130"},
		"own ports": {s: with(proxyconf.MetricsSettings{Port: 9100, SquidPort: 9101, AllowedClientCIDRs: []string{"10.9.0.0/16", "fd00:9::/64"}}),
			mtailArgs:   "--port 9100 --logs /var/log/squid/access.log --logs /run/egress-proxy-active-requests/active",
			exporterArg: "-listen :9101 -squid-hostname 127.0.0.1 -squid-port 3130"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ud, err := RenderUserData(tc.s, vmguest.RenderOptions())
			if err != nil {
				t.Fatal(err)
			}
			cc, files := parseUserData(t, ud)
			on := tc.s.Metrics != nil
			last := cc.Runcmd[len(cc.Runcmd)-1]
			if got := slices.Equal(last, []string{"sh", "-c", vmguest.MetricsIfMissing}); got != on {
				t.Errorf("last command %q: starts the metrics %v, want %v", last, got, on)
			}
			for _, p := range vmguest.MetricsPaths {
				if _, ok := files[p]; ok != on {
					t.Errorf("%s in user-data: %v, want %v", p, ok, on)
				}
			}
			// squid.conf opens the cache manager exactly when the exporter needs it, and Squid takes it.
			conf := files[proxyconf.ConfPath]
			manager := strings.Contains(string(conf), "http_port 127.0.0.1:3130")
			if manager != on {
				t.Errorf("squid.conf opens the cache manager: %v, want %v", manager, on)
			}
			want, _ := proxyconf.RenderSquidConf(tc.s, vmguest.MetricsSquidOptions(tc.s, vmguest.RenderOptions()))
			if string(conf) != string(want) {
				t.Errorf("squid.conf in user-data differs from RenderSquidConf with vmguest.MetricsSquidOptions")
			}
			if out, err := squidtest.Parse(t, conf); err != nil {
				t.Errorf("squid -k parse: %v\n%s", err, out)
			}
			backstop := files[proxyconf.NftablesPath]
			if got := strings.Contains(string(backstop), "chain "+proxyconf.NftablesMetricsChain); got != on {
				t.Errorf("backstop has the metrics chain: %v, want %v", got, on)
			}
			if !on {
				return
			}
			if string(files[vmguest.MtailProgramPath]) != string(metrics.Program) {
				t.Errorf("the mtail program in user-data is not metrics.Program")
			}
			guard := "ExecStartPre=+/usr/sbin/nft list chain inet " + proxyconf.NftablesTable + " " + proxyconf.NftablesMetricsChain
			for path, wants := range map[string][]string{
				vmguest.MtailDropInPath: {guard, "After=squid.service", "ExecCondition=", "ExecStart=",
					"ExecStart=/usr/bin/mtail --progs /etc/mtail --logtostderr " + tc.mtailArgs, "SupplementaryGroups=proxy"},
				vmguest.SquidExporterDropInPath: {guard, "After=squid.service", "ExecStart=", "User=" + vmguest.SquidExporterUser, "DynamicUser=yes",
					"ExecStart=/usr/bin/prometheus-squid-exporter " + tc.exporterArg},
				// The in-flight script's service: bash runs the script, as a user of its own, in the directory of
				// the file mtail tails (the drop-in's second --logs), started at boot and again after a failure.
				vmguest.ActiveUnitPath: {"After=squid.service", "ExecStart=/bin/bash " + vmguest.ActiveScriptPath,
					"User=" + vmguest.ActiveUser, "DynamicUser=yes", "RuntimeDirectory=" + path.Base(path.Dir(vmguest.ActiveLogPath)),
					"UMask=0022", "Restart=always", "WantedBy=multi-user.target"},
			} {
				lines := strings.Split(string(files[path]), "\n")
				for _, w := range wants {
					if !slices.Contains(lines, w) {
						t.Errorf("%s lacks the line %q:\n%s", path, w, files[path])
					}
				}
			}
			// The script the service runs is the one TestActiveRequestsGauges (internal/metrics) runs against real
			// Squid and mtail, for this proxy's manager and health ports, writing the file mtail tails.
			wantScript := metrics.ActiveScript(proxyconf.DefaultManagerPort, proxyconf.DefaultHealthPort, metrics.ActiveInterval, vmguest.ActiveLogPath)
			if string(files[vmguest.ActiveScriptPath]) != wantScript {
				t.Errorf("the in-flight script in user-data:\n%s\nwant:\n%s", files[vmguest.ActiveScriptPath], wantScript)
			}
		})
	}
}
