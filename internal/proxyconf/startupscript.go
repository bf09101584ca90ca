package proxyconf

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"text/template"
)

// Metadata keys of a proxy VM on Compute Engine. The startup script reads the rendered files from them, so a
// change of rules is a metadata change the guest picks up, and never a new VM.
const (
	// MetadataStartupScript is the key GCE's guest environment runs at every boot.
	MetadataStartupScript = "startup-script"
	// MetadataUserData is cloud-init's key, for images that run cloud-init instead.
	MetadataUserData = "user-data"
	// MetadataSquidConf, MetadataHtpasswd hold the files; MetadataConfigID names their content, so the guest
	// can tell whether what runs is what is asked for.
	MetadataSquidConf = "egress-squid-conf"
	MetadataHtpasswd  = "egress-htpasswd"
	MetadataConfigID  = "egress-config-id"
	// MetadataTLSCert and MetadataTLSKey hold the TLS listener's certificate chain and key, only with TLS.
	// Compute Engine has no other channel to the guest: whoever may read the instance's metadata may read
	// the key (the docs say so).
	MetadataTLSCert = "egress-tls-cert"
	MetadataTLSKey  = "egress-tls-key"
	// GuestAttributeNamespace and GuestAttributeApplied are where the guest reports the config id it applied
	// (egress/applied), and GuestAttributeError why it refused one.
	GuestAttributeNamespace = "egress"
	GuestAttributeApplied   = "applied"
	GuestAttributeError     = "error"
)

// ConfigID names the files the guest applies (squid.conf, htpasswd and, with TLS, the certificate chain and
// key): 16 hex digits of their SHA-256, so a new certificate is a new config the guest applies.
func ConfigID(squidConf, htpasswd, tlsCert, tlsKey []byte) string {
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "%d\n", len(squidConf)) // a hash never fails to write
	h.Write(squidConf)
	h.Write(htpasswd)
	if len(tlsCert)+len(tlsKey) > 0 {
		// Length-prefixed, so that bytes moved from the password file to the certificate change the id.
		_, _ = fmt.Fprintf(h, "\ntls %d %d\n", len(htpasswd), len(tlsCert))
		h.Write(tlsCert)
		h.Write(tlsKey)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
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
}

