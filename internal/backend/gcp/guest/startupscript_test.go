package guest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
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
			"md " + MetadataTLSCert, "md " + MetadataTLSKey, "'" + proxyconf.TLSCertPath + "'", "'" + proxyconf.TLSKeyPath + "'",
			"OWN='" + proxyconf.OwnAddressesPath + "'", "ExecStartPre=-/bin/sh $STATE/startup.sh own-addresses",
			"md " + MetadataBackstop, "nft -c -f", "'" + proxyconf.NftablesPath + "'", "ExecStartPre=/bin/sh $STATE/startup.sh backstop",
			"load_backstop() {",
			// The shipper, in full, and the unit that runs it while the metadata names a log.
			"/instance/attributes/" + MetadataCloudLogging + "\"", strings.TrimRight(cloudLoggingShipper, "\n"), "'https://logging.googleapis.com'",
			"/etc/systemd/system/$unit", "DynamicUser=yes", "SupplementaryGroups=proxy", "InaccessiblePaths=/etc/squid", "locked_apply\n\t\tsync_cloud_logging",
		}},
		"test metadata server": {opts: StartupScriptOptions{MetadataURL: "http://127.0.0.1:8080/computeMetadata/v1", StateDir: "/tmp/x", WatchInterval: 3},
			want: []string{"MD='http://127.0.0.1:8080/computeMetadata/v1'", "sleep 3"}},
		"quote in url":     {opts: StartupScriptOptions{MetadataURL: "http://x'; rm -rf /"}, wantErr: "must not contain"},
		"dollar in state":  {opts: StartupScriptOptions{StateDir: "/var/$HOME"}, wantErr: "must not contain"},
		"space in own":     {opts: StartupScriptOptions{OwnAddressesFile: "/etc/squid/own addresses"}, wantErr: "must not contain"},
		"quote in logging": {opts: StartupScriptOptions{LoggingURL: "https://x'y"}, wantErr: "must not contain"},
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

