package kvm

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/iso9660"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

// What Reconfigure records once the guest runs the new settings: the seed ISO (its user-data and identity)
// and the domain's metadata, from which Get reports the settings.

// record rewrites the seed and the metadata, unless both already describe the settings (a repeated call).
// The seed comes first: the metadata is what Get reports, so it changes only once everything else has.
func (r *reconfiguration) record(l api, dom libvirt.Domain, m metadata) error {
	want := metaProxyOf(r.settings)
	seed := volRef(m.Placement.Pool, m.Volumes.Seed)
	if !r.guestChanged && r.seedRecorded && sameMetaProxy(m.Proxy, want) {
		return nil
	}
	m.Proxy = want
	spec := backend.Spec{Name: m.Name, UID: m.UID, Proxy: r.settings}
	img, err := seedImage(spec, m, r.b.now())
	if err != nil {
		return backend.NewError(backend.ClassPermanent, "", err)
	}
	if err := rewriteSeed(l, seed, img); err != nil {
		return fmt.Errorf("rewriting the seed volume %s: %w", m.Volumes.Seed, err)
	}
	return writeMetadata(l, dom, m)
}

// rewriteSeed replaces the seed volume's content in place: the domain keeps the same volume attached, and a
// crash at any point leaves a volume there. An upload past the volume's end grows it (a dir pool's file
// grows and libvirt reports the new capacity); a shorter image is padded with zeros to the old size, so no
// stale tail of the old user-data (its password hash, for one) stays on the volume. libvirt 9.0 may
// acknowledge the upload a moment before its I/O helper wrote the last of it (the Reconfigure cut table saw
// a read at once find the old image): a retried attempt that reads it then only reloads Squid once more.
func rewriteSeed(l api, vol libvirt.StorageVol, img []byte) error {
	s, err := l.StorageVolGetXMLDesc(vol, 0)
	if err != nil {
		return err
	}
	var v libvirtxml.StorageVolume
	if err := v.Unmarshal(s); err != nil {
		return fmt.Errorf("reading seed volume %s: %w", vol.Name, err)
	}
	if v.Capacity != nil && v.Capacity.Value > uint64(len(img)) && v.Capacity.Value <= seedReadLimit {
		img = append(img, make([]byte, int(v.Capacity.Value)-len(img))...)
	}
	return l.StorageVolUpload(vol, bytes.NewReader(img), 0, uint64(len(img)), 0)
}

// seedCurrent reports whether the seed's user-data already carries conf and, when there are users, a password
// file that accepts exactly them.
func seedCurrent(l api, vol libvirt.StorageVol, conf []byte, users []proxyconf.BasicAuth, caFiles []vmguest.File) (bool, error) {
	var buf bytes.Buffer
	if err := l.StorageVolDownload(vol, &buf, 0, seedReadLimit, 0); err != nil {
		return false, err
	}
	ud, err := iso9660.ReadFile(buf.Bytes(), "user-data")
	if err != nil {
		return false, nil //nolint:nilerr // unreadable: it is rewritten
	}
	files := userDataFiles(ud)
	if !bytes.Equal(files[proxyconf.ConfPath], conf) {
		return false, nil
	}
	for _, f := range caFiles {
		if !bytes.Equal(files[f.Path], f.Content) {
			return false, nil
		}
	}
	pw, ok := files[proxyconf.HtpasswdPath]
	if len(users) == 0 {
		return !ok, nil
	}
	return ok && proxyconf.HtpasswdMatches(pw, users), nil
}

// userDataFiles reads back the write_files of user-data rendered by guest.RenderUserData: each entry's
// "- path: '...'" line, then its base64 "content: " line.
func userDataFiles(ud []byte) map[string][]byte {
	out := map[string][]byte{}
	path := ""
	for _, line := range strings.Split(string(ud), "\n") {
		t := strings.TrimSpace(line)
		if p, ok := strings.CutPrefix(t, "- path: "); ok {
			path = strings.Trim(p, "'")
			continue
		}
		if c, ok := strings.CutPrefix(t, "content: "); ok && path != "" {
			if b, err := base64.StdEncoding.DecodeString(c); err == nil {
				out[path] = b
			}
			path = ""
		}
	}
	return out
}

// metaProxyOf is the metadata form of settings, without the password.
func metaProxyOf(s proxyconf.Settings) metaProxy {
	p := metaProxy{Port: s.Port, Users: proxyconf.Usernames(s.Users), Clients: s.AllowedClientCIDRs,
		Destinations: s.AllowedDestinations, Ports: s.AllowedPorts, Denied: s.DeniedDestinations, LogFormat: string(s.LogFormat),
		Metrics: metaMetricsOf(s.Metrics)}
	for _, rs := range s.RuleSets {
		p.RuleSets = append(p.RuleSets, metaRuleSet{Name: rs.Name, Mode: string(rs.Mode), Clients: rs.Clients.SourceCIDRs,
			Users: rs.Clients.Users, Subjects: rs.Clients.CertificateSubjects, Destinations: rs.Destinations, Ports: rs.Ports})
	}
	if s.TLS != nil {
		p.ClientCA, p.ClientCRL = sha256Hex(s.TLS.ClientCAPEM), sha256Hex(s.TLS.ClientCRLPEM)
	}
	return p
}

// sha256Hex is the SHA-256 of s in hex, or "" for an empty s.
func sha256Hex(s string) string {
	if s == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// ruleSets are the recorded rule sets as settings (nil for none).
func (p metaProxy) ruleSets() []proxyconf.RuleSet {
	var out []proxyconf.RuleSet
	for _, rs := range p.RuleSets {
		out = append(out, proxyconf.RuleSet{Name: rs.Name, Mode: proxyconf.RuleSetMode(rs.Mode), Destinations: rs.Destinations, Ports: rs.Ports,
			Clients: proxyconf.RuleSetClients{SourceCIDRs: rs.Clients, Users: rs.Users, CertificateSubjects: rs.Subjects}})
	}
	return out
}

// users are the proxy's user names, in either form: a domain made by a version before several users has its
// one user in AuthUser.
func (p metaProxy) users() []string {
	if len(p.Users) == 0 && p.AuthUser != "" {
		return []string{p.AuthUser}
	}
	return p.Users
}

func sameMetaProxy(a, b metaProxy) bool {
	return a.Port == b.Port && slices.Equal(a.users(), b.users()) && slices.Equal(a.Clients, b.Clients) &&
		slices.Equal(a.Denied, b.Denied) && slices.EqualFunc(a.RuleSets, b.RuleSets, sameMetaRuleSet) &&
		a.ClientCA == b.ClientCA && a.ClientCRL == b.ClientCRL && sameMetaMetrics(a.Metrics, b.Metrics) &&
		slices.Equal(a.Destinations, b.Destinations) && slices.Equal(a.Ports, b.Ports)
}

func sameMetaRuleSet(a, b metaRuleSet) bool {
	return a.Name == b.Name && a.Mode == b.Mode && slices.Equal(a.Clients, b.Clients) && slices.Equal(a.Users, b.Users) &&
		slices.Equal(a.Subjects, b.Subjects) && slices.Equal(a.Destinations, b.Destinations) && slices.Equal(a.Ports, b.Ports)
}
