// Package vmguest is what the guests of the VM backends share beside the policy (proxyconf): the options of
// the squid.conf a proxy VM runs, the script squid.service runs before every start of Squid (the VM's own
// addresses, the backstop) and its drop-in's path, the line that installs Squid and nftables where the image
// lacks them, and the id that names the files a guest applies. Each VM backend's guest package
// (internal/backend/<kind>/guest) builds its own delivery on them; this package imports no backend, and the
// backend contract does not import it.
package vmguest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// RenderOptions are the options of the squid.conf a proxy VM runs: the VM's own addresses are listed at boot
// in proxyconf.OwnAddressesPath. A reconfiguration renders with them too, so the running config and the one
// the VM booted with stay the same.
func RenderOptions() proxyconf.RenderOptions {
	return proxyconf.RenderOptions{OwnAddressesFile: proxyconf.OwnAddressesPath}
}

// Files of a proxy VM besides Squid's own: the script that runs before every start of Squid, and
// the drop-in of squid.service that runs it.
const (
	PrestartPath    = "/etc/squid/egress-prestart"
	SquidDropInPath = "/etc/systemd/system/squid.service.d/egress.conf"
)

// The prestart script's commands: list the VM's own addresses, load the backstop.
const (
	PrestartOwnAddresses = "own-addresses"
	PrestartBackstop     = "backstop"
)

// RenderPrestart renders the script squid.service runs before every start of Squid on a proxy VM:
// "own-addresses" lists the VM's addresses in ownFile, "backstop" loads the backstop with them. ownFile is
// validated to hold no space or quote (proxyconf.RenderSquidConf checks the options).
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
`, SquidDropInPath, proxyconf.BackstopLoader(proxyconf.NftablesPath, ownFile, proxyconf.ResolvConfPath), PrestartOwnAddresses, ownFile, ownFile, ownFile, ownFile,
		PrestartBackstop, PrestartOwnAddresses, PrestartBackstop)
}

// InstallIfMissing is a fixed shell line (no user value in it), single-quoted in YAML: it has no quote. It
// installs nftables, which loads the backstop, and then squid-openssl, as the proxy image has them: Squid's
// first start by its package already runs the drop-in that loads the backstop. Not Debian's default squid
// package: it is built with GnuTLS, whose Squid 5 TLS listener sends only the first certificate of
// certificate_pem and leaves out the intermediates a client needs to verify it.
const InstallIfMissing = "command -v nft >/dev/null && command -v squid >/dev/null || { apt-get update && { command -v nft >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y nftables; } && { command -v squid >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -o Dpkg::Options::=--force-confold squid-openssl; }; }"

// ConfigID names the files the guest applies (squid.conf, htpasswd, the backstop ruleset and, with TLS, the
// certificate chain and key): 16 hex digits of their SHA-256, so a new certificate is a new config the guest
// applies, and so is a new backstop (allowed_private_cidrs changed while no destination is allowed leaves
// squid.conf as it was).
func ConfigID(squidConf, htpasswd, tlsCert, tlsKey, backstop []byte) string {
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
	if len(backstop) > 0 {
		_, _ = fmt.Fprintf(h, "\nbackstop %d %d %d\n", len(htpasswd), len(tlsCert)+len(tlsKey), len(backstop))
		h.Write(backstop)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// File is one file a guest is given, by its path there.
type File struct {
	Path    string
	Content []byte
}

// ClientCAFiles are the client CA and its CRL at the paths opts names (proxyconf.RenderOptions.ClientCAPath,
// ClientCRLPath), each only when set: not secrets, written beside the TLS certificate.
func ClientCAFiles(s proxyconf.Settings, opts proxyconf.RenderOptions) []File {
	if s.TLS == nil {
		return nil
	}
	opts = opts.WithDefaults()
	var out []File
	if s.TLS.ClientCAPEM != "" {
		out = append(out, File{Path: opts.ClientCAPath, Content: []byte(s.TLS.ClientCAPEM)})
	}
	if s.TLS.ClientCRLPEM != "" {
		out = append(out, File{Path: opts.ClientCRLPath, Content: []byte(s.TLS.ClientCRLPEM)})
	}
	return out
}

// WithClientCA is a config id (ConfigID) that also names the client CA and CRL a guest installs: id itself
// without them, so that a proxy without a client CA keeps the id it had before the CA existed, and a new
// id for any CA or CRL, so that a change of either alone is a new config the guest applies.
func WithClientCA(id string, caPEM, crlPEM string) string {
	if caPEM == "" && crlPEM == "" {
		return id
	}
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "%s\nclient-ca %d %d\n", id, len(caPEM), len(crlPEM)) // a hash never fails to write
	h.Write([]byte(caPEM))
	h.Write([]byte(crlPEM))
	return hex.EncodeToString(h.Sum(nil)[:8])
}
