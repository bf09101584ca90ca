package provider

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// imageVolumes lists the shared image volumes in the test pool.
func imageVolumes(t *testing.T, uri string) []string {
	t.Helper()
	out, err := exec.Command("virsh", "-q", "-c", uri, "vol-list", "egress-test").CombinedOutput()
	if err != nil {
		t.Fatalf("virsh vol-list: %v\n%s", err, out)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "egress-image-") {
			names = append(names, f[0])
		}
	}
	return names
}

// checkProxiesShareNewImageVolume is the check of a step that creates egress_proxy.a and egress_proxy.b from
// one image: exactly one image volume named with prefix was added to the pool since before, and both proxies
// run on it. The volume is kept in *volume for the test's last check, and deleted when the test ends: image
// volumes belong to no proxy, so the provider never deletes them.
func checkProxiesShareNewImageVolume(t *testing.T, uri string, before []string, prefix string, volume *string) resource.TestCheckFunc {
	t.Cleanup(func() {
		if *volume != "" {
			_ = exec.Command("virsh", "-q", "-c", uri, "vol-delete", "--pool", "egress-test", *volume).Run()
		}
	})
	return func(s *terraform.State) error {
		var added []string
		for _, v := range imageVolumes(t, uri) {
			if !slices.Contains(before, v) {
				added = append(added, v)
			}
		}
		if len(added) != 1 || !strings.HasPrefix(added[0], prefix) {
			return fmt.Errorf("image volumes added: %v, want exactly one named %s...", added, prefix)
		}
		*volume = added[0]
		a := s.RootModule().Resources["egress_proxy.a"].Primary.Attributes
		b := s.RootModule().Resources["egress_proxy.b"].Primary.Attributes
		if a["kvm.base_volume"] != *volume || b["kvm.base_volume"] != *volume || a["state"] != "Running" || b["state"] != "Running" {
			return fmt.Errorf("a: %s %s, b: %s %s; want both running on %s", a["kvm.base_volume"], a["state"], b["kvm.base_volume"], b["state"], *volume)
		}
		return nil
	}
}

// importRecordsImageInPlace is the step that imports egress_proxy.a, a proxy running on an image volume, and
// must plan no replacement but an update in place that records the kvm attributes the import could not know
// (each named with the configuration's value): what names the image, not how it was found, decides.
func importRecordsImageInPlace(kvm map[string]string) resource.TestStep {
	checks := []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.a", plancheck.ResourceActionUpdate)}
	for _, attr := range slices.Sorted(maps.Keys(kvm)) {
		checks = append(checks, plancheck.ExpectKnownValue("egress_proxy.a", tfjsonpath.New("kvm").AtMapKey(attr), knownvalue.StringExact(kvm[attr])))
	}
	return resource.TestStep{
		ResourceName:       "egress_proxy.a",
		ImportState:        true,
		ImportStateKind:    resource.ImportBlockWithID,
		ExpectNonEmptyPlan: true,
		ImportPlanChecks:   resource.ImportPlanChecks{PreApply: checks},
	}
}

// Two proxies created in parallel from one image file share a single uploaded volume.
func TestAccProxyKVM_parallelProxiesShareOneImageUpload(t *testing.T) {
	uri := kvmAccPreCheck(t)
	// A fresh image (unique content, so a volume from an earlier run cannot stand in for the upload).
	image := uniqueQCOW2(t)
	before := imageVolumes(t, uri)
	owner := "acc-" + uuid.NewString()[:8]
	proxy := func(name string) string {
		return fmt.Sprintf(`
resource "egress_proxy" %q {
  kvm                  = { image_file = %q, memory_mib = 256, wait_for_address = false }
  allowed_client_cidrs = ["198.18.0.0/24"]
}
`, name, image)
	}
	var uploaded string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		Steps: []resource.TestStep{
			{
				// OpenTofu creates independent resources in parallel.
				Config: kvmProviderBlock(owner, uri) + proxy("a") + proxy("b"),
				Check:  checkProxiesShareNewImageVolume(t, uri, before, "egress-image-", &uploaded),
			},
			// The import cannot know the local path; the configured file's content names the volume the proxy
			// already runs on, so the import plans no replacement: only image_file is recorded, in place.
			importRecordsImageInPlace(map[string]string{"image_file": image}),
		},
	})
	if !slices.Contains(imageVolumes(t, uri), uploaded) {
		t.Errorf("destroying the proxies deleted the shared image volume %s", uploaded)
	}
}

