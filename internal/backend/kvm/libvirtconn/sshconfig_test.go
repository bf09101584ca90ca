package libvirtconn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSSHRoute resolves hosts through an ssh configuration as ssh_config(5) says: the first value obtained
// wins, Host patterns take wildcards and negations, IdentityFile accumulates, ProxyJump lists hops each
// resolved through the same file, and the URI's user and port come before the file's.
func TestSSHRoute(t *testing.T) {
	t.Setenv("USER", "local")
	home := t.TempDir()
	config := `
Host db
    HostName 10.0.0.7
    ProxyJump admin@gw1:2200,gw2

Host gw1
    ProxyJump outer

Host gw2
    HostName gw2.example.com
    ProxyJump ignored-as-a-later-hop

Host kvm?.example.com !kvm9.example.com
    User virt
    Port 2022
    IdentityFile ~/.ssh/kvm_%r

Host loop-a
    ProxyJump loop-b
Host loop-b
    ProxyJump loop-a

Host legacy
    ProxyCommand ssh -W %h:%p bastion

Host short-*
    HostName %h.internal

Host *
    User fallback
    IdentityFile ~/.ssh/common
    UserKnownHostsFile ~/.ssh/kh1 /etc/kh2
`
	path := filepath.Join(home, "config")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	settings, err := loadSSHSettings(path)
	if err != nil {
		t.Fatal(err)
	}
	ssh := filepath.Join(home, ".ssh")
	tests := map[string]struct {
		target  hopSpec
		want    []string // addr user of each hop
		keys    []string // the last hop's key files
		wantErr string
	}{
		"pattern, first match wins": {target: hopSpec{alias: "kvm1.example.com"}, want: []string{"kvm1.example.com:2022 virt"},
			keys: []string{filepath.Join(ssh, "kvm_virt"), filepath.Join(ssh, "common")}},
		"URI user and port win": {target: hopSpec{alias: "kvm1.example.com", user: "root", port: "22"}, want: []string{"kvm1.example.com:22 root"},
			keys: []string{filepath.Join(ssh, "kvm_root"), filepath.Join(ssh, "common")}},
		"negated pattern":  {target: hopSpec{alias: "kvm9.example.com"}, want: []string{"kvm9.example.com:22 fallback"}},
		"no block matches": {target: hopSpec{alias: "plain"}, want: []string{"plain:22 fallback"}},
		"jump list, the first hop's own jump followed": {target: hopSpec{alias: "db"},
			want: []string{"outer:22 fallback", "gw1:2200 admin", "gw2.example.com:22 fallback", "10.0.0.7:22 fallback"}},
		"HostName token":             {target: hopSpec{alias: "short-a"}, want: []string{"short-a.internal:22 fallback"}},
		"jumps that name each other": {target: hopSpec{alias: "loop-a"}, wantErr: "name each other"},
		"ProxyCommand refused":       {target: hopSpec{alias: "legacy"}, wantErr: "ProxyCommand"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			hops, err := settings.route(tc.target, 0)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("route = %v, %v; want an error mentioning %q", hops, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range hops {
				got = append(got, h.addr+" "+h.user)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hops (-want +got):\n%s", diff)
			}
			last := hops[len(hops)-1]
			if tc.keys != nil {
				if diff := cmp.Diff(tc.keys, last.keyFiles); diff != "" {
					t.Errorf("key files (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff([]string{filepath.Join(ssh, "kh1"), "/etc/kh2"}, last.knownHosts); diff != "" {
				t.Errorf("known hosts files (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseJump(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		entry   string
		want    hopSpec
		wantErr bool
	}{
		"host":           {entry: "gw", want: hopSpec{alias: "gw"}},
		"user host port": {entry: "me@gw:2200", want: hopSpec{alias: "gw", user: "me", port: "2200"}},
		"ssh URI":        {entry: "ssh://me@gw:2200", want: hopSpec{alias: "gw", user: "me", port: "2200"}},
		"IPv6":           {entry: "[2001:db8::1]:22", want: hopSpec{alias: "2001:db8::1", port: "22"}},
		"empty":          {entry: " ", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := parseJump(tc.entry)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseJump(%q) = %+v, %v; want %+v", tc.entry, got, err, tc.want)
			}
		})
	}
}
