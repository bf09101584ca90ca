package provider

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// k8sRegistry is where the registry tests serve their registry: the node's address in the cluster's network
// namespace, the one registry scripts/k8s-env.sh (REGISTRY) lets the cluster's containerd pull from over plain
// HTTP. Nothing else listens there. Two tests take turns on it: TestAccUpgrade_kubernetesOlderImage runs among
// the package's sequential tests, which all end before a parallel test such as the one below goes on past its
// t.Parallel call, and each stops its registry when it ends.
const k8sRegistry = "172.31.255.1:5000"

// The proxy image goes from the archive scripts/build-k8s-image.sh writes, through a registry, onto the
// cluster: pushimage (what the release pushes with) puts it under a reference the cluster never had, and a
// proxy naming that image runs and serves. The registry (go-containerregistry's, tools/ociimage) runs in the
// cluster's network namespace, so the push and the pull stay there.
//
// Proxies' pods pull IfNotPresent (a release's tag names one image for good) and nothing in the resource
// changes that, so the pull is forced the way it happens on a real node: the tag is new, pushed just now to a
// registry that started empty. The registry's log then shows containerd fetching the tag, a manifest and the
// blobs it lacks. It lacks the config, not the layer: the layer is the one the cluster imported from the same
// archive at start, and containerd fetches no blob it has; the labels pushimage sets make the image's config
// and manifest new.
func TestAccProxyKubernetes_imageFromRegistry(t *testing.T) {
	env := k8sAccPreCheck(t)
	// Beside the other parallel tests, its build and push too (hence t.Parallel, not resource.ParallelTest).
	// It is the one parallel test serving k8sRegistry.
	t.Parallel()
	archive := os.Getenv("EGRESS_TEST_K8S_ARCHIVE")
	if archive == "" {
		t.Fatal("EGRESS_TEST_K8S_ARCHIVE must name the image archive scripts/build-k8s-image.sh writes " +
			"(make testacc sets it: ~/.cache/terraform-provider-egress/images/squid-oci.tar)")
	}
	bin := buildOCIImageTools(t)
	registry := startRegistry(t, env.netns, bin)
	tag := "acc-" + uuid.NewString()[:8]
	ref := k8sRegistry + "/egress/squid:" + tag
	index := pushImage(t, env.netns, bin, ref, archive, "org.opencontainers.image.version="+tag)
	owner := "acc-" + uuid.NewString()[:8]
	resource.Test(t, k8sAccTestCase(t, env, owner, resource.TestStep{
		PreConfig: func() {
			if pulled := registry.requests("containerd/"); len(pulled) > 0 {
				t.Fatalf("containerd fetched from the registry before any proxy named the image: %v", pulled)
			}
		},
		Config: k8sProviderBlock(t, env, owner, "default") + fmt.Sprintf(`
resource "egress_proxy" "pulled" {
  kubernetes            = { cluster = "test", namespace = "default", image = %q }
  allowed_client_cidrs  = ["10.244.0.0/16", "172.31.255.0/24"]
  allowed_destinations  = [%q]
  allowed_private_cidrs = [%q]
}
`, ref, k8sOrigin, k8sOriginCIDR),
		ConfigStateChecks: []statecheck.StateCheck{
			statecheck.ExpectKnownValue("egress_proxy.pulled", tfjsonpath.New("state"), knownvalue.StringExact("Running")),
			statecheck.ExpectKnownValue("egress_proxy.pulled", tfjsonpath.New("kubernetes").AtMapKey("image"), knownvalue.StringExact(ref)),
		},
		Check: resource.ComposeTestCheckFunc(
			registry.checkPulled("egress/squid", tag, index),
			k8sCheckServes(t, env, "pulled", nil,
				k8sRequest{url: "http://" + k8sOrigin + "/", status: "200"},
				k8sRequest{url: "http://" + k8sOther + "/", status: "403"},
			),
		),
	}))
}

// buildOCIImageTools builds tools/ociimage's pushimage and registry (a module of their own: the provider
// does not depend on go-containerregistry) and returns the folder they are in.
func buildOCIImageTools(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	start := time.Now()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./pushimage", "./registry")
	cmd.Dir = filepath.Join("..", "..", "tools", "ociimage")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building tools/ociimage: %v\n%s", err, out)
	}
	t.Logf("built tools/ociimage in %s", time.Since(start).Round(time.Second))
	return dir
}

// registryLog is the log of a registry the test runs: one JSON line per request.
type registryLog struct{ testutil.LockedBuffer }

