// Package guest is the aws backend's guest side: the EC2 user-data, the agent it installs (agent.py), the SSM
// parameters the backend writes and the agent reads, and the check the agent makes of a config before it
// installs it. The backend (internal/backend/aws) imports it; it imports no backend.
package guest

import (
	"bytes"
	"compress/gzip"
	_ "embed" // the agent script
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"text/template"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

// The guest side of a proxy on EC2: the user-data (RenderUserData) installs an agent that reads the proxy's
// SSM parameters (parameters.go) with the instance role's credentials, writes Squid's files where the other VM
// backends' guests write them, starts Squid, and then watches the parameters and applies each change.

// agentScript is the agent, Python 3 with its standard library only (Debian's EC2 images ship python3, and
// nothing the agent could use beyond it): it speaks IMDSv2, Signature Version 4 and SSM's JSON protocol
// itself.
//
//go:embed agent.py
var agentScript []byte

// MaxUserDataBytes is EC2's limit on user-data, before its base64 encoding ("Run commands when you launch
// an EC2 instance with user data input": "user data is limited to 16 KB").
const MaxUserDataBytes = 16 * 1024

// Defaults of the guest, and where it keeps its own files.
const (
	// IMDSEndpoint is the instance metadata service, over IPv4.
	IMDSEndpoint = "http://169.254.169.254"
	// StateDir holds the agent, its settings and the id of the config applied last.
	StateDir = "/var/lib/egress-proxy"
	// AgentUnit is the agent's systemd service, started at every boot.
	AgentUnit = "egress-proxy-agent.service"
	// watchInterval is how many seconds the agent waits between two reads of the parameters, give or take a
	// fifth (jitter, so proxies started together do not poll together). Each read is one GetParameters call,
	// against an account's shared SSM throughput (40 per second by default): 30 s leaves room for hundreds of
	// proxies, and a change reaches the guest within about the time Squid takes to restart.
	watchInterval = 30
	// tokenTTL is the life of the agent's IMDSv2 session tokens, the longest IMDS grants (six hours).
	tokenTTL = 21600
)

// Overrides change where the guest finds its services and how fast it watches; the zero value is an
// EC2 instance. Tests run the agent against fakes on addresses of their own.
type Overrides struct {
	// IMDSEndpoint replaces the package's IMDSEndpoint.
	IMDSEndpoint string
	// WatchInterval replaces the seconds between two reads of the parameters.
	WatchInterval int
	// TokenTTL replaces the seconds an IMDSv2 session token is asked for (1 to 21600).
	TokenTTL int
	// PlainSSMEndpoint replaces the SSM endpoint with one over plain HTTP, which UserDataOptions refuses:
	// a guest test's fake on a test network.
	PlainSSMEndpoint string
	// PlainLogsEndpoint does the same for CloudWatch Logs.
	PlainLogsEndpoint string
	// LogsFlush replaces the seconds the agent holds access log lines before it sends them.
	LogsFlush int
}

// logsFlush is how many seconds the agent holds the access log's lines before it sends what it has: a line
// reaches CloudWatch Logs within about that, and a busy proxy sends a batch per interval, not per line
// (PutLogEvents' quota is per account and second).
const logsFlush = 5

var (
	regionRE = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	// The prefix is ParameterPath(name, ""), with a proxy name as backend.ValidateName allows it.
	// A proxy's own parameters, or those of member k > 0 of a proxy of several instances, under its own.
	prefixRE = regexp.MustCompile(`^` + regexp.QuoteMeta(ParameterPrefix) + `[a-z]([-a-z0-9]{0,61}[a-z0-9])?/(member-[1-9][0-9]?/)?$`)
)

// agentSettings is agent.json, everything the agent knows of its proxy and of this package: the Go
// constants stay the only copy of each path and name.
type agentSettings struct {
	Region         string            `json:"region"`
	Prefix         string            `json:"prefix"`
	Parameters     map[string]string `json:"parameters"`
	SSMEndpoint    string            `json:"ssm_endpoint"`
	IMDSEndpoint   string            `json:"imds_endpoint"`
	Interval       int               `json:"interval"`
	TokenTTL       int               `json:"token_ttl"`
	StateDir       string            `json:"state_dir"`
	HealthPort     int               `json:"health_port"`
	HealthPath     string            `json:"health_path"`
	InstallCommand string            `json:"install_command"`
	Paths          map[string]string `json:"paths"`
	Guard          guard             `json:"guard"`
	MaxParts       int               `json:"max_parts"`
	MaxConfigBytes int               `json:"max_config_bytes"`
	Logs           *agentLogs        `json:"logs,omitempty"`
	Metrics        agentMetrics      `json:"metrics"`
}

// agentLogs is where the agent sends the access log it follows (LogsTarget), every flush seconds.
type agentLogs struct {
	Group    string `json:"group"`
	Stream   string `json:"stream"`
	Endpoint string `json:"endpoint"`
	Path     string `json:"path"`
	Flush    int    `json:"flush"`
}

// DNSSuffix is the domain of a region's service endpoints: amazonaws.com, and amazonaws.com.cn in the
// China regions (cn-north-1, cn-northwest-1), which are a partition of their own.
func DNSSuffix(region string) string {
	if strings.HasPrefix(region, "cn-") {
		return "amazonaws.com.cn"
	}
	return "amazonaws.com"
}

func checkEndpoint(name, v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%s %q must be an http or https URL with a host and nothing after its path", name, v)
	}
	return nil
}

