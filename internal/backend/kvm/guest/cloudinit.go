// Package guest is the kvm backend's guest side: the NoCloud seed's user-data and meta-data, which cloud-init
// on the proxy VM runs once to install Squid, write its files and start it. The backend (internal/backend/kvm)
// writes them into the seed ISO; this package imports no backend.
package guest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"regexp"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

// MaxUserDataBytes bounds RenderUserData's result, which the seed ISO carries: well inside the 1 MiB the kvm
// backend reads of a seed volume when it compares it with new settings.
const MaxUserDataBytes = 512 * 1024

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
// Before every start of Squid, at every boot and not only the instance's first (cloud-init writes the files once,
// systemd runs the drop-in each time), the VM lists its interfaces' addresses in proxyconf.OwnAddressesPath, which
// the destination guards read (no backend knows a DHCP address before boot, and it may change across reboots), and
// loads the backstop below Squid (proxyconf.RenderNftables). Squid does not start without the backstop. The first
// boot lists the addresses once more before Squid is first started, since squid.service's own ExecStartPre
// (squid -z) already reads the config.
func RenderUserData(s proxyconf.Settings, opts proxyconf.RenderOptions) ([]byte, error) {
	return RenderUserDataWith(s, opts, nil)
}

// RenderUserDataWith is RenderUserData for a proxy whose access log is also forwarded to syslogTarget (nil:
// the journal only). A proxy with metrics also gets vmguest.MetricsFiles, and its last command starts them
// (vmguest.MetricsIfMissing); without metrics the user-data is the one rendered before metrics existed. The access log reaches the journal on every proxy (RenderAccessLog): rsyslog, which
// follows it, is restarted after Squid, and installed first where the image lacks it.
func RenderUserDataWith(s proxyconf.Settings, opts proxyconf.RenderOptions, syslogTarget *SyslogTarget) ([]byte, error) {
	return RenderUserDataFor(s, opts, syslogTarget, nil)
}

