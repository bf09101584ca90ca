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
	a := ConfigID([]byte("conf"), []byte("u:hash\n"))
	for name, other := range map[string]string{
		"other conf":     ConfigID([]byte("conf2"), []byte("u:hash\n")),
		"other password": ConfigID([]byte("conf"), []byte("u:hash2\n")),
		"bytes moved":    ConfigID([]byte("con"), []byte("fu:hash\n")),
	} {
		if other == a {
			t.Errorf("%s: same id %s", name, a)
		}
	}
	if ConfigID([]byte("conf"), []byte("u:hash\n")) != a || len(a) != 16 {
		t.Fatalf("id %q is not stable or not 16 hex digits", a)
	}
}
