package guest

import (
	"strconv"
	"strings"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

// A proxy on EC2 with metrics runs what every proxy VM runs for them (internal/proxyconf/vmguest/metrics.go):
// Debian's mtail and prometheus-squid-exporter from their packages' units, with the drop-ins and the mtail
// program vmguest.MetricsFiles renders. The config carries the ports alone (Config.Metrics, under its MAC);
// the user-data carries the files as templates of those ports (agentMetrics), so the agent writes what the
// provider rendered and nothing a config could choose. The agent (agent.py, stop_metrics and start_metrics):
//
//   - stops and disables both programs and removes their files before the backstop or Squid changes, when
//     the files it would write differ from those on disk (metrics off, or moved), so no metrics port is ever
//     open without the backstop's metrics chain for its ranges;
//   - once Squid runs the new config (the cache manager with it) and answers, writes the files, has systemd
//     read them, installs the packages where the image lacks them and (re)starts both units
//     (vmguest.MetricsIfMissing); each unit starts only while the backstop's metrics chain is loaded.

// The tokens the templates hold where the ports go; the agent puts the config's ports there (metrics_files).
const (
	tokenPort        = "@port@"
	tokenSquidPort   = "@squid_port@"
	tokenManagerPort = "@manager_port@"
)

// agentMetrics is agent.json's part on metrics: the files with their ports as tokens, every path such a file
// may have (removed when metrics go off), the units, and the line that installs and starts them.
type agentMetrics struct {
	Files []agentFile `json:"files"`
	Paths []string    `json:"paths"`
	Units []string    `json:"units"`
	Start string      `json:"start"`
}

type agentFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// Ports vmguest.MetricsFiles renders the templates with, each then replaced by its token: numbers no text of
// those files holds otherwise (TestAgentMetricsFilesAsVMGuest renders them for other ports and compares).
const (
	samplePort        = 61231
	sampleSquidPort   = 61232
	sampleManagerPort = 61233
)

// metricsSettings renders agentMetrics from vmguest.MetricsFiles, the files the kvm and gcp guests write.
func metricsSettings() agentMetrics {
	s := proxyconf.Settings{Metrics: &proxyconf.MetricsSettings{Port: samplePort, SquidPort: sampleSquidPort}}
	m := agentMetrics{Units: vmguest.MetricsUnits, Start: vmguest.MetricsIfMissing}
	tokens := strings.NewReplacer(strconv.Itoa(samplePort), tokenPort, strconv.Itoa(sampleSquidPort), tokenSquidPort,
		strconv.Itoa(sampleManagerPort), tokenManagerPort)
	for _, f := range vmguest.MetricsFiles(s, sampleManagerPort) {
		m.Files = append(m.Files, agentFile{Path: f.Path, Content: tokens.Replace(string(f.Content))})
		m.Paths = append(m.Paths, f.Path)
	}
	return m
}