// RenderUserDataFor is RenderUserDataWith for one member of a proxy of several instances (vrrp not nil): the
// user-data also writes the member's VRRP files (VRRPFiles) and, last, starts keepalived with them. With a nil
// vrrp it is RenderUserDataWith's, byte for byte.
func RenderUserDataFor(s proxyconf.Settings, opts proxyconf.RenderOptions, syslogTarget *SyslogTarget, vrrp *VRRP) ([]byte, error) {
	var vrrpFiles []File
	if vrrp != nil {
		var err error
		if vrrpFiles, err = VRRPFiles(*vrrp); err != nil {
			return nil, err
		}
	}
	if opts.OwnAddressesFile == "" {
		opts.OwnAddressesFile = proxyconf.OwnAddressesPath
	}
	opts = vmguest.MetricsSquidOptions(s, opts)
	conf, err := proxyconf.RenderSquidConf(s, opts)
	if err != nil {
		return nil, err
	}
	backstop, err := proxyconf.RenderNftables(s)
	if err != nil {
		return nil, err
	}
	opts = opts.WithDefaults()
	var b bytes.Buffer
	b.WriteString("#cloud-config\n")
	b.WriteString("package_update: false\n")
	b.WriteString("package_upgrade: false\n")
	b.WriteString("write_files:\n")
	writeFile(&b, proxyconf.ConfPath, squidFile, conf)
	if len(s.Users) > 0 {
		htpasswd, err := proxyconf.RenderHtpasswd(s.Users)
		if err != nil {
			return nil, err
		}
		writeFile(&b, opts.HtpasswdPath, squidFile, htpasswd)
	}
	if s.TLS != nil {
		writeFile(&b, opts.TLSCertPath, squidFile, []byte(s.TLS.CertificatePEM))
		writeFile(&b, opts.TLSKeyPath, squidFile, []byte(s.TLS.PrivateKeyPEM))
		for _, f := range vmguest.ClientCAFiles(s, opts) {
			writeFile(&b, f.Path, squidFile, f.Content)
		}
	}
	writeFile(&b, proxyconf.NftablesPath, squidFile, backstop)
	writeFile(&b, vmguest.PrestartPath, squidFile, vmguest.RenderPrestart(opts.OwnAddressesFile))
	writeFile(&b, vmguest.SquidDropInPath, systemFile, squidDropIn)
	writeFile(&b, RsyslogConfPath, systemFile, RenderAccessLog(syslogTarget))
	writeFile(&b, RsyslogDropInPath, systemFile, rsyslogDropIn)
	for _, f := range vmguest.MetricsFiles(s, opts.ManagerPort) {
		writeFile(&b, f.Path, systemFile, f.Content)
	}
	for _, f := range vrrpFiles {
		writeFile(&b, f.Path, systemFile, f.Content)
	}
	b.WriteString("runcmd:\n")
	fmt.Fprintf(&b, "  - [sh, %s, %s]\n", vmguest.PrestartPath, vmguest.PrestartOwnAddresses)
	b.WriteString("  - [systemctl, daemon-reload]\n")
	fmt.Fprintf(&b, "  - [sh, -c, '%s']\n", vmguest.InstallIfMissing)
	// Squid's package also ships a SysV script, and systemctl enable would run Debian's update-rc.d (Perl) for
	// it: 11 of a first boot's 96 seconds under emulation, for rc.d links systemd never reads. Squid starts
	// first, and is enabled for later boots after.
	b.WriteString("  - [systemctl, restart, squid]\n")
	b.WriteString("  - [env, SYSTEMCTL_SKIP_SYSV=1, systemctl, enable, squid]\n")
	fmt.Fprintf(&b, "  - [sh, -c, '%s']\n", GuestAgentIfMissing)
	fmt.Fprintf(&b, "  - [sh, -c, '%s']\n", RsyslogIfMissing)
	if s.Metrics != nil {
		// Last: Squid, and the backstop with its metrics chain, are up by now.
		fmt.Fprintf(&b, "  - [sh, -c, '%s']\n", vmguest.MetricsIfMissing)
	}
	if vrrp != nil {
		// After Squid: the track script asks its health endpoint, and the address goes to a VM that serves.
		fmt.Fprintf(&b, "  - [sh, -c, '%s']\n", KeepalivedIfMissing)
	}
	if b.Len() > MaxUserDataBytes {
		return nil, fmt.Errorf("user-data is %d bytes, more than the %d a seed may hold: allow fewer destinations", b.Len(), MaxUserDataBytes)
	}
	return b.Bytes(), nil
}

// GuestAgentIfMissing installs and starts the QEMU guest agent on an image that lacks it, such as a plain
// Debian cloud image: the backend changes a running proxy's rules through the agent, and without it every rule
// change replaces the VM (a new address behind NAT). It runs after Squid's restart, so a slow or failed install
// never delays the proxy. Installing is not enough: Debian starts the agent when its virtio port appears, which
// happened at boot, before the package was there. A fixed line with no user value and no quote (single-quoted
// in YAML); on the project's image, which has the agent running, it only asks systemd to start what runs.
const GuestAgentIfMissing = "command -v qemu-ga >/dev/null || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y qemu-guest-agent; }; systemctl start qemu-guest-agent"

// squidDropIn runs the prestart script before every start of Squid. Listing the own addresses may fail (the
// list of the last boot stays, "-"); loading the backstop may not: Squid does not run without it.
var squidDropIn = []byte(`# Written by terraform-provider-egress: before every start of Squid, list the VM's own addresses and load
# the backstop below Squid.
[Service]
ExecStartPre=-/bin/sh ` + vmguest.PrestartPath + ` ` + vmguest.PrestartOwnAddresses + `
ExecStartPre=/bin/sh ` + vmguest.PrestartPath + ` ` + vmguest.PrestartBackstop + `
`)

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
