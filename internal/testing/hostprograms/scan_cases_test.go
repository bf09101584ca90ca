package hostprograms

import (
	"slices"
	"testing"
)

// TestShellScan pins what the scan reads as a program of the machine, so that a change to it that would hide
// programs fails here rather than letting the table drift.
func TestShellScan(t *testing.T) {
	t.Parallel()
	defined := map[string]bool{"log": true}
	tests := map[string]struct {
		script string
		want   []string
	}{
		"plain command":                   {script: "nft -c -f x", want: []string{"nft"}},
		"builtins and functions":          {script: "echo hi; cd /; log done; local x=1", want: nil},
		"a variable names it":             {script: `"$here/install-packages.sh" a; $CLI version`, want: nil},
		"project scripts":                 {script: "scripts/k8s-env.sh start; ./x.sh", want: nil},
		"exec and command":                {script: "exec squid -N; command -v jq; command curl x", want: []string{"squid", "curl"}},
		"env with options":                {script: "env -u COOKIE A=$b timeout 20 ./bin", want: []string{"env", "timeout"}},
		"ip netns exec":                   {script: "ip netns exec ns curl -s x", want: []string{"ip", "curl"}},
		"nsenter options":                 {script: `nsenter --net="/run/netns/$N" --mount=/x iptables -S`, want: []string{"nsenter", "iptables"}},
		"wrappers chained":                {script: `setsid unshare --propagation private -- tini -s -- virtlogd -d`, want: []string{"setsid", "unshare", "tini", "virtlogd"}},
		"bash -c in place":                {script: `bash -c "set -u; $x; libvirtd -p '$d/pid'"`, want: []string{"bash", "libvirtd"}},
		"pipes and substitution":          {script: `v=$(dpkg-query -W x | cut -f1)`, want: []string{"dpkg-query", "cut"}},
		"chroot's program is the guest's": {script: `chroot "$root" apt-get install x`, want: []string{"chroot"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			uses, err := shellUses("case.sh", []byte(tc.script), defined)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, u := range uses {
				got = append(got, u.program)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("programs of %q: got %q, want %q", tc.script, got, tc.want)
			}
		})
	}
}

func TestMakeToShell(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"$(GOLANGCI) run ./...":                         "${MAKEREF} run ./...",
		"echo $$(date +%s)":                             "echo $(date +%s)",
		"$(call go_test,u,A=$(B),$$(go list ./...))":    "${MAKEREF}",
		"TOFU=$(TOFU) scripts/generate-docs.sh --check": "TOFU=${MAKEREF} scripts/generate-docs.sh --check",
	}
	for in, want := range tests {
		if got := makeToShell(in); got != want {
			t.Errorf("makeToShell(%q) = %q, want %q", in, got, want)
		}
	}
}
