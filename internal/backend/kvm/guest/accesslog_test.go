package guest

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

func TestParseSyslogTarget(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		in      string
		want    SyslogTarget
		wantErr string
	}{
		"udp address":     {in: "udp://198.18.0.1:514", want: SyslogTarget{"udp", "198.18.0.1", 514}},
		"tcp name":        {in: "tcp://logs.example.test:6514", want: SyslogTarget{"tcp", "logs.example.test", 6514}},
		"ipv6":            {in: "udp://[2001:db8::1]:514", want: SyslogTarget{"udp", "2001:db8::1", 514}},
		"trailing slash":  {in: "tcp://logs.example.test:514/", want: SyslogTarget{"tcp", "logs.example.test", 514}},
		"other scheme":    {in: "http://logs.example.test:514", wantErr: `the scheme is "http"`},
		"no scheme":       {in: "logs.example.test:514", wantErr: "the scheme is"},
		"no port":         {in: "udp://logs.example.test", wantErr: "names no port"},
		"port zero":       {in: "udp://logs.example.test:0", wantErr: "not between 1 and 65535"},
		"port too large":  {in: "tcp://logs.example.test:65536", wantErr: "not between 1 and 65535"},
		"path":            {in: "tcp://logs.example.test:514/x", wantErr: "nothing after the port"},
		"query":           {in: "tcp://logs.example.test:514?a=b", wantErr: "nothing after the port"},
		"user":            {in: "tcp://u@logs.example.test:514", wantErr: "nothing after the port"},
		"quote in host":   {in: `tcp://a"b:514`, wantErr: "neither an IP address nor a DNS name"},
		"space in host":   {in: "tcp://a%20b:514", wantErr: "invalid URL escape"},
		"empty host":      {in: "udp://:514", wantErr: "neither an IP address nor a DNS name"},
		"unbracketed ip6": {in: "udp://2001:db8::1:514", wantErr: "goes in brackets"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseSyslogTarget(tc.in)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("ParseSyslogTarget(%q): %v", tc.in, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("ParseSyslogTarget(%q) = %+v, %v; want an error saying %q", tc.in, got, err, tc.wantErr)
			case tc.wantErr == "" && got != tc.want:
				t.Fatalf("ParseSyslogTarget(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

// TestRenderAccessLog: the journal always, the target only when there is one, each with the values given.
func TestRenderAccessLog(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		target    *SyslogTarget
		want, not []string
	}{
		"journal only": {want: []string{`action(type="omjournal")`, `tag="squid-access"`, `file="/var/log/squid/access.log"`}, not: []string{"omfwd"}},
		"udp": {target: &SyslogTarget{"udp", "198.18.0.1", 5514},
			want: []string{`action(type="omjournal")`, `action(type="omfwd" target="198.18.0.1" port="5514" protocol="udp"`}},
		"tcp": {target: &SyslogTarget{"tcp", "logs.example.test", 6514},
			want: []string{`action(type="omjournal")`, `target="logs.example.test" port="6514" protocol="tcp"`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := string(RenderAccessLog(tc.target))
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("lacks %s:\n%s", w, got)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("holds %s:\n%s", n, got)
				}
			}
		})
	}
}

// TestRenderUserDataWithSyslogTarget: the target's drop-in is the one the seed carries.
func TestRenderUserDataWithSyslogTarget(t *testing.T) {
	t.Parallel()
	target := &SyslogTarget{"tcp", "198.18.0.1", 6514}
	ud, err := RenderUserDataWith(proxyconf.Settings{Port: 3128, AllowedDestinations: []string{"x.example"}}, proxyconf.RenderOptions{}, target)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range testutil.ParseCloudConfig(t, ud).WriteFiles {
		if f.Path == RsyslogConfPath {
			if b, _ := base64.StdEncoding.DecodeString(f.Content); string(b) != string(RenderAccessLog(target)) {
				t.Errorf("the seed's drop-in is\n%s\nwant the target's", b)
			}
			return
		}
	}
	t.Errorf("user-data writes no %s", RsyslogConfPath)
}

// TestImageShipsTheJournalDropIn: the project's image carries the journal-only drop-in user-data writes, so its
// rsyslog runs (it refuses a configuration without any output) and follows the access log from the first boot,
// before cloud-init writes the proxy's own.
func TestImageShipsTheJournalDropIn(t *testing.T) {
	t.Parallel()
	shipped, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "scripts", "image", "rootfs", RsyslogConfPath))
	if err != nil {
		t.Fatal(err)
	}
	if want := RenderAccessLog(nil); string(shipped) != string(want) {
		t.Errorf("the image's %s is\n%s\nRenderAccessLog(nil) renders\n%s", RsyslogConfPath, shipped, want)
	}
}