// RenderUserData renders the user-data of a proxy's EC2 instance, with the guest's defaults.
func RenderUserData(opts UserDataOptions) ([]byte, error) {
	return RenderUserDataWith(opts, Overrides{})
}

// RenderUserDataWith renders the user-data of a proxy's EC2 instance: a shell script cloud-init runs once,
// at the instance's first boot. It holds no setting of the proxy and no secret, only where its parameters
// are (the region, the prefix and, for tests or a private endpoint, the SSM endpoint), since user-data is
// readable by whoever may describe the instance and is kept on its disk by cloud-init.
//
// It writes the agent (agent.py) and its settings under StateDir, a drop-in of squid.service
// and the script it runs (vmguest.RenderPrestart), and starts the agent as AgentUnit, at this and every later boot.
// The agent:
//
//   - speaks only IMDSv2 (a session token on every request, a new one on a 401), and takes the instance
//     role's credentials from it, again before they come within ten minutes of their expiry;
//   - reads the config parameter, a manifest (FormatParts), and the secrets (GetParameters, WithDecryption,
//     signed with Signature Version 4), then the config's parts (packed.go), which must be the ones the
//     manifest names (a set half written is read again later); checks that the config id names exactly the
//     pair it read (the backend writes the two one after the other), that the config's MAC is the one the key
//     in the secrets gives (ConfigMAC), and that it holds nothing the renderer never writes (guard.go), and
//     refuses it otherwise; writes squid.conf, the password file, the TLS certificate chain and key, the client CA and CRL and the backstop where
//     the kvm guest's cloud-init user-data and the Compute Engine startup script write them (owner root:proxy, mode 0640, the
//     certificate and the client CA and CRL 0644), installs Squid and nftables where the image lacks them, and restarts Squid;
//   - never installs what Squid (squid -k parse) or nft (nft -c) refuses: the last good config keeps serving;
//   - reports the id it applied in the applied parameter (PutParameter, Overwrite) once Squid takes
//     connections, and only when that parameter says otherwise, so a running proxy adds no versions;
//   - then polls the parameters' versions, without decrypting (no KMS call, no secret read), and applies a
//     change the same way; a poll that fails waits longer each time in a row, up to 16 intervals. Before Squid starts and at every poll it lists the VM's own addresses, those of its
//     interfaces and the public ones IMDS names (an Elastic IP associated after boot), which squid.conf and
//     the backstop refuse (vmguest.RenderOptions); Squid reloads when they change.
//
// The agent logs to the journal and the console, so EC2's console output (GetConsoleOutput) shows why a
// config was refused.
func RenderUserDataWith(opts UserDataOptions, o Overrides) ([]byte, error) {
	if !regionRE.MatchString(opts.Region) {
		return nil, fmt.Errorf("region %q is not an AWS region code such as eu-west-1", opts.Region)
	}
	if !prefixRE.MatchString(opts.ParameterPrefix) {
		return nil, fmt.Errorf("parameter prefix %q must be %s<proxy name>/", opts.ParameterPrefix, ParameterPrefix)
	}
	// Where squid.conf names the client CA and CRL: the renderer's own paths, so the agent installs them there.
	renderOptions := vmguest.RenderOptions().WithDefaults()
	s := agentSettings{
		Region: opts.Region, Prefix: opts.ParameterPrefix,
		Parameters: map[string]string{
			ParameterConfig: ParameterConfig, ParameterSecrets: ParameterSecrets, ParameterApplied: ParameterApplied,
			"config_part": ParameterConfig + partSuffix,
		},
		MaxParts: MaxParts, MaxConfigBytes: MaxUnpackedBytes,
		SSMEndpoint: opts.SSMEndpoint, IMDSEndpoint: o.IMDSEndpoint, Interval: o.WatchInterval, TokenTTL: o.TokenTTL,
		StateDir: StateDir, HealthPort: proxyconf.DefaultHealthPort, HealthPath: proxyconf.HealthPath, InstallCommand: vmguest.InstallIfMissing,
		Paths: map[string]string{
			"conf": proxyconf.ConfPath, "htpasswd": proxyconf.HtpasswdPath, "cert": proxyconf.TLSCertPath, "key": proxyconf.TLSKeyPath,
			"client_ca": renderOptions.ClientCAPath, "client_crl": renderOptions.ClientCRLPath,
			"backstop": proxyconf.NftablesPath, "own": proxyconf.OwnAddressesPath, "prestart": vmguest.PrestartPath,
		},
		Guard:   guardOnce(),
		Metrics: metricsSettings(),
	}
	if s.SSMEndpoint == "" {
		s.SSMEndpoint = "https://ssm." + opts.Region + "." + DNSSuffix(opts.Region)
	}
	// The agent's requests carry the role's credentials and read the secrets: over HTTPS only, so no one on
	// the way reads or changes them.
	if !strings.HasPrefix(s.SSMEndpoint, "https://") {
		return nil, fmt.Errorf("SSM endpoint %q must be an https URL: the guest reads the proxy's secrets through it", s.SSMEndpoint)
	}
	if o.PlainSSMEndpoint != "" {
		s.SSMEndpoint = o.PlainSSMEndpoint
	}
	if s.IMDSEndpoint == "" {
		s.IMDSEndpoint = IMDSEndpoint
	}
	logs, err := logsSettings(opts, o)
	if err != nil {
		return nil, err
	}
	s.Logs = logs
	if s.Interval <= 0 {
		s.Interval = watchInterval
	}
	if s.TokenTTL == 0 {
		s.TokenTTL = tokenTTL
	}
	if s.TokenTTL < 1 || s.TokenTTL > tokenTTL {
		return nil, fmt.Errorf("token TTL %d must be 1 to %d seconds", s.TokenTTL, tokenTTL)
	}
	for name, v := range map[string]string{"SSM endpoint": s.SSMEndpoint, "IMDS endpoint": s.IMDSEndpoint} {
		if err := checkEndpoint(name, v); err != nil {
			return nil, err
		}
	}
	settings, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err = userDataScript.Execute(&b, map[string]any{
		"State": StateDir, "Settings": string(settings), "Agent": strings.TrimSuffix(string(agentForUserData()), "\n"),
		"Prestart": vmguest.PrestartPath, "PrestartScript": strings.TrimSuffix(string(vmguest.RenderPrestart(proxyconf.OwnAddressesPath)), "\n"),
		"DropIn": vmguest.SquidDropInPath, "Unit": AgentUnit, "OwnCmd": vmguest.PrestartOwnAddresses, "BackstopCmd": vmguest.PrestartBackstop,
	})
	if err != nil {
		return nil, err
	}
	// The whole script goes compressed, as cloud-init takes it ("User-data formats": gzip-compressed content
	// is uncompressed first, "useful because user-data is limited to ~16384 bytes"): as text the agent alone
	// would pass EC2's limit.
	z, err := gzipBytes(b.Bytes())
	if err != nil {
		return nil, err
	}
	if len(z) > MaxUserDataBytes {
		return nil, fmt.Errorf("user-data is %d bytes compressed, more than EC2's %d", len(z), MaxUserDataBytes)
	}
	return z, nil
}