// registryRequest is one line of it (tools/ociimage/registry).
type registryRequest struct {
	Method    string `json:"method"`
	URI       string `json:"uri"`
	Status    int    `json:"status"`
	UserAgent string `json:"user_agent"`
}

func (r registryRequest) String() string {
	return fmt.Sprintf("%s %s %d (%s)", r.Method, r.URI, r.Status, r.UserAgent)
}

// startRegistry runs tools/ociimage's registry on k8sRegistry inside the cluster's network namespace until
// the test ends, and returns its log once it accepts connections.
func startRegistry(t *testing.T, netns, bin string) *registryLog {
	t.Helper()
	// nsenter enters the network namespace alone and then runs the registry in its own process: killed with
	// the test, and killed when the test process dies first (Pdeathsig), so it never outlives the test on
	// the address the next run needs.
	cmd := exec.Command("nsenter", "--net=/run/netns/"+netns, filepath.Join(bin, "registry"), "-listen", k8sRegistry)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	log := &registryLog{}
	cmd.Stderr = log
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the registry: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// Its first line comes once it listens; EOF if it exits first (the address taken, the namespace gone).
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || !strings.HasPrefix(line, "listening on ") {
		t.Fatalf("the registry did not start on %s in network namespace %s: %q, %v; its log:\n%s", k8sRegistry, netns, line, err, log.String())
	}
	return log
}

// pushImage pushes the archive's proxy image to ref with pushimage from inside the cluster's network namespace,
// and returns the digest of the index it pushed.
func pushImage(t *testing.T, netns, bin, ref, archive string, labels ...string) string {
	t.Helper()
	args := []string{"--net=/run/netns/" + netns, filepath.Join(bin, "pushimage")}
	for _, l := range labels {
		args = append(args, "-label", l)
	}
	cmd := exec.Command("nsenter", append(args, ref, archive)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pushing %s to %s: %v\n%s", archive, ref, err, stderr.String())
	}
	// It prints the repository@digest it pushed.
	pushed := strings.TrimSpace(string(out))
	_, digest, ok := strings.Cut(pushed, "@")
	if !ok {
		t.Fatalf("pushimage printed %q, not the repository@digest it pushed", pushed)
	}
	t.Logf("pushed %s", pushed)
	return digest
}

// requests lists the requests whose user agent starts with agent.
func (l *registryLog) requests(agent string) []registryRequest {
	var out []registryRequest
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		var r registryRequest
		if json.Unmarshal([]byte(line), &r) == nil && strings.HasPrefix(r.UserAgent, agent) {
			out = append(out, r)
		}
	}
	return out
}

// checkPulled proves containerd pulled repo:tag, the index of that digest, from the registry: it resolved the
// tag, and fetched manifests and at least one blob by digest, each one the push put there.
func (l *registryLog) checkPulled(repo, tag, index string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		prefix := "/v2/" + repo + "/"
		// "manifests/<digest>" and "blobs/<digest>" the pusher stored: the index went under its tag.
		pushed := map[string]bool{"manifests/" + index: true}
		for _, r := range l.requests("go-containerregistry/") {
			u, err := url.Parse(r.URI)
			if err != nil || r.Method != "PUT" || r.Status >= 300 {
				continue
			}
			if d := u.Query().Get("digest"); strings.HasPrefix(u.Path, prefix+"blobs/uploads/") && d != "" {
				pushed["blobs/"+d] = true
			} else if m, ok := strings.CutPrefix(u.Path, prefix+"manifests/"); ok {
				pushed["manifests/"+m] = true
			}
		}
		pulls := l.requests("containerd/")
		var resolved, manifests, blobs int
		for _, r := range pulls {
			if r.Status != 200 {
				continue
			}
			object, ok := strings.CutPrefix(r.URI, prefix)
			switch {
			case !ok:
			case object == "manifests/"+tag:
				resolved++
			case strings.HasPrefix(object, "manifests/sha256:") && r.Method == "GET":
				if !pushed[object] {
					return fmt.Errorf("containerd fetched %s, which the push never stored; the registry's log:\n%s", object, l.String())
				}
				manifests++
			case strings.HasPrefix(object, "blobs/sha256:") && r.Method == "GET":
				if !pushed[object] {
					return fmt.Errorf("containerd fetched %s, which the push never stored; the registry's log:\n%s", object, l.String())
				}
				blobs++
			}
		}
		if resolved == 0 || manifests == 0 || blobs == 0 {
			return fmt.Errorf("containerd did not pull %s:%s from the registry (tag resolved %d times, %d manifests and %d blobs fetched); its requests: %v",
				repo, tag, resolved, manifests, blobs, pulls)
		}
		return nil
	}
}
