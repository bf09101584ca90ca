package kvm

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/iso9660"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

func testSeed(t *testing.T) ([]byte, backend.Spec) {
	t.Helper()
	spec := backend.Spec{Name: "egress-1", UID: "uid-1", Owner: "o",
		Proxy: proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"example.com"}}}
	m := newMetadata(spec, placement{Host: "h"}, time.Unix(1700000000, 0))
	img, err := seedImage(spec, m, time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	return img, spec
}

// TestSeedISOReadByIsoinfo proves the in-memory image with the standard tool: volume label, Rock Ridge names
// and contents as cloud-init will find them.
func TestSeedISOReadByIsoinfo(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("isoinfo"); err != nil {
		t.Skip("isoinfo (genisoimage) is not installed; scripts/libvirt-env.sh start installs it")
	}
	img, spec := testSeed(t)
	path := filepath.Join(t.TempDir(), "seed.iso")
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		out, err := exec.Command("isoinfo", append([]string{"-i", path}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("isoinfo %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if d := run("-d"); !strings.Contains(d, "Volume id: cidata") || !strings.Contains(d, "Rock Ridge signatures version 1 found") {
		t.Errorf("isoinfo -d:\n%s", d)
	}
	listing := run("-R", "-l")
	for _, name := range []string{"user-data", "meta-data", identityFile} {
		if !strings.Contains(listing, " "+name) {
			t.Errorf("isoinfo -R -l does not show %s:\n%s", name, listing)
		}
	}
	userData, _ := guest.RenderUserData(spec.Proxy, vmguest.RenderOptions())
	if got := run("-R", "-x", "/user-data"); got != string(userData) {
		t.Errorf("user-data read back:\n%q\nwant\n%q", got, userData)
	}
	if got := run("-R", "-x", "/meta-data"); !strings.Contains(got, "instance-id: 'uid-1'") {
		t.Errorf("meta-data read back: %q", got)
	}
	// Without Rock Ridge, the plain ISO 9660 names still lead to the same bytes.
	if got := run("-x", "/USER-DATA;1"); got != string(userData) {
		t.Errorf("user-data via its ISO 9660 name: %q", got)
	}
}

// TestSeedIdentity: the seed says whose it is, and a volume without an ISO on it (an upload that never got
// far) is told apart from one that is someone else's.
func TestSeedIdentity(t *testing.T) {
	t.Parallel()
	img, spec := testSeed(t)
	m, err := seedIdentity(img)
	if err != nil || m.UID != spec.UID || m.Owner != spec.Owner || m.Name != spec.Name {
		t.Fatalf("identity = %+v, %v", m, err)
	}
	if _, err := seedIdentity(make([]byte, 40000)); !errors.Is(err, iso9660.ErrNotISO) {
		t.Errorf("identity of zeros = %v, want iso9660.ErrNotISO", err)
	}
}
