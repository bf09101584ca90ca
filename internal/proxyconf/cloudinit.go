package proxyconf

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"regexp"
)

// MaxMetadataValueBytes is GCE's limit on one metadata value, such as user-data.
const MaxMetadataValueBytes = 256 * 1024

// VMRenderOptions are the options of the squid.conf a cloud-init proxy VM runs, the one RenderUserData
// writes: the VM's own addresses are listed at boot in OwnAddressesPath. A reconfiguration renders with them
// too, so the running config and the seed's stay the same.
func VMRenderOptions() RenderOptions { return RenderOptions{OwnAddressesFile: OwnAddressesPath} }

// RenderUserData renders the cloud-init user-data of a proxy VM: install Squid, write its config, start it.
// Nothing else, so the VM's behaviour is the proxy's and no more.
//
// The files are written in cloud-init's first stage, before Squid is installed where the image lacks it. The
// "proxy" group owning them already exists then (Debian's and Ubuntu's base-passwd create it), and the install
// uses dpkg's --force-confold, which keeps the squid.conf already in place: Squid's first start after
// installation therefore uses this config, never the distribution's default one that proxies for every private
// network. The package index is only refreshed when Squid is missing, so an image that ships Squid boots
// without reaching any mirror (proxies often run where only the proxy itself may go out). The restart at the
// end applies the config on an image where Squid was already installed and running.
//
// Before Squid (re)starts, the VM lists its interfaces' addresses in OwnAddressesPath, which the destination
// guards read: no backend knows a DHCP address before boot.
func RenderUserData(s Settings, opts RenderOptions) ([]byte, error) {
	if opts.OwnAddressesFile == "" {
		opts.OwnAddressesFile = OwnAddressesPath
	}
	conf, err := RenderSquidConf(s, opts)
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	var b bytes.Buffer
	b.WriteString("#cloud-config\n")
	b.WriteString("package_update: false\n")
	b.WriteString("package_upgrade: false\n")
	b.WriteString("write_files:\n")
	writeFile(&b, ConfPath, conf)
	if s.Auth != nil {
		htpasswd, err := RenderHtpasswd(*s.Auth)
		if err != nil {
			return nil, err
		}
		writeFile(&b, opts.HtpasswdPath, htpasswd)
	}
	if s.TLS != nil {
		writeFile(&b, opts.TLSCertPath, []byte(s.TLS.CertificatePEM))
		writeFile(&b, opts.TLSKeyPath, []byte(s.TLS.PrivateKeyPEM))
	}
	b.WriteString("runcmd:\n")
	fmt.Fprintf(&b, "  - [sh, -c, '%s']\n", listOwnAddresses(opts.OwnAddressesFile))
	fmt.Fprintf(&b, "  - [sh, -c, '%s']\n", installSquidIfMissing)
	b.WriteString("  - [systemctl, enable, squid]\n")
	b.WriteString("  - [systemctl, restart, squid]\n")
	if b.Len() > MaxMetadataValueBytes {
		return nil, fmt.Errorf("user-data is %d bytes, more than the %d a metadata value may hold: allow fewer destinations", b.Len(), MaxMetadataValueBytes)
	}
	return b.Bytes(), nil
}

// listOwnAddresses writes the addresses of every interface (field 4 of "ip -o addr", less the prefix length)
// to file, replacing it whole. file is validated to hold no space or quote.
func listOwnAddresses(file string) string {
	return `ip -o addr show | while read -r _ _ _ a _; do echo "${a%/*}"; done >` + file + `.new && chmod 644 ` + file + `.new && mv ` + file + `.new ` + file
}

// installSquidIfMissing is a fixed shell line (no user value in it), single-quoted in YAML: it has no quote.
// It installs squid-openssl, as the proxy image does: Debian's default squid package is built with GnuTLS,
// whose Squid 5 TLS listener sends only the first certificate of certificate_pem and leaves out the
// intermediates a client needs to verify it.
const installSquidIfMissing = "command -v squid >/dev/null || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y -o Dpkg::Options::=--force-confold squid-openssl; }"

// writeFile adds one write_files entry. Base64 keeps every byte of the content out of YAML's reach, and the
// path is one of ours, validated to hold no space or quote, so quoting it is enough.
func writeFile(b *bytes.Buffer, path string, content []byte) {
	fmt.Fprintf(b, "  - path: '%s'\n", path)
	b.WriteString("    owner: 'root:proxy'\n")
	b.WriteString("    permissions: '0640'\n")
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
