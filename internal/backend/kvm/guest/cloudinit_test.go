package guest

import (
	"encoding/base64"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/proxyconftest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// parseUserData reads user-data as cloud-init does and returns it with the decoded files by path.
func parseUserData(t *testing.T, ud []byte) (testutil.CloudConfig, map[string][]byte) {
	t.Helper()
	cc := testutil.ParseCloudConfig(t, ud)
	files := map[string][]byte{}
	for _, f := range cc.WriteFiles {
		// Squid's files are its group's alone (they may hold the password hash and the TLS key); the drop-in
		// of squid.service is the system's, as the distribution's units are.
		want := [2]string{"root:proxy", "0640"}
		if f.Path == vmguest.SquidDropInPath || f.Path == RsyslogConfPath || f.Path == RsyslogDropInPath ||
			slices.Contains(vmguest.MetricsPaths, f.Path) {
			want = [2]string{"root:root", "0644"}
		}
		if f.Owner != want[0] || f.Permissions != want[1] || f.Encoding != "b64" {
			t.Errorf("%s: owner %q mode %q encoding %q, want %s %s b64", f.Path, f.Owner, f.Permissions, f.Encoding, want[0], want[1])
		}
		b, err := base64.StdEncoding.DecodeString(f.Content)
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		files[f.Path] = b
	}
	return cc, files
}

func TestRenderUserData(t *testing.T) {
	t.Parallel()
	auth := []proxyconf.BasicAuth{{Username: "egress", Password: "a long password"}, {Username: "second", Password: "another long password"}}
	tlsCert, tlsKey := proxyconftest.TLSPair()
	clientCA := testutil.NewClientCA(t, "egress test client CA")
	tests := map[string]struct {
		s         proxyconf.Settings
		wantFiles []string
	}{
		"without auth":                {s: proxyconf.Settings{Port: 3128, AllowedDestinations: []string{".example.com"}}, wantFiles: []string{proxyconf.ConfPath}},
		"with auth":                   {s: proxyconf.Settings{Port: 3128, Users: auth, AllowedClientCIDRs: []string{"10.0.0.0/8"}}, wantFiles: []string{proxyconf.HtpasswdPath, proxyconf.ConfPath}},
		"with tls":                    {s: proxyconf.Settings{Port: 3128, TLS: &proxyconf.TLSSettings{CertificatePEM: tlsCert, PrivateKeyPEM: tlsKey}}, wantFiles: []string{proxyconf.TLSCertPath, proxyconf.TLSKeyPath, proxyconf.ConfPath}},
		"with allowed private ranges": {s: proxyconf.Settings{Port: 3128, AllowedDestinations: []string{"mirror.internal"}, AllowedPrivateCIDRs: []string{"10.1.0.0/16"}}, wantFiles: []string{proxyconf.ConfPath}},
		// Issue 39's policy: rule sets by range and by user, one reported, and a deny list; squid -k parse
		// below takes the config as the guest's Squid would.
		"with a policy": {s: proxyconf.Settings{Port: 3128, Users: auth, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"x.example"},
			DeniedDestinations: []string{"denied.example", ".denied.example"},
			RuleSets: []proxyconf.RuleSet{
				{Name: "builds", Clients: proxyconf.RuleSetClients{SourceCIDRs: []string{"10.1.0.0/16"}}, Destinations: []string{".pkg.example"}, Ports: []int{443, 8443}},
				{Name: "second-rollout", Clients: proxyconf.RuleSetClients{Users: []string{"second"}}, Destinations: []string{"y.example"}, Mode: proxyconf.RuleSetReport},
			}}, wantFiles: []string{proxyconf.HtpasswdPath, proxyconf.ConfPath}},
		"with a client CA": {s: proxyconf.Settings{Port: 3128, AllowedDestinations: []string{"x.example"},
			TLS:      &proxyconf.TLSSettings{CertificatePEM: tlsCert, PrivateKeyPEM: tlsKey, ClientCAPEM: clientCA.PEM, ClientCRLPEM: clientCA.CRL(t, 1)},
			RuleSets: []proxyconf.RuleSet{{Name: "payments", Clients: proxyconf.RuleSetClients{CertificateSubjects: []string{"payments"}}, Destinations: []string{"y.example"}}}},
			wantFiles: []string{proxyconf.TLSCertPath, proxyconf.TLSKeyPath, proxyconf.ClientCAPath, proxyconf.ClientCRLPath, proxyconf.ConfPath}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ud, err := RenderUserData(tc.s, proxyconf.RenderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cc, files := parseUserData(t, ud)
			// Nothing may need a package mirror when the image already has Squid.
			if cc.PackageUpdate || cc.PackageUpgrade || len(cc.Packages) != 0 {
				t.Errorf("packages: update %v upgrade %v %q, want no package module at all", cc.PackageUpdate, cc.PackageUpgrade, cc.Packages)
			}
			// The own addresses are listed before Squid's first start (squid -z reads the config); the drop-in,
			// read once systemd reloads, lists them and loads the backstop before every later start.
			want := [][]string{{"sh", vmguest.PrestartPath, vmguest.PrestartOwnAddresses}, {"systemctl", "daemon-reload"}, {"sh", "-c", vmguest.InstallIfMissing}, {"systemctl", "restart", "squid"}, {"env", "SYSTEMCTL_SKIP_SYSV=1", "systemctl", "enable", "squid"}, {"sh", "-c", GuestAgentIfMissing}, {"sh", "-c", RsyslogIfMissing}}
			if !slices.EqualFunc(cc.Runcmd, want, slices.Equal) {
				t.Errorf("runcmd %q, want %q", cc.Runcmd, want)
			}
			var paths []string
			for p := range files {
				paths = append(paths, p)
			}
			slices.Sort(paths)
			wantFiles := slices.Sorted(slices.Values(append([]string{proxyconf.NftablesPath, vmguest.PrestartPath, vmguest.SquidDropInPath, RsyslogConfPath, RsyslogDropInPath}, tc.wantFiles...)))
			if !slices.Equal(paths, wantFiles) {
				t.Errorf("files %q, want %q", paths, wantFiles)
			}
			if backstop, _ := proxyconf.RenderNftables(tc.s); string(files[proxyconf.NftablesPath]) != string(backstop) {
				t.Errorf("the backstop in user-data differs from RenderNftables")
			}
			if string(files[RsyslogConfPath]) != string(RenderAccessLog(nil)) {
				t.Errorf("the access log drop-in in user-data is not the journal-only one:\n%s", files[RsyslogConfPath])
			}
			if string(files[vmguest.PrestartPath]) != string(vmguest.RenderPrestart(proxyconf.OwnAddressesPath)) {
				t.Errorf("the prestart script in user-data differs from RenderPrestart")
			}
			for _, line := range []string{
				"ExecStartPre=-/bin/sh " + vmguest.PrestartPath + " " + vmguest.PrestartOwnAddresses,
				"ExecStartPre=/bin/sh " + vmguest.PrestartPath + " " + vmguest.PrestartBackstop,
			} {
				if !slices.Contains(strings.Split(string(files[vmguest.SquidDropInPath]), "\n"), line) {
					t.Errorf("squid.service's drop-in lacks %q:\n%s", line, files[vmguest.SquidDropInPath])
				}
			}
			conf, _ := proxyconf.RenderSquidConf(tc.s, proxyconf.RenderOptions{OwnAddressesFile: proxyconf.OwnAddressesPath})
			if len(tc.s.AllowedDestinations) > 0 && !strings.Contains(string(conf), `acl own_addresses dst "`+proxyconf.OwnAddressesPath+`"`) {
				t.Errorf("squid.conf does not read the VM's own addresses")
			}
			if string(files[proxyconf.ConfPath]) != string(conf) {
				t.Errorf("squid.conf in user-data differs from RenderSquidConf")
			}
			// Squid loads the certificate while parsing, and it is not at its VM path here; TestTLSListener runs
			// Squid on a TLS config.
			if out, err := squidtest.Parse(t, files[proxyconf.ConfPath]); tc.s.TLS == nil && err != nil {
				t.Errorf("squid -k parse: %v\n%s", err, out)
			}
			if tls := tc.s.TLS; tls != nil && tls.ClientCAPEM != "" &&
				(string(files[proxyconf.ClientCAPath]) != tls.ClientCAPEM || string(files[proxyconf.ClientCRLPath]) != tls.ClientCRLPEM) {
				t.Errorf("user-data carries another client CA or CRL than the settings'")
			}
			if len(tc.s.Users) > 0 {
				if !proxyconf.HtpasswdMatches(files[proxyconf.HtpasswdPath], tc.s.Users) {
					t.Errorf("htpasswd %q does not hold each user's bcrypt hash", files[proxyconf.HtpasswdPath])
				}
				for _, u := range tc.s.Users {
					if strings.Contains(string(ud), u.Password) {
						t.Errorf("user-data holds %s's password in clear", u.Username)
					}
				}
			}
		})
	}
}

