package proxyconf

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"regexp"
)

// MaxMetadataValueBytes is GCE's limit on one metadata value, such as the squid.conf or the backstop ruleset
// its proxies read from metadata.
const MaxMetadataValueBytes = 256 * 1024

// MaxUserDataBytes bounds RenderUserData's result, which only the kvm backend's seed ISO carries (Compute
// Engine proxies get their files from metadata items of their own, each bound by MaxMetadataValueBytes): well
// inside the 1 MiB the kvm backend reads of a seed volume when it compares it with new settings.
const MaxUserDataBytes = 512 * 1024

// VMRenderOptions are the options of the squid.conf a cloud-init proxy VM runs, the one RenderUserData
// writes: the VM's own addresses are listed at boot in OwnAddressesPath. A reconfiguration renders with them
// too, so the running config and the seed's stay the same.
func VMRenderOptions() RenderOptions { return RenderOptions{OwnAddressesFile: OwnAddressesPath} }

// Files of a cloud-init proxy VM besides Squid's own: the script that runs before every start of Squid, and
// the drop-in of squid.service that runs it.
const (
	PrestartPath    = "/etc/squid/egress-prestart"
	SquidDropInPath = "/etc/systemd/system/squid.service.d/egress.conf"
)

// RenderUserData renders the cloud-init user-data of a proxy VM: install Squid, write its config, start it.
// Nothing else, so the VM's behaviour is the proxy's and no more.
//
// The files are written in cloud-init's first stage, before Squid is installed where the image lacks it. The
// "proxy" group owning them already exists then (Debian's and Ubuntu's base-passwd create it), and the install
// uses dpkg's --force-confold, which keeps the squid.conf already in place: Squid's first start after
// installation therefore uses this config, never the distribution's default one that proxies for every private
// network. The package index is only refreshed when Squid or nft is missing, so an image that ships both boots
// without reaching any mirror (proxies often run where only the proxy itself may go out). The restart at the
// end applies the config on an image where Squid was already installed and running.
//
// Before every start of Squid, at every boot and not only the instance's first (cloud-init writes the files
// once, systemd runs the drop-in each time), the VM lists its interfaces' addresses in OwnAddressesPath, which
// the destination guards read (no backend knows a DHCP address before boot, and it may change across
// reboots), and loads the backstop below Squid (RenderNftables). Squid does not start without the backstop.
// The first boot lists the addresses once more before Squid is first started, since squid.service's own
// ExecStartPre (squid -z) already reads the config.
func RenderUserData(s Settings, opts RenderOptions) ([]byte, error) {
	if opts.OwnAddressesFile == "" {
		opts.OwnAddressesFile = OwnAddressesPath
	}
	conf, err := RenderSquidConf(s, opts)
	if err != nil {
		return nil, err
	}
	backstop, err := RenderNftables(s)
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	var b bytes.Buffer
	b.WriteString("#cloud-config\n")
	b.WriteString("package_update: false\n")
	b.WriteString("package_upgrade: false\n")
	b.WriteString("write_files:\n")
	writeFile(&b, ConfPath, squidFile, conf)
	if s.Auth != nil {
		htpasswd, err := RenderHtpasswd(*s.Auth)
		if err != nil {
			return nil, err
		}
		writeFile(&b, opts.HtpasswdPath, squidFile, htpasswd)
	}
	if s.TLS != nil {
		writeFile(&b, opts.TLSCertPath, squidFile, []byte(s.TLS.CertificatePEM))
		writeFile(&b, opts.TLSKeyPath, squidFile, []byte(s.TLS.PrivateKeyPEM))
	}
	writeFile(&b, NftablesPath, squidFile, backstop)
	writeFile(&b, PrestartPath, squidFile, RenderPrestart(opts.OwnAddressesFile))
	writeFile(&b, SquidDropInPath, systemFile, squidDropIn)
	b.WriteString("runcmd:\n")
	fmt.Fprintf(&b, "  - [sh, %s, %s]\n", PrestartPath, PrestartOwnAddresses)
	b.WriteString("  - [systemctl, daemon-reload]\n")
	fmt.Fprintf(&b, "  - [sh, -c, '%s']\n", installIfMissing)
	b.WriteString("  - [systemctl, enable, squid]\n")
	b.WriteString("  - [systemctl, restart, squid]\n")
	if b.Len() > MaxUserDataBytes {
		return nil, fmt.Errorf("user-data is %d bytes, more than the %d a seed may hold: allow fewer destinations", b.Len(), MaxUserDataBytes)
	}
	return b.Bytes(), nil
}