// imageURLServer serves the file at path on loopback under any path, as a static file server does, and
// counts the GETs.
func imageURLServer(t *testing.T, path string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var gets atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		http.ServeFile(w, r, path)
	}))
	t.Cleanup(srv.Close)
	return srv, &gets
}

// uniqueQCOW2 is a small qcow2 image of content no earlier run had, so its volume is this test's alone. It
// boots nothing: the domains run without a guest to emulate.
func uniqueQCOW2(t *testing.T) string {
	t.Helper()
	image := filepath.Join(t.TempDir(), "image.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-f", "qcow2", "-o", "cluster_size=65536", image, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v\n%s", err, out)
	}
	if out, err := exec.Command("qemu-io", "-c", "write -P 0x5a 0 64k", "-c", "write -P 0x"+uuid.NewString()[:2]+" 64k 64k", "-c", "write -P 0x"+uuid.NewString()[:2]+" 128k 64k", image).CombinedOutput(); err != nil {
		t.Fatalf("qemu-io: %v\n%s", err, out)
	}
	return image
}

// Two proxies from one image URL: one download, one volume, both running on it. An import plans no
// replacement when the configured image_sha256 names the volume the proxy runs on, and a new URL for the
// same image is an in-place change that downloads nothing.
func TestAccProxyKVM_imageURLDownloadedOnce(t *testing.T) {
	uri := kvmAccPreCheck(t)
	image := uniqueQCOW2(t)
	sum := testutil.FileSHA256(t, image)
	srv, gets := imageURLServer(t, image)
	before := imageVolumes(t, uri)
	owner := "acc-" + uuid.NewString()[:8]
	proxy := func(name, path string) string {
		return fmt.Sprintf(`
resource "egress_proxy" %q {
  kvm                  = { image_url = %q, image_sha256 = %q, memory_mib = 256, wait_for_address = false }
  allowed_client_cidrs = ["198.18.0.0/24"]
}
`, name, srv.URL+path, sum)
	}
	var downloaded string
	gotGets := func(want int32) resource.TestCheckFunc {
		return func(*terraform.State) error {
			if n := gets.Load(); n != want {
				return fmt.Errorf("the image server answered %d GETs, want %d", n, want)
			}
			return nil
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		Steps: []resource.TestStep{
			{
				Config: kvmProviderBlock(owner, uri) + proxy("a", "/images/d.qcow2") + proxy("b", "/images/d.qcow2"),
				Check: resource.ComposeTestCheckFunc(gotGets(1),
					checkProxiesShareNewImageVolume(t, uri, before, "egress-image-"+sum[:16]+"-", &downloaded)),
			},
			// The import knows neither the URL nor the checksum; image_sha256 names the volume the proxy
			// already runs on, so the plan records both in place.
			importRecordsImageInPlace(map[string]string{"image_url": srv.URL + "/images/d.qcow2", "image_sha256": sum}),
			{
				// Another copy of the same image: the proxy stays, and nothing is downloaded.
				Config: kvmProviderBlock(owner, uri) + proxy("a", "/mirror/d.qcow2") + proxy("b", "/images/d.qcow2"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.a", plancheck.ResourceActionUpdate),
				}},
				Check: gotGets(1),
			},
		},
	})
	if !slices.Contains(imageVolumes(t, uri), downloaded) {
		t.Errorf("destroying the proxies deleted the shared image volume %s", downloaded)
	}
}