// TestLargestSettingsFit renders the largest settings validation allows: the seed's user-data fits its bound,
// and carries the key whole. proxyconf's TestLargestSettingsFit checks the files themselves at the same
// settings.
// The largest policy (rule sets, the deny list, users and a client CA at their limits) fits as well, and the
// seed carries the CA whole.
func TestLargestSettingsFit(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]proxyconf.Settings{"largest lists": proxyconftest.LargestSettings(t), "largest policy": proxyconftest.LargestPolicySettings(t)} {
		ud, err := RenderUserData(s, proxyconf.RenderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: user-data %d bytes of %d", name, len(ud), MaxUserDataBytes)
		if len(ud) > MaxUserDataBytes {
			t.Errorf("%s: user-data is %d bytes, over its %d limit", name, len(ud), MaxUserDataBytes)
		}
		_, files := parseUserData(t, ud)
		if string(files[proxyconf.TLSKeyPath]) != s.TLS.PrivateKeyPEM || string(files[proxyconf.ClientCAPath]) != s.TLS.ClientCAPEM {
			t.Errorf("%s: user-data carries another key or client CA", name)
		}
	}
}

func TestRenderMetaData(t *testing.T) {
	t.Parallel()
	got, err := RenderMetaData("0b7e7d4c-5b2d-4c47-9d3b-6d1f2a8e9c01", "egress-0b7e7d4c")
	if err != nil {
		t.Fatal(err)
	}
	var md map[string]string
	if err := yaml.Unmarshal(got, &md); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"instance-id": "0b7e7d4c-5b2d-4c47-9d3b-6d1f2a8e9c01", "local-hostname": "egress-0b7e7d4c"}
	if fmt.Sprint(md) != fmt.Sprint(want) {
		t.Errorf("meta-data %v, want %v", md, want)
	}
	for name, in := range map[string][2]string{
		"empty uid":           {"", "h"},
		"newline in uid":      {"a\nlocal-hostname: x", "h"},
		"quote in uid":        {"a'b", "h"},
		"dotted hostname":     {"uid", "a.b"},
		"uppercase hostname":  {"uid", "Host"},
		"overlong hostname":   {"uid", strings.Repeat("h", 64)},
		"hostname with colon": {"uid", "h: x"},
	} {
		if md, err := RenderMetaData(in[0], in[1]); err == nil {
			t.Errorf("%s: rendered %q, want an error", name, md)
		}
	}
}

// The guest-agent line is shell the guest runs as root: it must parse, and hold no quote that would end its
// single-quoted YAML scalar.
func TestGuestAgentIfMissingIsValidShell(t *testing.T) {
	for _, line := range []string{GuestAgentIfMissing, RsyslogIfMissing, vmguest.MetricsIfMissing} {
		if strings.ContainsAny(line, "'\"") {
			t.Fatalf("holds a quote: %s", line)
		}
		if out, err := exec.Command("sh", "-n", "-c", line).CombinedOutput(); err != nil {
			t.Fatalf("sh -n %s: %v: %s", line, err, out)
		}
	}
}
