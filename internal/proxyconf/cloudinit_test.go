package proxyconf

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
	"gopkg.in/yaml.v3"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// cloudConfig is the part of cloud-init's schema the user-data uses.
type cloudConfig struct {
	PackageUpdate  bool     `yaml:"package_update"`
	PackageUpgrade bool     `yaml:"package_upgrade"`
	Packages       []string `yaml:"packages"`
	WriteFiles     []struct {
		Path        string `yaml:"path"`
		Owner       string `yaml:"owner"`
		Permissions string `yaml:"permissions"`
		Encoding    string `yaml:"encoding"`
		Content     string `yaml:"content"`
	} `yaml:"write_files"`
	Runcmd [][]string `yaml:"runcmd"`
}

// parseUserData reads user-data as cloud-init does and returns it with the decoded files by path.
func parseUserData(t *testing.T, ud []byte) (cloudConfig, map[string][]byte) {
	t.Helper()
	if !strings.HasPrefix(string(ud), "#cloud-config\n") {
		t.Fatalf("user-data must start with #cloud-config: %.40q", ud)
	}
	var cc cloudConfig
	dec := yaml.NewDecoder(strings.NewReader(string(ud)))
	dec.KnownFields(true)
	if err := dec.Decode(&cc); err != nil {
		t.Fatalf("user-data is not the expected YAML: %v", err)
	}
	files := map[string][]byte{}
	for _, f := range cc.WriteFiles {
		// Squid's files are its group's alone (they may hold the password hash and the TLS key); the drop-in
		// of squid.service is the system's, as the distribution's units are.
		want := [2]string{"root:proxy", "0640"}
		if f.Path == SquidDropInPath {
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
	auth := &BasicAuth{Username: "egress", Password: "a long password"}
	tests := map[string]struct {
		s         Settings
		wantFiles []string
	}{
		"without auth":                {s: Settings{Port: 3128, AllowedDestinations: []string{".example.com"}}, wantFiles: []string{ConfPath}},
		"with auth":                   {s: Settings{Port: 3128, Auth: auth, AllowedClientCIDRs: []string{"10.0.0.0/8"}}, wantFiles: []string{HtpasswdPath, ConfPath}},
		"with tls":                    {s: Settings{Port: 3128, TLS: &TLSSettings{CertificatePEM: fuzzCertPEM(), PrivateKeyPEM: fuzzKeyPEMValue()}}, wantFiles: []string{TLSCertPath, TLSKeyPath, ConfPath}},
		"with allowed private ranges": {s: Settings{Port: 3128, AllowedDestinations: []string{"mirror.internal"}, AllowedPrivateCIDRs: []string{"10.1.0.0/16"}}, wantFiles: []string{ConfPath}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ud, err := RenderUserData(tc.s, RenderOptions{})
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
			want := [][]string{{"sh", PrestartPath, PrestartOwnAddresses}, {"systemctl", "daemon-reload"}, {"sh", "-c", InstallIfMissing}, {"systemctl", "enable", "squid"}, {"systemctl", "restart", "squid"}}
			if !slices.EqualFunc(cc.Runcmd, want, slices.Equal) {
				t.Errorf("runcmd %q, want %q", cc.Runcmd, want)
			}
			var paths []string
			for p := range files {
				paths = append(paths, p)
			}
			slices.Sort(paths)
			wantFiles := slices.Sorted(slices.Values(append([]string{NftablesPath, PrestartPath, SquidDropInPath}, tc.wantFiles...)))
			if !slices.Equal(paths, wantFiles) {
				t.Errorf("files %q, want %q", paths, wantFiles)
			}
			if backstop, _ := RenderNftables(tc.s); string(files[NftablesPath]) != string(backstop) {
				t.Errorf("the backstop in user-data differs from RenderNftables")
			}
			if string(files[PrestartPath]) != string(RenderPrestart(OwnAddressesPath)) {
				t.Errorf("the prestart script in user-data differs from RenderPrestart")
			}
			for _, line := range []string{
				"ExecStartPre=-/bin/sh " + PrestartPath + " " + PrestartOwnAddresses,
				"ExecStartPre=/bin/sh " + PrestartPath + " " + PrestartBackstop,
			} {
				if !slices.Contains(strings.Split(string(files[SquidDropInPath]), "\n"), line) {
					t.Errorf("squid.service's drop-in lacks %q:\n%s", line, files[SquidDropInPath])
				}
			}
			conf, _ := RenderSquidConf(tc.s, RenderOptions{OwnAddressesFile: OwnAddressesPath})
			if len(tc.s.AllowedDestinations) > 0 && !strings.Contains(string(conf), `acl own_addresses dst "`+OwnAddressesPath+`"`) {
				t.Errorf("squid.conf does not read the VM's own addresses")
			}
			if string(files[ConfPath]) != string(conf) {
				t.Errorf("squid.conf in user-data differs from RenderSquidConf")
			}
			// Squid loads the certificate while parsing, and it is not at its VM path here; TestTLSListener runs
			// Squid on a TLS config.
			if out, err := squidtest.Parse(t, files[ConfPath]); tc.s.TLS == nil && err != nil {
				t.Errorf("squid -k parse: %v\n%s", err, out)
			}
			if tc.s.Auth != nil {
				line := strings.TrimSpace(string(files[HtpasswdPath]))
				user, hash, _ := strings.Cut(line, ":")
				if user != auth.Username || bcrypt.CompareHashAndPassword([]byte(hash), []byte(auth.Password)) != nil {
					t.Errorf("htpasswd %q does not hold the user's bcrypt hash", line)
				}
				if strings.Contains(string(ud), auth.Password) {
					t.Error("user-data holds the password in clear")
				}
			}
		})
	}
}

// TestLargestSettingsFit renders the largest settings validation allows: the kvm seed's user-data fits its
// bound, and the files Compute Engine carries as metadata values (squid.conf, the backstop) fit GCE's.
func TestLargestSettingsFit(t *testing.T) {
	t.Parallel()
	label := strings.Repeat("a", 63)
	s := Settings{Port: 3128, Auth: &BasicAuth{Username: strings.Repeat("u", 64), Password: strings.Repeat("p", 72)}}
	for i := range MaxAllowedDestinations {
		// 253 characters, plus the leading dot.
		s.AllowedDestinations = append(s.AllowedDestinations, fmt.Sprintf(".%05d%s.%s.%s.%s", i, label[5:], label, label, label[:61]))
	}
	for i := range MaxAllowedClientCIDRs {
		s.AllowedClientCIDRs = append(s.AllowedClientCIDRs, fmt.Sprintf("2001:db8:ffff:ffff:ffff:ffff:ffff:%x/128", 0xf000+i))
	}
	s.AllowedPorts = manyPorts(MaxAllowedPorts)
	for i := range MaxAllowedPrivateCIDRs {
		// Each its own range, so none is merged away: the longest list the renderer can get.
		s.AllowedPrivateCIDRs = append(s.AllowedPrivateCIDRs, fmt.Sprintf("fd00:ffff:ffff:ffff:ffff:ffff:ffff:%x/128", 0xf000+2*i))
	}
	// The largest certificate chain and key validation lets through.
	ca := testutil.NewCA(t)
	chain, key := ca.Leaf(t)
	for len(chain)+len(ca.InterPEM) <= maxPEMBytes {
		chain += ca.InterPEM
	}
	key = strings.Repeat("#", maxPEMBytes-len(key)-1) + "\n" + key // text before a PEM block is allowed
	s.TLS = &TLSSettings{CertificatePEM: chain, PrivateKeyPEM: key}
	if err := s.Validate(); err != nil {
		t.Fatalf("test settings must be valid: %v", err)
	}
	if err := ValidateDestination(s.AllowedDestinations[0]); err != nil || len(s.AllowedDestinations[0]) != 254 {
		t.Fatalf("test destination must be the longest valid one: %v (%d)", err, len(s.AllowedDestinations[0]))
	}
	ud, err := RenderUserData(s, RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("user-data at maximum settings: %d bytes of %d", len(ud), MaxUserDataBytes)
	if len(ud) > MaxUserDataBytes {
		t.Errorf("user-data is %d bytes, over its %d limit", len(ud), MaxUserDataBytes)
	}
	_, files := parseUserData(t, ud)
	for _, f := range []string{ConfPath, NftablesPath} {
		t.Logf("%s at maximum settings: %d bytes of GCE's %d for a metadata value", f, len(files[f]), MaxMetadataValueBytes)
		if len(files[f]) > MaxMetadataValueBytes {
			t.Errorf("%s is %d bytes, over GCE's %d limit for a metadata value", f, len(files[f]), MaxMetadataValueBytes)
		}
	}
	if string(files[TLSKeyPath]) != key {
		t.Errorf("user-data carries another key")
	}
	// squid -k parse reads the certificate files, which are not where the VM has them: the conf without TLS
	// differs in the listening line alone.
	s.TLS = nil
	conf, err := RenderSquidConf(s, RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := squidtest.Parse(t, conf); err != nil || strings.Contains(out, "ERROR") || strings.Contains(out, "unrecognized") {
		t.Errorf("squid -k parse: %v\n%.2000s", err, out)
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

func manyPorts(n int) []int {
	var out []int
	for i := range n {
		out = append(out, 10000+i)
	}
	return out
}
