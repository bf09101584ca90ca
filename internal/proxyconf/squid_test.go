package proxyconf

import (
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

// The Squid the tests run is squidtest's; what is here renders the config it runs.

// testOptions points every file into dir and resolves names only through dir/hosts, which maps hosts to
// 127.0.0.1; the DNS server 127.0.0.1 does not exist, so no lookup leaves the machine. It lifts the loopback
// destination guard, and only that one.
func testOptions(t *testing.T, dir string, hosts []string) RenderOptions {
	t.Helper()
	return RenderOptions{
		ListenAddress:  netip.MustParseAddr("127.0.0.1"),
		HealthPort:     squidtest.FreePort(t),
		HtpasswdPath:   filepath.Join(dir, "passwd"),
		PidFile:        filepath.Join(dir, "squid.pid"),
		AccessLog:      "stdio:" + filepath.Join(dir, "access.log"),
		CacheLog:       filepath.Join(dir, "cache.log"),
		CoredumpDir:    dir,
		TLSCertPath:    filepath.Join(dir, "tls.crt"),
		TLSKeyPath:     filepath.Join(dir, "tls.key"),
		ClientCAPath:   filepath.Join(dir, "client-ca.crt"),
		ClientCRLPath:  filepath.Join(dir, "client-ca.crl"),
		HostsFile:      squidtest.HostsFile(t, dir, hosts),
		DNSNameservers: []netip.Addr{netip.MustParseAddr("127.0.0.1")},
		// The backends can only listen on loopback here; the guards are tested in a network namespace
		// (guards_test.go) without this exception.
	}.WithLoopbackDestinationsForTests()
}

// startSquid renders s into a fresh directory and runs Squid on it in the foreground, as root would on a VM.
func startSquid(t *testing.T, s Settings, hosts []string) *squidtest.Squid {
	t.Helper()
	dir := squidtest.Dir(t)
	return startSquidWith(t, s, testOptions(t, dir, hosts), dir)
}

// startSquidWith runs Squid on s rendered with opts, whose files are in dir, on a free port of 127.0.0.1.
func startSquidWith(t *testing.T, s Settings, opts RenderOptions, dir string) *squidtest.Squid {
	t.Helper()
	return startSquidUnder(t, nil, s, opts, dir)
}

// startSquidUnder is startSquidWith with Squid started by the command line wrapper, such as nice, which must
// exec Squid in its own process so that killing it kills Squid.
func startSquidUnder(t *testing.T, wrapper []string, s Settings, opts RenderOptions, dir string) *squidtest.Squid {
	t.Helper()
	bin := squidtest.Path(t)
	s.Port = squidtest.FreePort(t)
	conf, err := RenderSquidConf(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(dir, "squid.conf")
	squidtest.WriteSecretFile(t, confPath, conf)
	if len(s.Users) > 0 {
		htpasswd, err := RenderHtpasswd(s.Users)
		if err != nil {
			t.Fatal(err)
		}
		squidtest.WriteSecretFile(t, opts.HtpasswdPath, htpasswd)
	}
	if s.TLS != nil {
		squidtest.WriteSecretFile(t, opts.TLSCertPath, []byte(s.TLS.CertificatePEM))
		squidtest.WriteSecretFile(t, opts.TLSKeyPath, []byte(s.TLS.PrivateKeyPEM))
		if s.TLS.ClientCAPEM != "" {
			squidtest.WriteSecretFile(t, opts.ClientCAPath, []byte(s.TLS.ClientCAPEM))
		}
		if s.TLS.ClientCRLPEM != "" {
			squidtest.WriteSecretFile(t, opts.ClientCRLPath, []byte(s.TLS.ClientCRLPEM))
		}
	}
	args := append(slices.Clone(wrapper), bin, "-N", "-n", squidtest.ServiceName(t), "-f", confPath)
	cmd := exec.Command(args[0], args[1:]...) //nolint:gosec // the test's own Squid
	return squidtest.Start(t, cmd, fmt.Sprintf("127.0.0.1:%d", s.Port), fmt.Sprintf("127.0.0.1:%d", opts.HealthPort), dir)
}
