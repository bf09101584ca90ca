package guest

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/metrics"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

// TestRenderPodMetrics: with metrics, squid.conf logs every line to stdout and to mtail's UDP port (one
// datagram a line), opens the cache manager on 127.0.0.1 for the exporter and leaves its requests out of both
// logs, and real Squid parses it without a complaint; the ConfigMap holds mtail's program; the sidecars'
// commands listen on the metrics ports. Without metrics none of that is there.
func TestRenderPodMetrics(t *testing.T) {
	t.Parallel()
	udpLog := "access_log udp://127.0.0.1:" + strconv.Itoa(MtailLogPort) + " logformat=egress buffer-size=0KB !manager_port"
	stdoutLog := "access_log stdio:/dev/stdout egress !manager_port"
	manager := "http_port 127.0.0.1:" + strconv.Itoa(proxyconf.DefaultManagerPort)
	tests := map[string]struct {
		metrics                *proxyconf.MetricsSettings
		wantPort, wantSquid    int
		wantLines, absentLines []string
	}{
		"off": {absentLines: []string{udpLog, manager}},
		"default ports": {
			metrics:  &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"10.1.0.0/16"}},
			wantPort: proxyconf.DefaultMetricsPort, wantSquid: proxyconf.DefaultSquidMetricsPort,
			wantLines: []string{stdoutLog, udpLog, manager},
		},
		"own ports": {
			metrics:  &proxyconf.MetricsSettings{Port: 9100, SquidPort: 9101, AllowedClientCIDRs: []string{"10.1.0.0/16"}},
			wantPort: 9100, wantSquid: 9101,
			wantLines: []string{stdoutLog, udpLog, manager},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"example.com"},
				LogFormat: proxyconf.LogFormatJSON, Metrics: tc.metrics}
			// The own-address file exists in a pod once the start command wrote it; here, a file of the test's.
			own := filepath.Join(t.TempDir(), "own")
			squidtest.WriteSecretFile(t, own, []byte("10.244.0.9\n"))
			k, err := RenderPod(s, proxyconf.RenderOptions{OwnAddressesFile: own})
			if err != nil {
				t.Fatal(err)
			}
			conf := k.ConfigMapData[ConfigKey]
			lines := strings.Split(conf, "\n")
			for _, l := range tc.wantLines {
				if !slices.Contains(lines, l) {
					t.Errorf("squid.conf lacks %q", l)
				}
			}
			for _, l := range tc.absentLines {
				if slices.Contains(lines, l) {
					t.Errorf("squid.conf has %q", l)
				}
			}
			if tc.metrics == nil {
				if k.Metrics != nil || k.ConfigMapData[MtailProgramKey] != "" {
					t.Errorf("without metrics: sidecars %+v, program in the ConfigMap %t", k.Metrics, k.ConfigMapData[MtailProgramKey] != "")
				}
				return
			}
			if k.ConfigMapData[MtailProgramKey] != string(metrics.Program) {
				t.Error("the ConfigMap does not hold mtail's program")
			}
			m := k.Metrics
			if m == nil || m.Port != tc.wantPort || m.SquidPort != tc.wantSquid {
				t.Fatalf("sidecars %+v, want ports %d and %d", m, tc.wantPort, tc.wantSquid)
			}
			wantMtail := []string{MtailPath, "-progs", MtailProgramDir, "-logs", "udp://127.0.0.1:" + strconv.Itoa(MtailLogPort), "-port", strconv.Itoa(tc.wantPort), "-logtostderr"}
			wantExporter := []string{SquidExporterPath, "-listen", ":" + strconv.Itoa(tc.wantSquid), "-squid-hostname", "127.0.0.1", "-squid-port", strconv.Itoa(proxyconf.DefaultManagerPort)}
			// The in-flight script reads the manager port and sends to mtail's UDP port, leaving out the health port's
			// requests: the very script TestActiveRequestsGauges (internal/metrics) runs against real Squid and mtail.
			wantActive := []string{BashPath, "-c", metrics.ActiveScript(proxyconf.DefaultManagerPort, proxyconf.DefaultHealthPort, metrics.ActiveInterval,
				"udp://127.0.0.1:"+strconv.Itoa(MtailLogPort))}
			if !slices.Equal(m.Mtail, wantMtail) || !slices.Equal(m.SquidExporter, wantExporter) || !slices.Equal(m.Active, wantActive) {
				t.Errorf("commands:\n mtail %q\n want  %q\n exporter %q\n want     %q\n active %q\n want   %q", m.Mtail, wantMtail, m.SquidExporter, wantExporter, m.Active, wantActive)
			}
			if _, complaints, err := squidtest.Complaints(t, []byte(conf)); err != nil || len(complaints) > 0 {
				t.Errorf("squid -k parse: %v %q", err, complaints)
			}
		})
	}
}

// withSecondAccessLog refuses what it cannot place rather than write a squid.conf with the second log lost.
func TestWithSecondAccessLogRefuses(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ conf, alt string }{
		"no line in conf":   {"cache_log x\n", "access_log udp://a\n"},
		"no line in alt":    {"access_log stdio:x egress\n", "cache_log x\n"},
		"two lines in conf": {"access_log a\naccess_log b\n", "access_log udp://a\n"},
	} {
		if _, err := withSecondAccessLog(tc.conf, tc.alt); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// The pod template's checksum takes Metrics.String: a change to any sidecar's command rolls the pods.
func TestMetricsStringNamesEveryCommand(t *testing.T) {
	t.Parallel()
	base := Metrics{Port: 1, SquidPort: 2, Mtail: []string{"mtail"}, SquidExporter: []string{"exporter"}, Active: []string{"bash", "-c", "a"}}
	tests := map[string]func(m *Metrics){
		"port":           func(m *Metrics) { m.Port = 3 },
		"squid port":     func(m *Metrics) { m.SquidPort = 3 },
		"mtail":          func(m *Metrics) { m.Mtail = []string{"mtail", "-x"} },
		"exporter":       func(m *Metrics) { m.SquidExporter = []string{"exporter", "-x"} },
		"in-flight loop": func(m *Metrics) { m.Active = []string{"bash", "-c", "b"} },
	}
	for name, change := range tests {
		m := base
		change(&m)
		if m.String() == base.String() {
			t.Errorf("%s changed: String stays %s", name, m.String())
		}
	}
}
