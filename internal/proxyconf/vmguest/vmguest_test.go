package vmguest

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestConfigIDNamesContent(t *testing.T) {
	t.Parallel()
	id := func(conf, pass, cert, key string) string {
		return ConfigID([]byte(conf), []byte(pass), []byte(cert), []byte(key), []byte("backstop"))
	}
	a := id("conf", "u:hash\n", "", "")
	withTLS := id("conf", "u:hash\n", "CERT", "KEY")
	for name, other := range map[string]string{
		"other conf":         id("conf2", "u:hash\n", "", ""),
		"other password":     id("conf", "u:hash2\n", "", ""),
		"bytes moved":        id("con", "fu:hash\n", "", ""),
		"with tls":           withTLS,
		"other certificate":  id("conf", "u:hash\n", "CERT2", "KEY"),
		"other key":          id("conf", "u:hash\n", "CERT", "KEY2"),
		"password into cert": id("conf", "u:has", "h\nCERT", "KEY"),
		"cert into key":      id("conf", "u:hash\n", "CER", "TKEY"),
		"other backstop":     ConfigID([]byte("conf"), []byte("u:hash\n"), nil, nil, []byte("backstop2")),
		"key into backstop":  ConfigID([]byte("conf"), []byte("u:hash\n"), []byte("CERT"), []byte("KE"), []byte("Ybackstop")),
	} {
		if other == a || (name != "with tls" && other == withTLS) {
			t.Errorf("%s: same id as another config", name)
		}
	}
	if id("conf", "u:hash\n", "", "") != a || len(a) != 16 || id("conf", "u:hash\n", "CERT", "KEY") != withTLS {
		t.Fatalf("id %q is not stable or not 16 hex digits", a)
	}
}

// The prestart script runs here as on a VM: "own-addresses" must list this machine's loopback addresses,
// one a line, and an unknown command fail.
func TestPrestartListsOwnAddresses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "own")
	script := filepath.Join(dir, "prestart")
	if err := os.WriteFile(script, RenderPrestart(file), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
	if out, err := exec.Command("sh", script, PrestartOwnAddresses).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	if !slices.Contains(lines, "127.0.0.1") {
		t.Errorf("own addresses %q lack 127.0.0.1", lines)
	}
	for _, l := range lines {
		if _, err := netip.ParseAddr(l); err != nil {
			t.Errorf("own addresses: %q is no address", l)
		}
	}
	if out, err := exec.Command("sh", script, "no-such-command").CombinedOutput(); err == nil {
		t.Errorf("an unknown command succeeded: %s", out)
	}
}

// The install line is fixed shell; a syntax error would only show on a booted VM.
func TestInstallIfMissingIsValidShell(t *testing.T) {
	t.Parallel()
	if out, err := exec.Command("sh", "-n", "-c", InstallIfMissing).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
}
