package guest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/egress-proxies/terraform-provider-egress/internal/metrics"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// A proxy with metrics (proxyconf.Settings.Metrics) runs three sidecars beside Squid, from the same image
// (scripts/build-k8s-image.sh installs both programs): mtail counting the access log with metrics.Program,
// prometheus-squid-exporter reading Squid's cache manager on 127.0.0.1 (internal/metrics says why these two),
// and bash running metrics.ActiveScript, which reads Squid's requests in flight from the same cache manager
// and sends mtail a line every metrics.ActiveInterval seconds on mtail's UDP port (bash and awk are in the
// image: Debian's minbase has them; it has no curl).
const (
	BashPath          = "/bin/bash"
	MtailPath         = "/usr/bin/mtail"
	SquidExporterPath = "/usr/bin/prometheus-squid-exporter"
	// MtailProgramKey holds metrics.Program in the ConfigMap; the mtail container mounts that key alone at
	// MtailProgramDir, since mtail loads every *.mtail file of the folder and nothing else needs to be there.
	MtailProgramKey = metrics.ProgramFile
	MtailProgramDir = "/etc/egress-mtail"
	// MtailLogPort is the UDP port of 127.0.0.1 in the pod where mtail reads the access log. Squid's stdout
	// stays the log `kubectl logs` shows, so Squid writes every line twice: there and to this port. UDP,
	// not a file on a shared emptyDir, so no log grows in the pod and no rotation is needed; on loopback
	// with one datagram a line (buffer-size=0KB, proxyconf) nothing was seen lost (internal/metrics README).
	// A UDP port, so it cannot collide with any TCP port a user picks.
	MtailLogPort = 3902
)

// Metrics are the sidecars' commands and ports, nil when the proxy serves no metrics.
type Metrics struct {
	// Port serves egress_proxy_* (mtail), SquidPort squid_* (the exporter), on every address of the pod.
	Port, SquidPort int
	// Mtail, SquidExporter and Active are the three containers' commands, with their arguments.
	Mtail, SquidExporter, Active []string
}

// String is what the pod template's checksum takes of the sidecars: a port or an argument changed rolls the
// pods, as a changed squid.conf does.
func (m *Metrics) String() string {
	if m == nil {
		return ""
	}
	return fmt.Sprintf("metrics %d %d %q %q %q", m.Port, m.SquidPort, m.Mtail, m.SquidExporter, m.Active)
}

// renderMetrics adds what s.Metrics asks for to a pod rendered with opts: the program in the ConfigMap, the
// second access log line in squid.conf, and the sidecars' commands. opts must have ManagerPort set.
func renderMetrics(k *Pod, s proxyconf.Settings, opts proxyconf.RenderOptions) error {
	m := s.Metrics
	if m == nil {
		return nil
	}
	// The UDP log line as the renderer writes it (logformat, buffer size, the manager's requests left out),
	// taken from a rendering of the same settings that logs to mtail alone, and put after the stdout one.
	udp := opts
	udp.AccessLog = "udp://127.0.0.1:" + strconv.Itoa(MtailLogPort)
	alt, err := proxyconf.RenderSquidConf(s, udp)
	if err != nil {
		return err
	}
	conf, err := withSecondAccessLog(k.ConfigMapData[ConfigKey], string(alt))
	if err != nil {
		return err
	}
	k.ConfigMapData[ConfigKey] = conf
	k.ConfigMapData[MtailProgramKey] = string(metrics.Program)
	port, squidPort := m.Ports()
	k.Metrics = &Metrics{
		Port: port, SquidPort: squidPort,
		Mtail: []string{MtailPath, "-progs", MtailProgramDir, "-logs", udp.AccessLog,
			"-port", strconv.Itoa(port), "-logtostderr"},
		SquidExporter: []string{SquidExporterPath, "-listen", ":" + strconv.Itoa(squidPort),
			"-squid-hostname", "127.0.0.1", "-squid-port", strconv.Itoa(opts.ManagerPort)},
		Active: []string{BashPath, "-c", metrics.ActiveScript(opts.ManagerPort, opts.HealthPort, metrics.ActiveInterval, udp.AccessLog)},
	}
	return nil
}

// withSecondAccessLog puts the access_log line of alt after the one of conf: both renderings come from the
// same settings and options but the log, so that line is the one they differ in.
func withSecondAccessLog(conf, alt string) (string, error) {
	line := func(c string) (int, string) {
		var found []int
		lines := strings.Split(c, "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, "access_log ") {
				found = append(found, i)
			}
		}
		if len(found) != 1 {
			return -1, ""
		}
		return found[0], lines[found[0]]
	}
	i, _ := line(conf)
	_, second := line(alt)
	if i < 0 || second == "" {
		return "", fmt.Errorf("squid.conf: want one access_log line in each rendering to add mtail's")
	}
	lines := strings.Split(conf, "\n")
	lines = append(lines[:i+1], append([]string{second}, lines[i+1:]...)...)
	return strings.Join(lines, "\n"), nil
}
