package provider

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// TestAccUpgrade_kvm: a proxy the baseline made on the private libvirtd (a QEMU domain, its root volume cloned
// from the base image and its NoCloud seed ISO holding the rendered config, the password's hash and the TLS
// key) is planned and applied by HEAD without a change, and without a write to libvirt: the domain's persistent
// definition (its devices and its metadata, where the labels and the settings live), the metadata of the
// running domain, its uuid and its id (a new id would mean a restart), its state, the volumes of the proxy
// with their definitions, and the seed ISO byte for byte are as the baseline left them, and no volume of the
// proxy is added or removed.
//
// What it leaves out, to stay within the CI budget: the guest. The domain is started (the baseline's Create
// starts it) but not waited for (wait_for_address = false), so it is still booting under TCG while HEAD plans
// and applies, and its root volume, which the booting guest writes, is compared by its definition (name,
// capacity, format, backing image), not its allocation or contents. An empty plan means HEAD never reaches for
// the guest agent (only Reconfigure does), so nothing in the guest is HEAD's to change; what a rule change
// does to a running guest is TestAccProxyKVM_bootedProxy's to prove.
func TestAccUpgrade_kvm(t *testing.T) {
	uri := kvmAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	b := kvmBackend(t, uri)
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	config := kvmProviderBlock(owner, uri) + fmt.Sprintf(`
resource "egress_proxy" "test" {
  kvm = { memory_mib = 256, wait_for_address = false }
  %s
  %s
  %s
}
`, upgradeRules, writeOnlyAuth("upgrade-password", 1), writeOnlyTLS(cert, key))
	var name string
	var before map[string]string
	resource.Test(t, resource.TestCase{
		PreCheck:     func() { kvmAccPreCheck(t) },
		CheckDestroy: checkOwnerHasNothingLeft(b, owner),
		Steps: upgradeSteps(t, config,
			func() (err error) {
				made, err := b.ListByTag(context.Background(), backend.Selector{Owner: owner})
				if err != nil {
					return err
				}
				if len(made) != 1 {
					return fmt.Errorf("the baseline made %d proxies, want 1: %+v", len(made), made)
				}
				name = made[0].ID.Name
				before, err = kvmUpgradeObjects(t, uri, name)
				return err
			},
			func() error {
				after, err := kvmUpgradeObjects(t, uri, name)
				if err != nil {
					return err
				}
				if changed := changedSince(before, after); len(changed) != 0 {
					return fmt.Errorf("HEAD's plan and apply changed the proxy on libvirt:\n%s", strings.Join(changed, "\n"))
				}
				return nil
			}),
	})
}

// The parts of a volume's XML that a running guest moves by writing to its disk, and libvirt's reading of them.
var volumeChurn = regexp.MustCompile(`(?s)\s*<(allocation|physical)[^>]*>[^<]*</(allocation|physical)>|\s*<timestamps>.*?</timestamps>`)

// The metadata element of a domain's XML: labels and settings, which libvirt can change on a running domain alone.
var domainMetadata = regexp.MustCompile(`(?s)<metadata>.*</metadata>`)

// kvmUpgradeObjects describes domain name and its volumes in the test pool, each by what a write would move.
func kvmUpgradeObjects(t *testing.T, uri, name string) (map[string]string, error) {
	virsh := func(args ...string) (string, error) {
		out, err := exec.Command("virsh", append([]string{"-q", "-c", uri}, args...)...).Output()
		if err != nil {
			return "", fmt.Errorf("virsh %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	// One entry per part, so that a failure shows the part that moved.
	out := map[string]string{}
	for what, args := range map[string][]string{
		"uuid": {"domuuid", name}, "id": {"domid", name}, "state": {"domstate", name},
		"definition": {"dumpxml", "--inactive", name},
	} {
		s, err := virsh(args...)
		if err != nil {
			return nil, err
		}
		out["domain "+name+" "+what] = s
	}
	live, err := virsh("dumpxml", name)
	if err != nil {
		return nil, err
	}
	out["domain "+name+" running metadata"] = domainMetadata.FindString(live)

	vols, err := virsh("vol-list", "--pool", "egress-test")
	if err != nil {
		return nil, err
	}
	for line := range strings.Lines(vols) {
		vol := strings.Fields(line)
		if len(vol) == 0 || !strings.HasPrefix(vol[0], name+"-") {
			continue
		}
		xml, err := virsh("vol-dumpxml", "--pool", "egress-test", vol[0])
		if err != nil {
			return nil, err
		}
		d := volumeChurn.ReplaceAllString(xml, "")
		if strings.HasSuffix(vol[0], ".iso") {
			// The seed is read-only to the guest: its bytes are what the provider wrote.
			file := filepath.Join(t.TempDir(), vol[0])
			if _, err := virsh("vol-download", "--pool", "egress-test", vol[0], file); err != nil {
				return nil, err
			}
			b, err := os.ReadFile(file)
			if err != nil {
				return nil, err
			}
			d += fmt.Sprintf("\ncontent sha256 %x", sha256.Sum256(b))
		}
		out["volume "+vol[0]] = d
	}
	return out, nil
}
