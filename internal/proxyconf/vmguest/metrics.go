package vmguest

import (
	"fmt"
	"strconv"

	"github.com/egress-proxies/terraform-provider-egress/internal/metrics"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// A proxy VM with metrics (proxyconf.Settings.Metrics; internal/metrics says what and why) runs Debian's mtail
// over Squid's access log file and Debian's prometheus-squid-exporter against Squid's cache manager on
// 127.0.0.1, each from its package's own unit, which a drop-in of ours points at the proxy's ports. A proxy
// without metrics runs neither: the units stay disabled, and the packages are installed only for a proxy with
// metrics (or ship disabled in the image). The backstop's metrics chain (proxyconf.NftablesMetricsChain) keeps
// both ports to the metrics clients' ranges, and each unit starts only while that chain is loaded. The kvm
// and gcp guests deliver these files each their own way.
const (
	MtailUnit         = "mtail.service"
	SquidExporterUnit = "prometheus-squid-exporter.service"
	// MtailProgramPath is where metrics.Program goes: the package's program directory, which holds nothing
	// else mtail loads (its README is no .mtail file).
	MtailProgramPath = "/etc/mtail/" + metrics.ProgramFile
	// The drop-ins that run the two units on the proxy's ports.
	MtailDropInPath         = "/etc/systemd/system/mtail.service.d/60-egress-metrics.conf"
	SquidExporterDropInPath = "/etc/systemd/system/prometheus-squid-exporter.service.d/60-egress-metrics.conf"
)

// SquidExporterUser is the user the exporter runs as: systemd's dynamic user of that name.
const SquidExporterUser = "egress-squid-exporter"

// The requests in flight (metrics.ActiveScript): a service of ours runs the script, which reads Squid's
// active_requests report every metrics.ActiveInterval seconds and replaces ActiveLogPath with its line, a file
// mtail tails beside the access log. A loop in one long-running service rather than a timer: a timer's
// service would start every 10 seconds, and systemd would log each start and finish in the journal. The file
// is in the service's runtime directory (tmpfs), one line, removed when the service stops. The script reaches
// only 127.0.0.1's manager port and opens none, so it needs no backstop guard; it runs as a dynamic user of
// its own, not as the proxy user, which the backstop keeps from 127.0.0.1.
const (
	ActiveUnit       = "egress-proxy-active-requests.service"
	ActiveUnitPath   = "/etc/systemd/system/" + ActiveUnit
	ActiveScriptPath = "/usr/local/lib/egress-proxy/active-requests.sh"
	ActiveUser       = "egress-active-requests"
	activeRuntimeDir = "egress-proxy-active-requests"
	ActiveLogPath    = "/run/" + activeRuntimeDir + "/active"
)

// MetricsUnits are the metrics' units, as systemctl takes them.
var MetricsUnits = []string{MtailUnit, SquidExporterUnit, ActiveUnit}

// MetricsOwnUnits are the MetricsUnits whose unit file MetricsFiles writes, by that file (the others are the
// packages'): such a unit exists only while its file does, and systemctl refuses to disable a unit it cannot find.
var MetricsOwnUnits = map[string]string{ActiveUnit: ActiveUnitPath}

// MetricsPaths are every file MetricsFiles writes, in its order.
var MetricsPaths = []string{MtailProgramPath, MtailDropInPath, SquidExporterDropInPath, ActiveScriptPath, ActiveUnitPath}

// MetricsSquidOptions are opts for a proxy with settings s: with metrics, Squid's cache manager opens on
// proxyconf.DefaultManagerPort for the exporter (unless opts names another port). Without metrics opts are
// returned as they are, so squid.conf is the one rendered before metrics existed.
func MetricsSquidOptions(s proxyconf.Settings, opts proxyconf.RenderOptions) proxyconf.RenderOptions {
	if s.Metrics != nil && opts.ManagerPort == 0 {
		opts.ManagerPort = proxyconf.DefaultManagerPort
	}
	return opts
}

// MetricsFiles are the files a proxy with settings s has for its metrics, written with the system's owner and
// mode (root, readable by all: nothing secret), the program first; none without metrics. managerPort is the
// cache manager's (MetricsSquidOptions).
func MetricsFiles(s proxyconf.Settings, managerPort int) []File {
	if s.Metrics == nil {
		return nil
	}
	port, squidPort := s.Metrics.Ports()
	// The check every start makes: the backstop's metrics chain is loaded, so the port is never open to all.
	// "+": as root, though the unit's program runs as its package's user.
	guard := "ExecStartPre=+/usr/sbin/nft list chain inet " + proxyconf.NftablesTable + " " + proxyconf.NftablesMetricsChain + "\n"
	head := "# Written by terraform-provider-egress: the proxy's metrics (%s). Do not edit: changes are replaced on\n" +
		"# the next apply.\n[Unit]\nAfter=squid.service\n[Service]\n"
	mtail := fmt.Sprintf(head, "egress_proxy_*") + guard +
		// The package's unit runs only with LOGS set in /etc/default/mtail: this one needs no such file.
		"ExecCondition=\n" +
		"ExecStart=\n" +
		"ExecStart=/usr/bin/mtail --progs /etc/mtail --logtostderr --port " + strconv.Itoa(port) + " --logs " + proxyconf.AccessLogPath +
		" --logs " + ActiveLogPath + "\n" +
		// Squid's log directory and file are the proxy group's.
		"SupplementaryGroups=proxy\n"
	exporter := fmt.Sprintf(head, "squid_*") + guard +
		// Not as the proxy user, which the package's unit names: the backstop rejects what that user starts
		// towards 127.0.0.1 (it is Squid's), so the exporter could not reach the cache manager. A user of its
		// own, made by systemd while it runs, that owns nothing.
		"User=" + SquidExporterUser + "\nDynamicUser=yes\n" +
		"ExecStart=\n" +
		"ExecStart=/usr/bin/prometheus-squid-exporter -listen :" + strconv.Itoa(squidPort) +
		" -squid-hostname 127.0.0.1 -squid-port " + strconv.Itoa(managerPort) + "\n"
	active := "# Written by terraform-provider-egress: Squid's requests in flight for mtail (egress_proxy_active_*). Do\n" +
		"# not edit: changes are replaced on the next apply.\n" +
		"[Unit]\nDescription=Egress proxy: Squid's requests in flight, for mtail\nAfter=squid.service\n" +
		"[Service]\nExecStart=/bin/bash " + ActiveScriptPath + "\n" +
		"User=" + ActiveUser + "\nDynamicUser=yes\n" +
		"RuntimeDirectory=" + activeRuntimeDir + "\nRuntimeDirectoryMode=0755\nUMask=0022\n" +
		"Restart=always\nRestartSec=10\n" +
		"[Install]\nWantedBy=multi-user.target\n"
	return []File{
		{Path: MtailProgramPath, Content: metrics.Program},
		{Path: MtailDropInPath, Content: []byte(mtail)},
		{Path: SquidExporterDropInPath, Content: []byte(exporter)},
		{Path: ActiveScriptPath, Content: []byte(metrics.ActiveScript(managerPort, proxyconf.DefaultHealthPort, metrics.ActiveInterval, ActiveLogPath))},
		{Path: ActiveUnitPath, Content: []byte(active)},
	}
}

// MetricsIfMissing installs the two packages on an image that lacks them, such as a plain Debian cloud image,
// then enables and (re)starts the units (MetricsUnits), so they take their drop-ins. A fixed line with no user value and no
// quote (single-quoted in YAML and in the gcp startup script).
const MetricsIfMissing = "{ command -v mtail >/dev/null && command -v prometheus-squid-exporter >/dev/null; } || " +
	"{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y mtail prometheus-squid-exporter; }; " +
	"systemctl enable " + MtailUnit + " " + SquidExporterUnit + " " + ActiveUnit + " && systemctl restart " + MtailUnit + " " + SquidExporterUnit + " " + ActiveUnit