// The user-data of a GCE proxy VM only runs the startup script: no file, no setting, no secret in it.
func TestRenderStartupUserData(t *testing.T) {
	t.Parallel()
	ud, err := RenderStartupUserData(StartupScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cc := testutil.ParseCloudConfig(t, ud)
	if len(cc.WriteFiles) != 0 || len(cc.Packages) != 0 || len(cc.Runcmd) != 1 {
		t.Fatalf("user-data writes %d files, installs %v and runs %v; want one command only", len(cc.WriteFiles), cc.Packages, cc.Runcmd)
	}
	cmd := cc.Runcmd[0]
	want := "http://metadata.google.internal/computeMetadata/v1/instance/attributes/" + MetadataStartupScript
	if len(cmd) != 3 || cmd[0] != "sh" || cmd[1] != "-c" || !strings.Contains(cmd[2], want) || !strings.Contains(cmd[2], "Metadata-Flavor: Google") {
		t.Fatalf("runcmd %q does not run the startup script from %s", cmd, want)
	}
	if out, err := exec.Command("sh", "-n", "-c", cmd[2]).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
	if _, err := RenderStartupUserData(StartupScriptOptions{MetadataURL: "http://x'; rm -rf /"}); err == nil {
		t.Fatal("a quote in the metadata URL was accepted")
	}
}

// The script's own-addresses mode, which squid.conf's own_addresses ACL reads, run as at two boots with a fake
// `ip` and a metadata server: it lists the interfaces' addresses and the external addresses the metadata
// server names, keeps nothing that is not an address, and replaces the list whole when the addresses changed.
func TestStartupScriptListsOwnAddresses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const external = "203.0.113.7"
	var served atomic.Pointer[string] // what the metadata server names as the first interface's external address
	first := external
	served.Store(&first)
	md := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Metadata-Flavor") != "Google" {
			http.Error(w, "no flavor", http.StatusForbidden)
			return
		}
		switch strings.TrimPrefix(r.URL.Path, "/computeMetadata/v1/instance/network-interfaces/") {
		case "":
			_, _ = io.WriteString(w, "0/\n1/\n")
		case "0/access-configs/", "1/access-configs/":
			_, _ = io.WriteString(w, "0/\n")
		case "0/access-configs/0/external-ip":
			_, _ = io.WriteString(w, *served.Load())
		case "1/access-configs/0/external-ip":
			_, _ = io.WriteString(w, "not an address; rm -rf /") // never reaches the list
		default:
			http.NotFound(w, r)
		}
	}))
	defer md.Close()
	own := filepath.Join(dir, "own-addresses")
	script, err := RenderStartupScript(StartupScriptOptions{MetadataURL: md.URL + "/computeMetadata/v1", StateDir: filepath.Join(dir, "state"), OwnAddressesFile: own})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "startup.sh")
	bin := filepath.Join(dir, "bin")
	addrs := filepath.Join(dir, "ip-output")
	for name, content := range map[string]string{path: string(script), filepath.Join(bin, "ip"): "#!/bin/sh\ncat '" + addrs + "'\n"} {
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, squidErr := exec.LookPath("squid")
	second := []string{"10.128.0.9", "127.0.0.1", external, "fe80::4001:aff:fe80:9"}
	for boot, tc := range []struct {
		ip, external string
		want         []string
		needsSquid   bool
	}{
		{ip: "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n2: ens4    inet 10.128.0.5/32 metric 100 scope global dynamic ens4\n",
			want: []string{"10.128.0.5", "127.0.0.1", external}},
		{ip: "1: lo    inet 127.0.0.1/8 scope host lo\n2: ens4    inet 10.128.0.9/32 scope global ens4\n2: ens4    inet6 fe80::4001:aff:fe80:9/64 scope link\n",
			want: second},
		// Address characters that are no address: Squid would refuse the list and stop, so the last one stays.
		{ip: "1: lo    inet 127.0.0.1/8 scope host lo\n", external: "1.2.3.4.5", want: second, needsSquid: true},
	} {
		if tc.needsSquid && squidErr != nil {
			continue
		}
		if tc.external != "" {
			served.Store(&tc.external)
		}
		if err := os.WriteFile(addrs, []byte(tc.ip), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", path, "own-addresses")
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("boot %d: %v\n%s", boot+1, err, out)
		}
		b, err := os.ReadFile(own)
		if err != nil {
			t.Fatalf("boot %d: %v", boot+1, err)
		}
		if got := strings.Fields(string(b)); !slices.Equal(got, tc.want) {
			t.Errorf("boot %d: own addresses %q, want %q", boot+1, got, tc.want)
		}
	}
}

// The metrics programs never listen without the backstop's rule for their ranges: in apply, they stop (and
// lose their files) before the new backstop is installed and loaded by Squid's restart, and start only once
// Squid runs the new config. The real run is TestGuestShipsAccessLogToCloudLogging's (internal/backend/gcp).
func TestStartupScriptMetricsOrder(t *testing.T) {
	t.Parallel()
	b, err := RenderStartupScript(StartupScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	i := strings.Index(script, "\napply() {")
	if i < 0 {
		t.Fatal("no apply function")
	}
	apply := script[i : i+strings.Index(script[i:], "\n}\n")]
	at := func(s string, from int) int {
		j := strings.Index(apply[from:], s)
		if j < 0 {
			t.Fatalf("apply has no %q after offset %d", s, from)
		}
		return from + j
	}
	stop := at("\tstop_metrics \"$tmp\"", 0)
	backstop := at("install -m 0640 -o root -g proxy \"$tmp/backstop.nft\" '"+proxyconf.NftablesPath+"'", stop)
	restart := at("systemctl restart squid", backstop)
	listening := at("\tlistening ||", restart)
	at("\tstart_metrics \"$tmp\"", listening)
	// The installed backstop before stop_metrics is only the first install's (Squid not there yet).
	if first := strings.Index(apply, "\"$tmp/backstop.nft\" '"+proxyconf.NftablesPath+"'"); first < stop &&
		!strings.Contains(apply[:stop], "if ! command -v squid >/dev/null || ! command -v nft >/dev/null; then") {
		t.Errorf("apply installs the backstop before stopping the metrics programs")
	}
	for _, unit := range []string{"mtail.service", "prometheus-squid-exporter.service"} {
		if !strings.Contains(script, unit) {
			t.Errorf("the script never names %s", unit)
		}
	}
}