// RenderStartupScript renders the startup-script of a proxy VM. It holds no setting of the proxy: everything
// comes from the metadata attributes at run time, so the same script serves every proxy and every change.
//
// At every boot it applies the current config (idempotently: an id already applied and a running Squid change
// nothing), then installs and starts a small systemd service that runs the same script in "watch" mode, which
// applies the config again whenever egress-config-id changes. A config Squid rejects (squid -k parse) is never
// installed: the proxy keeps its last good config and the guest reports the error in a guest attribute.
func RenderStartupScript(opts StartupScriptOptions) ([]byte, error) {
	if opts.MetadataURL == "" {
		opts.MetadataURL = "http://metadata.google.internal/computeMetadata/v1"
	}
	if opts.StateDir == "" {
		opts.StateDir = "/var/lib/egress-proxy"
	}
	if opts.WatchInterval <= 0 {
		opts.WatchInterval = 10
	}
	for name, v := range map[string]string{"metadata URL": opts.MetadataURL, "state dir": opts.StateDir} {
		for _, r := range v {
			if r <= ' ' || r == 0x7f || r == '\'' || r == '"' || r == '\\' || r == '$' || r == '`' {
				return nil, fmt.Errorf("%s %q must not contain spaces, quotes, '$', '`' or '\\'", name, v)
			}
		}
	}
	var b bytes.Buffer
	err := startupScript.Execute(&b, map[string]any{
		"MD": opts.MetadataURL, "State": opts.StateDir, "Interval": opts.WatchInterval,
		"Conf": ConfPath, "Htpasswd": HtpasswdPath, "Install": installSquidIfMissing,
		"KeyConf": MetadataSquidConf, "KeyPass": MetadataHtpasswd, "KeyID": MetadataConfigID,
		"KeyCert": MetadataTLSCert, "KeyTLSKey": MetadataTLSKey, "Cert": TLSCertPath, "TLSKey": TLSKeyPath,
		"NS": GuestAttributeNamespace, "Applied": GuestAttributeApplied, "Error": GuestAttributeError,
		"HealthPort": DefaultHealthPort,
	})
	if err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// The script is POSIX sh and uses curl, which Debian's GCE images ship. Every value in it is a constant of
// this package or a checked option: nothing a user typed reaches the shell.
var startupScript = template.Must(template.New("startup").Parse(`#!/bin/sh
# Egress proxy on Compute Engine, written by terraform-provider-egress. Runs at every boot (startup-script)
# and as egress-proxy-watch.service ("watch"): applies the Squid config held in the instance metadata.
set -u
MD='{{.MD}}'
STATE='{{.State}}'
md() { curl -fsS -H 'Metadata-Flavor: Google' "$MD/instance/attributes/$1"; }
report() { curl -fsS -X PUT -H 'Metadata-Flavor: Google' --data-binary "$2" "$MD/instance/guest-attributes/{{.NS}}/$1" >/dev/null || true; }

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

# One apply at a time: at boot the startup script and the watch service both run one.
locked_apply() {
	mkdir -p "$STATE"
	( flock 9 && apply ) 9>"$STATE/lock"
}

apply() {
	id=$(md {{.KeyID}}) || return 1
	# A Squid still starting is not a Squid to restart.
	i=0
	while [ "$(systemctl is-active squid 2>/dev/null)" = activating ] && [ "$i" -lt 120 ]; do
		i=$((i + 1))
		sleep 1
	done
	if [ "$id" = "$(cat "$STATE/applied" 2>/dev/null)" ] && systemctl is-active --quiet squid; then
		listening || { report {{.Error}} "squid runs config $id but does not take connections"; return 1; }
		report {{.Applied}} "$id"
		return 0
	fi
	tmp=$(mktemp -d) || return 1
	md {{.KeyConf}} >"$tmp/squid.conf" || { rm -rf "$tmp"; return 1; }
	if md {{.KeyPass}} >"$tmp/passwd" 2>/dev/null; then haspass=1; else haspass=0; fi
	if md {{.KeyCert}} >"$tmp/tls.crt" 2>/dev/null && md {{.KeyTLSKey}} >"$tmp/tls.key" 2>/dev/null; then hastls=1; else hastls=0; fi
	mkdir -p /etc/squid "$STATE"
	# The config names the TLS files where they are installed, so they are in place before it is checked;
	# the ones they replace come back if Squid rejects it.
	for f in '{{.Cert}}' '{{.TLSKey}}'; do
		[ -e "$f" ] && cp -p "$f" "$tmp/old.$(basename "$f")"
	done
	if [ "$hastls" = 1 ]; then
		install -m 0644 -o root -g proxy "$tmp/tls.crt" '{{.Cert}}'
		install -m 0640 -o root -g proxy "$tmp/tls.key" '{{.TLSKey}}'
	fi
	# The files go in place before Squid is installed, so its first start already uses them (--force-confold).
	if ! command -v squid >/dev/null; then
		install -m 0640 -o root -g proxy "$tmp/squid.conf" '{{.Conf}}'
		[ "$haspass" = 1 ] && install -m 0640 -o root -g proxy "$tmp/passwd" '{{.Htpasswd}}'
		sh -c '{{.Install}}' || { rm -rf "$tmp"; return 1; }
	fi
	if ! squid -k parse -f "$tmp/squid.conf" >"$tmp/parse.log" 2>&1; then
		report {{.Error}} "squid rejected config $id: $(tail -n 3 "$tmp/parse.log")"
		for f in '{{.Cert}}' '{{.TLSKey}}'; do
			if [ -e "$tmp/old.$(basename "$f")" ]; then cp -p "$tmp/old.$(basename "$f")" "$f"; else rm -f "$f"; fi
		done
		rm -rf "$tmp"
		return 1
	fi
	[ "$haspass" = 1 ] && install -m 0640 -o root -g proxy "$tmp/passwd" '{{.Htpasswd}}'
	install -m 0640 -o root -g proxy "$tmp/squid.conf" '{{.Conf}}'
	# A key no config uses any more does not stay on the disk.
	[ "$hastls" = 0 ] && rm -f '{{.Cert}}' '{{.TLSKey}}'
	rm -rf "$tmp"
	systemctl enable squid >/dev/null 2>&1
	systemctl restart squid || { report {{.Error}} "squid did not restart with config $id"; return 1; }
	printf '%s\n' "$id" >"$STATE/applied"
	listening || { report {{.Error}} "squid restarted with config $id but does not take connections"; return 1; }
	report {{.Applied}} "$id"
}

if [ "${1:-}" = watch ]; then
	while :; do
		locked_apply
		sleep {{.Interval}}
	done
fi

locked_apply
mkdir -p "$STATE"
if [ "$0" != "$STATE/startup.sh" ]; then
	cp "$0" "$STATE/startup.sh.new" && chmod 0755 "$STATE/startup.sh.new" && mv "$STATE/startup.sh.new" "$STATE/startup.sh"
fi
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