// DecodeUserData is the script of user-data RenderUserData made, as cloud-init reads it: uncompressed when it
// is gzip, as is otherwise.
func DecodeUserData(b []byte) ([]byte, error) {
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		return b, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(zr, 1<<20))
}

// logsSettings is where the agent sends the access log, nil without CloudWatch Logs: the region's HTTPS
// endpoint unless another HTTPS one is given (or a test's plain one), the file Squid writes.
func logsSettings(opts UserDataOptions, o Overrides) (*agentLogs, error) {
	l := opts.Logs
	if l == nil {
		return nil, nil
	}
	s := &agentLogs{Group: l.Group, Stream: l.Stream, Endpoint: l.Endpoint, Path: proxyconf.AccessLogPath, Flush: o.LogsFlush}
	if s.Endpoint == "" {
		s.Endpoint = "https://logs." + opts.Region + "." + DNSSuffix(opts.Region)
	}
	// The lines tell who went where: over HTTPS only, with the role's credentials.
	if !strings.HasPrefix(s.Endpoint, "https://") {
		return nil, fmt.Errorf("CloudWatch Logs endpoint %q must be an https URL: the guest sends its access log and its role's signature through it", s.Endpoint)
	}
	if o.PlainLogsEndpoint != "" {
		s.Endpoint = o.PlainLogsEndpoint
	}
	if s.Flush <= 0 {
		s.Flush = logsFlush
	}
	if err := checkEndpoint("CloudWatch Logs endpoint", s.Endpoint); err != nil {
		return nil, err
	}
	if l.Group == "" || l.Stream == "" || strings.ContainsAny(l.Group+l.Stream, "'\n") {
		return nil, fmt.Errorf("CloudWatch Logs group %q and stream %q must be set, without quotes or line breaks", l.Group, l.Stream)
	}
	return s, nil
}

