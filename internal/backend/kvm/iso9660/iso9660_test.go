package iso9660_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/iso9660"
)

// TestReadByIsoinfo proves the in-memory image with the standard tool: volume label, Rock Ridge names and
// contents as a Linux mount shows them, and the plain ISO 9660 names for readers without Rock Ridge.
func TestReadByIsoinfo(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("isoinfo"); err != nil {
		t.Skip("isoinfo (genisoimage) is not installed; scripts/libvirt-env.sh start installs it")
	}
	files := map[string][]byte{"user-data": []byte("#cloud-config\n"), "meta-data": []byte("instance-id: x\n"), "Mixed.Case.xml": []byte("<a/>")}
	img, err := iso9660.Build("cidata", files, time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
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
	for name, content := range files {
		if !strings.Contains(listing, " "+name) {
			t.Errorf("isoinfo -R -l does not show %s:\n%s", name, listing)
		}
		if got := run("-R", "-x", "/"+name); got != string(content) {
			t.Errorf("%s read back: %q, want %q", name, got, content)
		}
	}
	if got := run("-x", "/USER-DATA;1"); got != string(files["user-data"]) {
		t.Errorf("user-data via its ISO 9660 name: %q", got)
	}
}

func TestBuildAndReadFile(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("x"), 5000) // spans sectors
	img, err := iso9660.Build("cidata", map[string][]byte{"a": big, "b": nil}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := iso9660.ReadFile(img, "a"); err != nil || !bytes.Equal(got, big) {
		t.Errorf("multi-sector file read back wrong: %v", err)
	}
	if got, err := iso9660.ReadFile(img, "b"); err != nil || len(got) != 0 {
		t.Errorf("empty file read back: %q, %v", got, err)
	}
	if _, err := iso9660.ReadFile(img, "nope"); err == nil || errors.Is(err, iso9660.ErrNotISO) {
		t.Errorf("a missing file = %v, want an error that is not ErrNotISO", err)
	}
	if _, err := iso9660.ReadFile(make([]byte, 40000), "a"); !errors.Is(err, iso9660.ErrNotISO) {
		t.Errorf("a file of zeros = %v, want ErrNotISO", err)
	}
	if _, err := iso9660.Build("cidata", map[string][]byte{"a/b": nil}, time.Unix(0, 0)); err == nil {
		t.Error("a name with a slash was accepted")
	}
	if _, err := iso9660.Build(strings.Repeat("l", 33), nil, time.Unix(0, 0)); err == nil {
		t.Error("a label of 33 characters was accepted")
	}
}