// What changing image_url or image_sha256 plans, on the memory backend: another URL of the same image (the
// checksum in another case too) changes the proxy in place; another checksum is another image and replaces it.
func TestAccProxy_imageURLChanges(t *testing.T) {
	mem := newMemoryBackends()
	sum, other := strings.Repeat("ab12", 16), strings.Repeat("cd34", 16)
	config := func(url, sum string) string {
		return proxyConfig(fmt.Sprintf("  allowed_client_cidrs = [\"10.0.0.0/8\"]\n  kvm = { image_url = %q, image_sha256 = %q }", url, sum))
	}
	creates := func(want int) resource.TestCheckFunc {
		return func(*terraform.State) error {
			if n := mem[kvm.Kind].Calls("create"); n != want {
				return fmt.Errorf("%d creates, want %d", n, want)
			}
			return nil
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		Steps: []resource.TestStep{
			{Config: config("https://images.example/d.qcow2", sum), Check: creates(1)},
			{Config: config("https://mirror.example/d.qcow2", strings.ToUpper(sum)), ConfigPlanChecks: expectAction(plancheck.ResourceActionUpdate), Check: creates(1)},
			{Config: config("https://mirror.example/d.qcow2", other), ConfigPlanChecks: expectAction(plancheck.ResourceActionDestroyBeforeCreate), Check: creates(2)},
			{Config: config("https://images.example/e.qcow2", other), ConfigPlanChecks: expectAction(plancheck.ResourceActionUpdate), Check: creates(2)},
		},
	})
}

// How a failed download reaches the user: an image that is not the one image_sha256 names fails the apply at
// once with a diagnostic that says both checksums, the class and what to check, and leaves no volume; a
// download whose connection drops is retried within the same apply, from the start, and succeeds.
func TestAccProxyKVM_imageURLFailures(t *testing.T) {
	uri := kvmAccPreCheck(t)
	image := uniqueQCOW2(t)
	sum := testutil.FileSHA256(t, image)
	wrong := testutil.FileSHA256(t, uniqueQCOW2(t)) // another image's
	data, err := os.ReadFile(image)
	if err != nil {
		t.Fatal(err)
	}
	var cutGets, gets atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		if r.URL.Path == "/cut.qcow2" && cutGets.Add(1) == 1 {
			// The whole length announced, a third sent, the connection dropped.
			w.Header().Set("Content-Length", fmt.Sprint(len(data)))
			_, _ = w.Write(data[:len(data)/3])
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}
		http.ServeFile(w, r, image)
	}))
	t.Cleanup(srv.Close)
	owner := "acc-" + uuid.NewString()[:8]
	proxy := func(path, sum string) string {
		return fmt.Sprintf(`
resource "egress_proxy" "a" {
  kvm                  = { image_url = %q, image_sha256 = %q, memory_mib = 256, wait_for_address = false }
  allowed_client_cidrs = ["198.18.0.0/24"]
}
`, srv.URL+path, sum)
	}
	var downloaded []string
	t.Cleanup(func() {
		for _, v := range downloaded {
			_ = exec.Command("virsh", "-q", "-c", uri, "vol-delete", "--pool", "egress-test", v).Run()
		}
	})
	named := func(sum string) []string {
		var out []string
		for _, v := range imageVolumes(t, uri) {
			if strings.HasPrefix(v, "egress-image-"+sum[:16]+"-") {
				out = append(out, v)
			}
		}
		return out
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		Steps: []resource.TestStep{{
			Config: kvmProviderBlock(owner, uri) + proxy("/d.qcow2", wrong),
			ExpectError: wrapped(`(?s)Egress proxy request refused by the backend.*image_url ` + regexp.QuoteMeta(srv.URL) + `/d.qcow2.*` +
				`Error class: Permanent.*sha256 is ` + sum + `, expected ` + wrong + `.*Compare kvm.image_sha256 with the checksum`),
		}, {
			// Nothing of the failed download is left, and nothing was retried.
			Config: kvmProviderBlock(owner, uri),
			Check: func(*terraform.State) error {
				if left := named(wrong); len(left) != 0 {
					downloaded = append(downloaded, left...)
					return fmt.Errorf("volumes left by the failed download: %v", left)
				}
				if n := gets.Load(); n != 1 {
					return fmt.Errorf("%d GETs, want 1: a checksum mismatch is not retried", n)
				}
				return nil
			},
		}, {
			Config: kvmProviderBlock(owner, uri) + proxy("/cut.qcow2", sum),
			Check: func(s *terraform.State) error {
				downloaded = named(sum)
				a := s.RootModule().Resources["egress_proxy.a"].Primary.Attributes
				if len(downloaded) != 1 || a["kvm.base_volume"] != downloaded[0] || cutGets.Load() != 2 {
					return fmt.Errorf("image volumes %v, base volume %s, %d GETs of the cut URL; want one volume, the proxy on it, the download retried once",
						downloaded, a["kvm.base_volume"], cutGets.Load())
				}
				return nil
			},
		}},
	})
}