// The prestart script's commands: list the VM's own addresses, load the backstop.
const (
	PrestartOwnAddresses = "own-addresses"
	PrestartBackstop     = "backstop"
)

// squidDropIn runs the prestart script before every start of Squid. Listing the own addresses may fail (the
// list of the last boot stays, "-"); loading the backstop may not: Squid does not run without it.
var squidDropIn = []byte(`# Written by terraform-provider-egress: before every start of Squid, list the VM's own addresses and load
# the backstop below Squid.
[Service]
ExecStartPre=-/bin/sh ` + PrestartPath + ` ` + PrestartOwnAddresses + `
ExecStartPre=/bin/sh ` + PrestartPath + ` ` + PrestartBackstop + `
`)

// RenderPrestart renders the script squid.service runs before every start of Squid on a cloud-init proxy VM:
// "own-addresses" lists the VM's addresses in ownFile, "backstop" loads the backstop with them. ownFile is
// validated to hold no space or quote (RenderOptions.validate).
func RenderPrestart(ownFile string) []byte {
	return fmt.Appendf(nil, `#!/bin/sh
# Written by terraform-provider-egress; run by squid.service before every start of Squid (%s).
set -u
%s
case "${1:-}" in
%s)
	ip -o addr show | while read -r _ _ _ a _; do echo "${a%%/*}"; done >'%s.new' &&
		chmod 644 '%s.new' && mv '%s.new' '%s'
	;;
%s)
	load_backstop
	;;
*)
	echo "usage: $0 %s|%s" >&2
	exit 2
	;;
esac
`, SquidDropInPath, BackstopLoader(NftablesPath, ownFile, ResolvConfPath), PrestartOwnAddresses, ownFile, ownFile, ownFile, ownFile,
		PrestartBackstop, PrestartOwnAddresses, PrestartBackstop)
}

// installIfMissing is a fixed shell line (no user value in it), single-quoted in YAML: it has no quote. It
// installs nftables, which loads the backstop, and then squid-openssl, as the proxy image has them: Squid's
// first start by its package already runs the drop-in that loads the backstop. Not Debian's default squid
// package: it is built with GnuTLS, whose Squid 5 TLS listener sends only the first certificate of
// certificate_pem and leaves out the intermediates a client needs to verify it.
const installIfMissing = "command -v nft >/dev/null && command -v squid >/dev/null || { apt-get update && { command -v nft >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y nftables; } && { command -v squid >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -o Dpkg::Options::=--force-confold squid-openssl; }; }"

// Owners and modes of the files written: Squid's readable by its group only (they may hold the password hash
// and the TLS key), the system's by everyone, as the distribution's own.
type fileMode struct{ owner, permissions string }

var (
	squidFile  = fileMode{"root:proxy", "0640"}
	systemFile = fileMode{"root:root", "0644"}
)

// writeFile adds one write_files entry. Base64 keeps every byte of the content out of YAML's reach, and the
// path is one of ours, validated to hold no space or quote, so quoting it is enough.
func writeFile(b *bytes.Buffer, path string, mode fileMode, content []byte) {
	fmt.Fprintf(b, "  - path: '%s'\n", path)
	fmt.Fprintf(b, "    owner: '%s'\n", mode.owner)
	fmt.Fprintf(b, "    permissions: '%s'\n", mode.permissions)
	b.WriteString("    encoding: b64\n")
	fmt.Fprintf(b, "    content: %s\n", base64.StdEncoding.EncodeToString(content))
}

var (
	instanceIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	hostnameRE   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// RenderMetaData renders NoCloud meta-data. cloud-init runs its per-instance modules again whenever
// instance-id changes, so it is the proxy's UID: a replaced proxy is configured from scratch, a rebooted one
// is left alone.
func RenderMetaData(uid, hostname string) ([]byte, error) {
	if !instanceIDRE.MatchString(uid) {
		return nil, fmt.Errorf("instance id %q must be 1 to 128 letters, digits, '.', '_' or '-'", uid)
	}
	if !hostnameRE.MatchString(hostname) {
		return nil, fmt.Errorf("hostname %q must be one DNS label: lowercase letters, digits and hyphens, at most 63", hostname)
	}
	return fmt.Appendf(nil, "instance-id: '%s'\nlocal-hostname: '%s'\n", uid, hostname), nil
}
