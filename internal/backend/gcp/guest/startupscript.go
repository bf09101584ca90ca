// Package guest is the gcp backend's guest side: the startup script a Compute Engine proxy VM runs, the
// user-data that runs it on images with cloud-init, and the metadata keys and guest attributes the two sides
// share. The backend (internal/backend/gcp) imports it; it imports no backend.
package guest

import (
	"bytes"
	"fmt"
	"strings"
	"text/template"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

// Metadata keys of a proxy VM on Compute Engine. The startup script reads the rendered files from them, so a
// change of rules is a metadata change the guest picks up, and never a new VM.
const (
	// MetadataStartupScript is the key GCE's guest environment runs at every boot.
	MetadataStartupScript = "startup-script"
	// MetadataUserData is cloud-init's key, for images that run cloud-init and not the guest environment. It
	// only runs the startup script (RenderStartupUserData): it holds no setting and no secret.
	MetadataUserData = "user-data"
	// MetadataSquidConf, MetadataHtpasswd hold the files; MetadataConfigID names their content, so the guest
	// can tell whether what runs is what is asked for.
	MetadataSquidConf = "egress-squid-conf"
	MetadataHtpasswd  = "egress-htpasswd"
	MetadataConfigID  = "egress-config-id"
	// MetadataTLSCert and MetadataTLSKey hold the TLS listener's certificate chain and key, only with TLS.
	// Compute Engine has no other channel to the guest: whoever may read the instance's metadata may read
	// the key (the docs say so). MetadataHtpasswd and MetadataTLSKey are the only keys that hold a secret.
	MetadataTLSCert = "egress-tls-cert"
	MetadataTLSKey  = "egress-tls-key"
	// MetadataClientCA and MetadataClientCRL hold the client CA and its CRL (no secrets), only when set; the
	// script installs them beside the certificate, where the config names them.
	MetadataClientCA  = "egress-client-ca"
	MetadataClientCRL = "egress-client-crl"
	// MetadataSecret names the Secret Manager secret ("projects/PROJECT/secrets/ID") that holds the password
	// file's hash and the TLS key of a VM with a service account, in place of MetadataHtpasswd and
	// MetadataTLSKey. The script reads its latest version with the VM's own token from the metadata server.
	// Its payload has one line per file, a name and the file in base64: SecretLineHtpasswd, SecretLineTLSKey.
	MetadataSecret     = "egress-secret"
	SecretLineHtpasswd = "htpasswd"
	SecretLineTLSKey   = "tls-key"
	// MetadataCloudLogging, when set, names the Cloud Logging log (its LOG_ID) the VM ships its access log
	// to, as its service account (cloudlogging.go); absent, nothing is shipped.
	MetadataCloudLogging = "egress-cloud-logging"
	// MetadataMtailProgram, MetadataMtailDropIn and MetadataSquidExporterDropIn hold the metrics programs'
	// files (vmguest.MetricsFiles), only with metrics: the script installs them where MetricsKeys says and runs
	// Debian's mtail and prometheus-squid-exporter with them (installing the packages when the image lacks them);
	// MetadataActiveScript and MetadataActiveUnit the script and the service that read Squid's requests in flight.
	MetadataMtailProgram        = "egress-mtail-program"
	MetadataMtailDropIn         = "egress-mtail-dropin"
	MetadataSquidExporterDropIn = "egress-squid-exporter-dropin"
	MetadataActiveScript        = "egress-active-requests-script"
	MetadataActiveUnit          = "egress-active-requests-unit"
	// MetadataBackstop holds the backstop ruleset (proxyconf.RenderNftables), which the guest loads before every start
	// of Squid.
	MetadataBackstop = "egress-backstop-nft"
	// GuestAttributeNamespace and GuestAttributeApplied are where the guest reports the config id it applied
	// (egress/applied), and GuestAttributeError why it refused one.
	GuestAttributeNamespace = "egress"
	GuestAttributeApplied   = "applied"
	GuestAttributeError     = "error"
)

// MetricsKeys are the metrics files' metadata keys and the paths the script installs them at.
var MetricsKeys = map[string]string{
	MetadataMtailProgram:        vmguest.MtailProgramPath,
	MetadataMtailDropIn:         vmguest.MtailDropInPath,
	MetadataSquidExporterDropIn: vmguest.SquidExporterDropInPath,
	MetadataActiveScript:        vmguest.ActiveScriptPath,
	MetadataActiveUnit:          vmguest.ActiveUnitPath,
}

// StartupScriptOptions are where the script finds the metadata server and puts things; the zero value is a
// GCE VM. Tests run the script in a chroot of their own with the metadata server on an address they chose.
type StartupScriptOptions struct {
	// MetadataURL defaults to http://metadata.google.internal/computeMetadata/v1.
	MetadataURL string
	// StateDir keeps the id of the config applied last; /var/lib/egress-proxy by default.
	StateDir string
	// WatchInterval is how many seconds the watcher waits between reads of the metadata; 10 by default.
	WatchInterval int
	// OwnAddressesFile is where the script lists the VM's own addresses, which squid.conf refuses
	// (vmguest.RenderOptions); proxyconf.OwnAddressesPath by default.
	OwnAddressesFile string
	// SecretManagerURL is Secret Manager's REST API, where the script reads the proxy's secret;
	// https://secretmanager.googleapis.com/v1 by default.
	SecretManagerURL string
	// LoggingURL is Cloud Logging's REST API, where the shipper writes the access log;
	// https://logging.googleapis.com by default.
	LoggingURL string
}

func (o StartupScriptOptions) withDefaults() (StartupScriptOptions, error) {
	if o.MetadataURL == "" {
		o.MetadataURL = "http://metadata.google.internal/computeMetadata/v1"
	}
	if o.StateDir == "" {
		o.StateDir = "/var/lib/egress-proxy"
	}
	if o.WatchInterval <= 0 {
		o.WatchInterval = 10
	}
	if o.OwnAddressesFile == "" {
		o.OwnAddressesFile = proxyconf.OwnAddressesPath
	}
	if o.SecretManagerURL == "" {
		o.SecretManagerURL = "https://secretmanager.googleapis.com/v1"
	}
	if o.LoggingURL == "" {
		o.LoggingURL = "https://logging.googleapis.com"
	}
	for name, v := range map[string]string{"metadata URL": o.MetadataURL, "state dir": o.StateDir, "own addresses file": o.OwnAddressesFile,
		"Secret Manager URL": o.SecretManagerURL, "Cloud Logging URL": o.LoggingURL} {
		for _, r := range v {
			if r <= ' ' || r == 0x7f || r == '\'' || r == '"' || r == '\\' || r == '$' || r == '`' {
				return o, fmt.Errorf("%s %q must not contain spaces, quotes, '$', '`' or '\\'", name, v)
			}
		}
	}
	return o, nil
}

// RenderStartupScript renders the startup-script of a proxy VM. It holds no setting of the proxy: everything
// comes from the metadata attributes at run time, so the same script serves every proxy and every change.
//
// At every boot it lists the VM's own addresses and applies the current config (idempotently: an id already
// applied and a running Squid change nothing), then installs and starts a small systemd service that runs the
// same script in "watch" mode, which applies the config again whenever egress-config-id changes. A config
// Squid rejects (squid -k parse) is never installed: the proxy keeps its last good config and the guest
// reports the error in a guest attribute.
//
// The own addresses (list_own_addresses in the script) are listed again before every start of Squid, through
// a drop-in of squid.service, and before every apply of the watcher; Squid reloads when they changed. So a VM
// stopped and started again, which gets new ephemeral addresses, refuses the new ones from its first request.
// The same drop-in loads the backstop below Squid (proxyconf.RenderNftables, from MetadataBackstop, with the own
// addresses and the resolvers: proxyconf.BackstopLoader) before every start of Squid; Squid does not start without it.
func RenderStartupScript(opts StartupScriptOptions) ([]byte, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err = startupScript.Execute(&b, map[string]any{
		"MD": opts.MetadataURL, "State": opts.StateDir, "Interval": opts.WatchInterval, "Own": opts.OwnAddressesFile,
		"Conf": proxyconf.ConfPath, "Htpasswd": proxyconf.HtpasswdPath, "Install": vmguest.InstallIfMissing,
		"KeyBackstop": MetadataBackstop, "Backstop": proxyconf.NftablesPath, "DropIn": vmguest.SquidDropInPath,
		"KeyConf": MetadataSquidConf, "KeyPass": MetadataHtpasswd, "KeyID": MetadataConfigID,
		"KeyCert": MetadataTLSCert, "KeyTLSKey": MetadataTLSKey, "Cert": proxyconf.TLSCertPath, "TLSKey": proxyconf.TLSKeyPath,
		"KeyCA": MetadataClientCA, "KeyCRL": MetadataClientCRL, "CA": proxyconf.ClientCAPath, "CRL": proxyconf.ClientCRLPath,
		"SM": opts.SecretManagerURL, "KeySecret": MetadataSecret, "LinePass": SecretLineHtpasswd, "LineKey": SecretLineTLSKey,
		"NS": GuestAttributeNamespace, "Applied": GuestAttributeApplied, "Error": GuestAttributeError,
		"HealthPort": proxyconf.DefaultHealthPort,
		"KeyLog":     MetadataCloudLogging, "Logging": opts.LoggingURL, "AccessLog": proxyconf.AccessLogPath,
		"ShipperUnit": CloudLoggingUnit, "Shipper": strings.TrimRight(cloudLoggingShipper, "\n"),
		"MetricsKeys": MetricsKeys, "MetricsUnits": strings.Join(vmguest.MetricsUnits, " "), "MetricsIfMissing": vmguest.MetricsIfMissing,
		"LoadBackstop": proxyconf.BackstopLoader(proxyconf.NftablesPath, opts.OwnAddressesFile, proxyconf.ResolvConfPath),
	})
	if err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// RenderStartupUserData renders the user-data of a proxy VM, for images that run cloud-init rather than
// Compute Engine's guest environment: it fetches the startup script from the metadata server and runs it
// once, and the script's watcher service does the rest at every later boot. It holds no setting of the proxy
// and no secret, so nothing is copied into a key that more software reads (cloud-init logs and caches its
// user-data on the VM). On images that run both, the two runs of the script at the first boot take turns.
func RenderStartupUserData(opts StartupScriptOptions) ([]byte, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, `#cloud-config
# Written by terraform-provider-egress: runs the startup-script metadata attribute, which configures the proxy.
runcmd:
  - [sh, -c, 'curl -fsS -H "Metadata-Flavor: Google" %s/instance/attributes/%s >/run/egress-startup.sh && exec sh /run/egress-startup.sh']
`, opts.MetadataURL, MetadataStartupScript), nil
}

// The script is POSIX sh and uses curl, which Debian's GCE images ship. Every value in it is a constant of
// this package or of proxyconf, or a checked option: nothing a user typed reaches the shell.
var startupScript = template.Must(template.New("startup").Parse(`#!/bin/sh
# Egress proxy on Compute Engine, written by terraform-provider-egress. Runs at every boot (startup-script)
# and as egress-proxy-watch.service ("watch"): applies the Squid config held in the instance metadata.
set -u
MD='{{.MD}}'
STATE='{{.State}}'
OWN='{{.Own}}'
SM='{{.SM}}'
md() { curl -fsS -H 'Metadata-Flavor: Google' "$MD/instance/attributes/$1"; }

# The proxy's secret, when its metadata names one (a VM with a service account): its latest version, read
# with the token the metadata server hands the VM's service account, which may read this secret alone. The
# token goes to curl on its standard input, never on a command line other processes can list; the payload is
# written only under $1, one file per line ("NAME BASE64"). No secret named: 1, and the metadata holds them.
read_secret() {
	name=$(md {{.KeySecret}} 2>/dev/null) || return 1
	case "$name" in
	projects/*/secrets/*) ;;
	*) return 2 ;;
	esac
	tok=$(curl -fsS -H 'Metadata-Flavor: Google' "$MD/instance/service-accounts/default/token" |
		sed -n 's/.*"access_token" *: *"\([^"]*\)".*/\1/p') || return 2
	[ -n "$tok" ] || return 2
	printf 'Authorization: Bearer %s\n' "$tok" | curl -fsS -H @- "$SM/$name/versions/latest:access" >"$1/secret.json" || return 2
	sed -n 's/.*"data" *: *"\([^"]*\)".*/\1/p' "$1/secret.json" | base64 -d >"$1/secret" || return 2
	rm -f "$1/secret.json"
	: >"$1/passwd.secret"
	: >"$1/tls.key.secret"
	awk '$1 == "{{.LinePass}}" { print $2 }' "$1/secret" | base64 -d >"$1/passwd.secret" || return 2
	awk '$1 == "{{.LineKey}}" { print $2 }' "$1/secret" | base64 -d >"$1/tls.key.secret" || return 2
	rm -f "$1/secret"
}
report() { curl -fsS -X PUT -H 'Metadata-Flavor: Google' --data-binary "$2" "$MD/instance/guest-attributes/{{.NS}}/$1" >/dev/null || true; }

# The VM's own addresses, which squid.conf refuses as destinations: those of its interfaces, and the external
# addresses Compute Engine translates to it, which are on none of them. Listed at every boot and before every
# apply, since a VM stopped and started again has new ephemeral addresses. Only address characters pass, so
# nothing the metadata server says can become anything else in Squid's config. own_changed=1 when the list
# in force changed.
nic() { curl -fsS --max-time 5 -H 'Metadata-Flavor: Google' "$MD/instance/network-interfaces/$1"; }
list_own_addresses() {
	own_changed=0
	mkdir -p "$(dirname "$OWN")"
	{
		ip -o addr show | while read -r _ _ _ a _; do echo "${a%/*}"; done
		for n in $(nic '' 2>/dev/null); do
			for c in $(nic "${n}access-configs/" 2>/dev/null); do
				nic "${n}access-configs/${c}external-ip" 2>/dev/null && echo
			done
		done
	} | grep -E '^[0-9A-Fa-f.:]+$' | sort -u >"$OWN.$$"
	if cmp -s "$OWN.$$" "$OWN"; then
		rm -f "$OWN.$$"
		return 0
	fi
	# A line Squid cannot read as an address would stop it at its next start or reload: such a list is not
	# installed, and the one in force stays.
	if command -v squid >/dev/null; then
		printf 'acl own_addresses dst "%s"\nhttp_access deny all\n' "$OWN.$$" >"$OWN.$$.conf"
		if ! squid -k parse -f "$OWN.$$.conf" >/dev/null 2>&1; then
			rm -f "$OWN.$$" "$OWN.$$.conf"
			report {{.Error}} "squid cannot read the VM's own addresses; the previous list stays"
			return 0
		fi
		rm -f "$OWN.$$.conf"
	fi
	chmod 0644 "$OWN.$$" && mv "$OWN.$$" "$OWN" && own_changed=1
}

# The backstop below Squid: the proxy user's packets to refused ranges are rejected (RenderNftables).
{{.LoadBackstop}}

# systemd calls Squid started a moment before it listens: "applied" is reported once the health port of the
# config in force takes connections (any answer will do), so that whoever waits for it can use the proxy.
listening() {
	hp=$(awk '$1 == "acl" && $2 == "health_port" { print $4; exit }' '{{.Conf}}')
	i=0
	until curl -s -o /dev/null --max-time 2 "http://127.0.0.1:${hp:-{{.HealthPort}}}/"; do
		i=$((i + 1))
		[ "$i" -ge 120 ] && return 1
		sleep 1
	done
}

# Metrics (only while the metadata holds the metrics files): Debian's mtail and prometheus-squid-exporter,
# from their packages' units with the drop-ins from metadata. In two steps around Squid's restart, so that no
# metrics port is ever open without the backstop's rule for its ranges: stop_metrics, before the new backstop
# is loaded, stops both programs and removes their files when the files change; start_metrics, once Squid runs
# the new config (with the cache manager the exporter reads), installs the new files and starts both. Each unit
# also refuses to start while the backstop's metrics chain is not loaded (the drop-ins' ExecStartPre).
# fetch_metrics puts the files of config $id in $1: 0 with metrics, 1 without, 2 when the metadata server
# did not say.
fetch_metrics() {
	hasmetrics=0
{{- range $key, $path := .MetricsKeys}}
	code=$(curl -sS -o "$1/{{$key}}" -w '%{http_code}' -H 'Metadata-Flavor: Google' "$MD/instance/attributes/{{$key}}" 2>/dev/null)
	case "$code" in
	200) hasmetrics=1 ;;
	404) rm -f "$1/{{$key}}" ;;
	*) return 2 ;;
	esac
{{- end}}
	[ "$hasmetrics" = 1 ]
}
# metrics_current: the installed files are those in $1 (none installed, none in $1, is current too).
metrics_current() {
{{- range $key, $path := .MetricsKeys}}
	if [ -e "$1/{{$key}}" ]; then
		cmp -s "$1/{{$key}}" '{{$path}}' || return 1
	else
		[ ! -e '{{$path}}' ] || return 1
	fi
{{- end}}
}
stop_metrics() {
	metrics_pending=0
	metrics_current "$1" && return 0
	metrics_pending=1
	for u in {{.MetricsUnits}}; do
		systemctl disable --now "$u" >/dev/null 2>&1
	done
	rm -f{{range $key, $path := .MetricsKeys}} '{{$path}}'{{end}}
}
start_metrics() {
	if [ "$hasmetrics" = 0 ]; then
		[ "$metrics_pending" = 1 ] && systemctl daemon-reload
		return 0
	fi
	# Current files: the programs only have to run.
	[ "$metrics_pending" = 0 ] && systemctl is-active --quiet {{.MetricsUnits}} && return 0
{{- range $key, $path := .MetricsKeys}}
	mkdir -p "$(dirname '{{$path}}')" && install -m 0644 -o root -g root "$1/{{$key}}" '{{$path}}' || return 1
{{- end}}
	systemctl daemon-reload
	# The packages' first start (when installed here) already takes the drop-ins.
	sh -c '{{.MetricsIfMissing}}' || return 1
	metrics_pending=0
}

# One apply at a time: at boot the startup script and the watch service both run one.
locked_apply() {
	mkdir -p "$STATE"
	( flock 9 && apply ) 9>"$STATE/lock"
}

apply() {
	id=$(md {{.KeyID}}) || return 1
	list_own_addresses
	# A Squid still starting is not a Squid to restart.
	i=0
	while [ "$(systemctl is-active squid 2>/dev/null)" = activating ] && [ "$i" -lt 120 ]; do
		i=$((i + 1))
		sleep 1
	done
	if [ "$id" = "$(cat "$STATE/applied" 2>/dev/null)" ] && systemctl is-active --quiet squid; then
		if [ "$own_changed" = 1 ]; then
			load_backstop || { report {{.Error}} "the backstop did not load with the VM's new own addresses"; return 1; }
			systemctl reload squid || { report {{.Error}} "squid did not reload the VM's own addresses"; return 1; }
		fi
		listening || { report {{.Error}} "squid runs config $id but does not take connections"; return 1; }
		# Programs that stopped (or a boot before they started) are started again.
		if [ -e '{{index .MetricsKeys "egress-mtail-dropin"}}' ] && ! systemctl is-active --quiet {{.MetricsUnits}}; then
			sh -c '{{.MetricsIfMissing}}' || { report {{.Error}} "the metrics programs of config $id did not start"; return 1; }
		fi
		report {{.Applied}} "$id"
		return 0
	fi
	tmp=$(mktemp -d) || return 1
	md {{.KeyConf}} >"$tmp/squid.conf" || { rm -rf "$tmp"; return 1; }
	haspass=0
	hastls=0
	read_secret "$tmp"
	case $? in
	0)
		[ -s "$tmp/passwd.secret" ] && mv "$tmp/passwd.secret" "$tmp/passwd" && haspass=1
		[ -s "$tmp/tls.key.secret" ] && md {{.KeyCert}} >"$tmp/tls.crt" 2>/dev/null && mv "$tmp/tls.key.secret" "$tmp/tls.key" && hastls=1
		;;
	1)
		# No secret named: a VM without a service account keeps its secrets in metadata.
		if md {{.KeyPass}} >"$tmp/passwd" 2>/dev/null; then haspass=1; fi
		if md {{.KeyCert}} >"$tmp/tls.crt" 2>/dev/null && md {{.KeyTLSKey}} >"$tmp/tls.key" 2>/dev/null; then hastls=1; fi
		;;
	*)
		report {{.Error}} "config $id: the proxy's secret could not be read from Secret Manager with the VM's service account"
		rm -rf "$tmp"
		return 1
		;;
	esac
	# The client CA and CRL are no secrets: always from metadata, each only when set.
	hasca=0
	hascrl=0
	if [ "$hastls" = 1 ] && md {{.KeyCA}} >"$tmp/client-ca.crt" 2>/dev/null; then hasca=1; fi
	if [ "$hastls" = 1 ] && md {{.KeyCRL}} >"$tmp/client-ca.crl" 2>/dev/null; then hascrl=1; fi
	md {{.KeyBackstop}} >"$tmp/backstop.nft" || { report {{.Error}} "config $id has no backstop ruleset ({{.KeyBackstop}})"; rm -rf "$tmp"; return 1; }
	fetch_metrics "$tmp"
	[ $? -le 1 ] || { rm -rf "$tmp"; return 1; }
	mkdir -p /etc/squid "$STATE"
	# The config names the TLS files where they are installed, so they are in place before it is checked;
	# the ones they replace come back if Squid rejects it.
	for f in '{{.Cert}}' '{{.TLSKey}}' '{{.CA}}' '{{.CRL}}'; do
		[ -e "$f" ] && cp -p "$f" "$tmp/old.$(basename "$f")"
	done
	if [ "$hastls" = 1 ]; then
		install -m 0644 -o root -g proxy "$tmp/tls.crt" '{{.Cert}}'
		install -m 0640 -o root -g proxy "$tmp/tls.key" '{{.TLSKey}}'
	fi
	[ "$hasca" = 1 ] && install -m 0644 -o root -g proxy "$tmp/client-ca.crt" '{{.CA}}'
	[ "$hascrl" = 1 ] && install -m 0644 -o root -g proxy "$tmp/client-ca.crl" '{{.CRL}}'
	# The files go in place before Squid is installed, so its first start already uses them (--force-confold).
	# The backstop too: the package's first start of Squid runs the drop-in, which loads it.
	if ! command -v squid >/dev/null || ! command -v nft >/dev/null; then
		if ! command -v squid >/dev/null; then
			install -m 0640 -o root -g proxy "$tmp/squid.conf" '{{.Conf}}'
			[ "$haspass" = 1 ] && install -m 0640 -o root -g proxy "$tmp/passwd" '{{.Htpasswd}}'
		fi
		install -m 0640 -o root -g proxy "$tmp/backstop.nft" '{{.Backstop}}'
		sh -c '{{.Install}}' || { rm -rf "$tmp"; return 1; }
	fi
	# nft -c checks the ruleset against the kernel without changing anything.
	if ! nft -c -f "$tmp/backstop.nft" >"$tmp/parse.log" 2>&1; then
		report {{.Error}} "nft rejected the backstop of config $id: $(tail -n 3 "$tmp/parse.log")"
		rm -rf "$tmp"
		return 1
	fi
	if ! squid -k parse -f "$tmp/squid.conf" >"$tmp/parse.log" 2>&1; then
		report {{.Error}} "squid rejected config $id: $(tail -n 3 "$tmp/parse.log")"
		for f in '{{.Cert}}' '{{.TLSKey}}' '{{.CA}}' '{{.CRL}}'; do
			if [ -e "$tmp/old.$(basename "$f")" ]; then cp -p "$tmp/old.$(basename "$f")" "$f"; else rm -f "$f"; fi
		done
		rm -rf "$tmp"
		return 1
	fi
	# The metrics programs stop before the backstop that keeps their ports changes.
	stop_metrics "$tmp"
	[ "$haspass" = 1 ] && install -m 0640 -o root -g proxy "$tmp/passwd" '{{.Htpasswd}}'
	install -m 0640 -o root -g proxy "$tmp/squid.conf" '{{.Conf}}'
	# Loaded by squid.service's drop-in at the restart below.
	install -m 0640 -o root -g proxy "$tmp/backstop.nft" '{{.Backstop}}'
	# A key no config uses any more does not stay on the disk.
	[ "$hastls" = 0 ] && rm -f '{{.Cert}}' '{{.TLSKey}}'
	[ "$hasca" = 0 ] && rm -f '{{.CA}}'
	[ "$hascrl" = 0 ] && rm -f '{{.CRL}}'
	systemctl enable squid >/dev/null 2>&1
	systemctl restart squid || { report {{.Error}} "squid did not restart with config $id"; rm -rf "$tmp"; return 1; }
	printf '%s\n' "$id" >"$STATE/applied"
	listening || { report {{.Error}} "squid restarted with config $id but does not take connections"; rm -rf "$tmp"; return 1; }
	# Squid runs the new backstop and config: the metrics programs may start. Should they not, the next
	# apply (the same id) starts them again.
	start_metrics "$tmp" || { report {{.Error}} "the metrics programs of config $id did not start"; rm -rf "$tmp"; return 1; }
	rm -rf "$tmp"
	report {{.Applied}} "$id"
}

# Cloud Logging: while the metadata names a log, the shipper (cloudlogging.py) runs as its own unit, with
# a user of its own that may read Squid's log (group proxy) but not /etc/squid, where group proxy reads the
# password file and the TLS key; when the key goes,
# it stops. So turning it on or off is a metadata change the watcher applies in place. A metadata server
# that does not answer changes nothing either way.
sync_cloud_logging() {
	unit='{{.ShipperUnit}}'
	code=$(curl -sS -o /dev/null -w '%{http_code}' -H 'Metadata-Flavor: Google' "$MD/instance/attributes/{{.KeyLog}}" 2>/dev/null)
	case "$code" in
	200) ;;
	404)
		if [ -e "/etc/systemd/system/$unit" ]; then
			systemctl disable --now "$unit" >/dev/null 2>&1
			rm -f "/etc/systemd/system/$unit"
			systemctl daemon-reload
		fi
		return 0
		;;
	*) return 0 ;;
	esac
	command -v python3 >/dev/null || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y python3-minimal; } || return 1
	changed=0
	cat >"$STATE/cloud-logging.py.$$" <<'EGRESS_SHIPPER'
{{.Shipper}}
EGRESS_SHIPPER
	if cmp -s "$STATE/cloud-logging.py.$$" "$STATE/cloud-logging.py"; then
		rm -f "$STATE/cloud-logging.py.$$"
	else
		chmod 0644 "$STATE/cloud-logging.py.$$" && mv "$STATE/cloud-logging.py.$$" "$STATE/cloud-logging.py" && changed=1
	fi
	cat >"/etc/systemd/system/$unit.$$" <<UNIT
[Unit]
Description=Ship the egress proxy's access log to Cloud Logging
After=network-online.target squid.service
Wants=network-online.target

[Service]
ExecStart=/usr/bin/python3 $STATE/cloud-logging.py $MD '{{.Logging}}' '{{.AccessLog}}' /var/lib/egress-cloud-logging
DynamicUser=yes
SupplementaryGroups=proxy
StateDirectory=egress-cloud-logging
InaccessiblePaths=/etc/squid
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
UNIT
	if cmp -s "/etc/systemd/system/$unit.$$" "/etc/systemd/system/$unit"; then
		rm -f "/etc/systemd/system/$unit.$$"
	else
		mv "/etc/systemd/system/$unit.$$" "/etc/systemd/system/$unit" && systemctl daemon-reload && changed=1
	fi
	systemctl enable "$unit" >/dev/null 2>&1
	if [ "$changed" = 1 ]; then
		systemctl restart "$unit"
	else
		systemctl is-active --quiet "$unit" || systemctl start "$unit"
	fi
}

case "${1:-}" in
own-addresses)
	list_own_addresses
	exit 0
	;;
backstop)
	load_backstop
	exit
	;;
watch)
	while :; do
		locked_apply
		sync_cloud_logging
		sleep {{.Interval}}
	done
	;;
esac

mkdir -p "$STATE" "$(dirname '{{.DropIn}}')"
if [ "$0" != "$STATE/startup.sh" ]; then
	cp "$0" "$STATE/startup.sh.$$" && chmod 0755 "$STATE/startup.sh.$$" && mv "$STATE/startup.sh.$$" "$STATE/startup.sh"
fi
# Squid starts at boot before this script runs: it lists the own addresses itself first ("-": a failure to
# list them does not keep the proxy down; the list of the last boot stays, and the next apply redoes it),
# then loads the backstop (no "-": Squid does not run without it).
cat >'{{.DropIn}}' <<UNIT
[Service]
ExecStartPre=-/bin/sh $STATE/startup.sh own-addresses
ExecStartPre=/bin/sh $STATE/startup.sh backstop
UNIT
systemctl daemon-reload
locked_apply
sync_cloud_logging
cat >/etc/systemd/system/egress-proxy-watch.service <<UNIT
[Unit]
Description=Apply egress proxy config changes from instance metadata
After=network-online.target squid.service
Wants=network-online.target

[Service]
ExecStart=/bin/sh $STATE/startup.sh watch
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now egress-proxy-watch.service
`))
