package guest

import (
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
	"gopkg.in/yaml.v3"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/proxyconftest"
)

// FuzzRenderUserData feeds the inputs of proxyconf's FuzzRenderSquidConf through the seed's renderers. Whatever
// the validators accept must come out as user-data that parses to the expected files (squid.conf as
// proxyconf renders it, the TLS files only with TLS, a one-line htpasswd of user and bcrypt hash) and never
// holds the password in clear, and with such settings as meta-data with exactly its two keys.
func FuzzRenderUserData(f *testing.F) {
	for _, seed := range proxyconftest.FuzzSeeds {
		i := seed.In
		f.Add(i.D1, i.D2, i.CIDR, i.Port, i.AllowedPort, i.User, i.Pass, i.N, i.UID, i.Host, i.PrivateCIDR, i.MaxConn, i.TLSMode, i.CertPEM, i.KeyPEM)
	}
	f.Fuzz(func(t *testing.T, d1, d2, cidr string, port, allowedPort int, user, pass string, n uint8, uid, host string,
		privateCIDR string, maxConn int, tlsMode uint8, certPEM, keyPEM string) {
		s := proxyconftest.FuzzSettings(d1, d2, cidr, port, allowedPort, user, pass, n, privateCIDR, maxConn, tlsMode, certPEM, keyPEM)
		opts := proxyconf.RenderOptions{OwnAddressesFile: proxyconf.OwnAddressesPath}
		ud, err := RenderUserData(s, opts)
		if s.Validate() != nil {
			if err == nil {
				t.Fatal("rendered settings that fail validation")
			}
			return
		}
		if err != nil {
			t.Fatalf("user-data: %v", err)
		}
		checkUserData(t, s, opts, ud)

		if md, err := RenderMetaData(uid, host); err == nil {
			var m map[string]string
			if err := yaml.Unmarshal(md, &m); err != nil || len(m) != 2 || m["instance-id"] != uid || m["local-hostname"] != host {
				t.Fatalf("meta-data %q reads back as %v (%v)", md, m, err)
			}
		}
	})
}

// checkUserData fails unless ud, rendered from the valid settings s with opts, carries s's files.
func checkUserData(t *testing.T, s proxyconf.Settings, opts proxyconf.RenderOptions, ud []byte) {
	t.Helper()
	conf, err := proxyconf.RenderSquidConf(s, opts)
	if err != nil {
		t.Fatalf("valid settings did not render: %v", err)
	}
	_, files := parseUserData(t, ud)
	if string(files[proxyconf.ConfPath]) != string(conf) {
		t.Fatal("user-data carries another squid.conf")
	}
	if s.TLS != nil && (string(files[proxyconf.TLSCertPath]) != s.TLS.CertificatePEM || string(files[proxyconf.TLSKeyPath]) != s.TLS.PrivateKeyPEM) {
		t.Fatal("user-data carries another TLS certificate or key")
	}
	if s.TLS == nil && (files[proxyconf.TLSCertPath] != nil || files[proxyconf.TLSKeyPath] != nil) {
		t.Fatal("user-data carries TLS files without TLS")
	}
	if len(s.Users) > 0 {
		a := s.Users[0] // the fuzz input's one user
		if strings.Contains(string(ud), a.Password) && !strings.Contains(string(conf), a.Password) {
			t.Fatal("user-data holds the password in clear")
		}
		htpasswd := string(files[proxyconf.HtpasswdPath])
		line, ok := strings.CutSuffix(htpasswd, "\n")
		u, hash, _ := strings.Cut(line, ":")
		if !ok || strings.Contains(line, "\n") || u != a.Username || bcrypt.CompareHashAndPassword([]byte(hash), []byte(a.Password)) != nil {
			t.Fatalf("htpasswd %q is not one line of the user and the password's hash", htpasswd)
		}
	}
}
