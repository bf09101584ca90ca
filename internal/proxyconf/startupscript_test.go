package proxyconf

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestRenderStartupScript(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		opts    StartupScriptOptions
		want    []string
		wantErr string
	}{
		"defaults": {opts: StartupScriptOptions{}, want: []string{
			"MD='http://metadata.google.internal/computeMetadata/v1'", "STATE='/var/lib/egress-proxy'", "sleep 10",
			"md " + MetadataConfigID, "md " + MetadataSquidConf, "md " + MetadataHtpasswd, "report " + GuestAttributeApplied, "squid -k parse",
			"md " + MetadataTLSCert, "md " + MetadataTLSKey, "'" + TLSCertPath + "'", "'" + TLSKeyPath + "'",
		}},
		"test metadata server": {opts: StartupScriptOptions{MetadataURL: "http://127.0.0.1:8080/computeMetadata/v1", StateDir: "/tmp/x", WatchInterval: 3},
			want: []string{"MD='http://127.0.0.1:8080/computeMetadata/v1'", "sleep 3"}},
		"quote in url":    {opts: StartupScriptOptions{MetadataURL: "http://x'; rm -rf /"}, wantErr: "must not contain"},
		"dollar in state": {opts: StartupScriptOptions{StateDir: "/var/$HOME"}, wantErr: "must not contain"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := RenderStartupScript(tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("script lacks %q", w)
				}
			}
			// The shell itself checks the syntax: a template slip would break every boot.
			path := filepath.Join(t.TempDir(), "startup.sh")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("sh", "-n", path).CombinedOutput(); err != nil {
				t.Fatalf("sh -n: %v\n%s", err, out)
			}
		})
	}
}

func TestConfigIDNamesContent(t *testing.T) {
	t.Parallel()
	id := func(conf, pass, cert, key string) string {
		return ConfigID([]byte(conf), []byte(pass), []byte(cert), []byte(key))
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
	} {
		if other == a || (name != "with tls" && other == withTLS) {
			t.Errorf("%s: same id as another config", name)
		}
	}
	if id("conf", "u:hash\n", "", "") != a || len(a) != 16 || id("conf", "u:hash\n", "CERT", "KEY") != withTLS {
		t.Fatalf("id %q is not stable or not 16 hex digits", a)
	}
}