// agentForUserData is the agent without its comment lines, which the guest does not need and EC2's limit
// cannot spare: only lines that hold nothing but a comment go, so the code is the same (TestAgentInUserData
// compares the two's syntax trees).
func agentForUserData() []byte {
	var b bytes.Buffer
	for i, l := range strings.SplitAfter(string(agentScript), "\n") {
		if i > 0 && strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		b.WriteString(l)
	}
	return b.Bytes()
}

// gzipBytes is b compressed as tightly as gzip goes.
func gzipBytes(b []byte) ([]byte, error) {
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression) // a valid level never fails
	_, _ = zw.Write(b)                                     // writes to a buffer never fail
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return z.Bytes(), nil
}

// The here-documents are quoted ('EOF'): nothing in them is expanded by the shell. The settings are one line
// of JSON, and the agent and the prestart script are this package's: none holds a line EGRESS_EOF
// (TestRenderUserData).
var userDataScript = template.Must(template.New("aws").Parse(`#!/bin/sh
# Egress proxy on EC2, written by terraform-provider-egress. cloud-init runs this once, at the instance's
# first boot: it installs the agent that configures Squid from the proxy's SSM parameters, at every boot.
# It holds no setting of the proxy and no secret.
set -eu
umask 022
STATE='{{.State}}'
mkdir -p "$STATE" /etc/squid "$(dirname '{{.DropIn}}')"
cat >"$STATE/agent.json.new" <<'EGRESS_EOF'
{{.Settings}}
EGRESS_EOF
cat >"$STATE/agent.py.new" <<'EGRESS_EOF'
{{.Agent}}
EGRESS_EOF
chmod 0600 "$STATE/agent.json.new"
chmod 0700 "$STATE/agent.py.new"
mv "$STATE/agent.json.new" "$STATE/agent.json"
mv "$STATE/agent.py.new" "$STATE/agent.py"
# Run by squid.service before every start of Squid: the own addresses (listed by the agent, which also asks
# IMDS for the public ones; "-": a failure keeps the last list) and the backstop (no "-": Squid does not run
# without it).
cat >'{{.Prestart}}' <<'EGRESS_EOF'
{{.PrestartScript}}
EGRESS_EOF
chown root:proxy '{{.Prestart}}' 2>/dev/null || :
chmod 0640 '{{.Prestart}}'
cat >'{{.DropIn}}' <<EGRESS_EOF
[Service]
ExecStartPre=-/usr/bin/python3 $STATE/agent.py {{.OwnCmd}}
ExecStartPre=/bin/sh {{.Prestart}} {{.BackstopCmd}}
EGRESS_EOF
cat >'/etc/systemd/system/{{.Unit}}' <<EGRESS_EOF
[Unit]
Description=Apply the egress proxy's configuration from SSM Parameter Store
After=network-online.target squid.service
Wants=network-online.target

[Service]
ExecStart=/usr/bin/python3 $STATE/agent.py watch
Restart=always
RestartSec=10
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
EGRESS_EOF
systemctl daemon-reload
systemctl enable --now '{{.Unit}}'
`))
