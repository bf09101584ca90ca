package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// TestAccUpgrade_kubernetesOlderImage: the pods of a proxy keep the image they were made with, and understand
// what a newer provider writes to them. The baseline makes a proxy whose pods run the baseline's image (built
// by the baseline commit's own scripts/build-k8s-image.sh, see scripts/build-baseline.sh --k8s-image, and
// pushed under a tag of its own to a registry in the cluster's network namespace); HEAD then changes its rules
// and password in place, and adds a deny list, which the baseline did not have. The update must keep the
// Deployment and its image, roll the pods (a new pod-template-hash) onto HEAD's squid.conf, password file and
// pod template, and those pods, on the older image, must serve the new rules: the new destinations with the
// new password, not the denied one, not the old password.
//
// The design keeps the image (changing it replaces the proxy, and a new provider version changes nothing by
// itself), so this is the guarantee: what a provider writes into a proxy's ConfigMap, Secret and pod template
// is understood by the image of every earlier release (see internal/backend/kubernetes/guest's ImageNeeds).
func TestAccUpgrade_kubernetesOlderImage(t *testing.T) {
	env := k8sAccPreCheck(t)
	baseline := baselineProvider(t)
	archive := baselineK8sImage(t)
	bin := buildOCIImageTools(t)
	startRegistry(t, env.netns, bin)
	// A tag never pushed before: the cluster pulls the image the test pushed, not one it kept from a run before.
	tag := "baseline-" + upgradeBaselineCommit(t)[:12] + "-" + uuid.NewString()[:8]
	image := k8sRegistry + "/egress/squid:" + tag
	pushImage(t, env.netns, bin, image, archive, "org.opencontainers.image.version="+tag)

	ns := env.cluster.Namespace(t, "upgrade-image")
	owner := "acc-" + uuid.NewString()[:8]
	provider := k8sProviderBlock(t, env, owner, ns)
	// newer is what only HEAD's step sets: rules the baseline's schema may not have at all.
	config := func(destinations, newer, password string, version int) string {
		return provider + fmt.Sprintf(`
resource "egress_proxy" "older" {
  kubernetes                 = { cluster = "test", namespace = %q, image = %q }
  allowed_client_cidrs       = ["10.244.0.0/16", "172.31.255.0/24"]
  allowed_destinations       = [%s]
  allowed_private_cidrs      = [%q]
  max_connections_per_client = 64
  %s
  %s
}
`, ns, image, destinations, k8sOriginCIDR, newer, writeOnlyAuth(password, version))
	}
	var made k8sRollout
	resource.Test(t, resource.TestCase{
		PreCheck:     func() { k8sAccPreCheck(t) },
		CheckDestroy: k8sCheckNothingLabelled(env, owner),
		Steps: []resource.TestStep{
			{
				ExternalProviders: baseline,
				Config:            config(strconv.Quote(k8sOrigin), "", "baseline-password", 1),
				Check: resource.ComposeTestCheckFunc(
					func(*terraform.State) (err error) {
						made, err = k8sRolledOut(env, ns, image)
						return err
					},
					k8sCheckServes(t, env, "older", nil,
						k8sRequest{url: "http://" + k8sOrigin + "/", credentials: "u:baseline-password", status: "200"},
						k8sRequest{url: "http://" + k8sOther + "/", credentials: "u:baseline-password", status: "403"},
					),
				),
			},
			{
				ProtoV6ProviderFactories: realProviders(),
				// Every name of the test domain but the origin, which the deny list (newer than the baseline)
				// refuses.
				Config: config(strconv.Quote("."+strings.SplitN(k8sOrigin, ".", 2)[1]),
					fmt.Sprintf("denied_destinations = [%q]", k8sOrigin), "head-password", 2),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.older", plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeTestCheckFunc(
					func(*terraform.State) error {
						now, err := k8sRolledOut(env, ns, image)
						switch {
						case err != nil:
							return fmt.Errorf("after HEAD's rule change: %w", err)
						case now.deployment != made.deployment:
							return fmt.Errorf("HEAD's rule change replaced the Deployment (uid %s, was %s)", now.deployment, made.deployment)
						case now.hash == made.hash:
							return fmt.Errorf("HEAD's rule change left the pods of pod-template-hash %s: nothing was rolled out", made.hash)
						}
						return nil
					},
					k8sCheckServes(t, env, "older", nil,
						k8sRequest{url: "http://" + k8sOther + "/", credentials: "u:head-password", status: "200"},
						k8sRequest{url: "http://" + k8sOrigin + "/", credentials: "u:head-password", status: "403"},
						k8sRequest{url: "http://" + k8sOther + "/", credentials: "u:baseline-password", status: "407"},
					),
				),
			},
		},
	})
}

// baselineK8sImage is the OCI archive of the Kubernetes image as the baseline commit builds it
// (scripts/build-baseline.sh --k8s-image: the working tree's archive when the build is the same).
func baselineK8sImage(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("../../scripts/build-baseline.sh", "--k8s-image", upgradeBaselineCommit(t))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("building the baseline's Kubernetes image: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// k8sRollout is what a proxy's pods run: the Deployment's uid and the pod-template-hash of its pods.
type k8sRollout struct{ deployment, hash string }

// k8sRolledOut reads the proxy's Deployment in ns (there must be one) and its pods that are not on their way
// out: every container of the template and of each pod names image, every pod is ready, and all are of one
// pod-template-hash.
func k8sRolledOut(env k8sEnv, ns, image string) (k8sRollout, error) {
	all, err := env.cluster.Readable(context.Background(), ns)
	if err != nil {
		return k8sRollout{}, err
	}
	var r k8sRollout
	var deployments int
	hashes := map[string]bool{}
	for key, text := range all {
		switch {
		case strings.HasPrefix(key, "deployments.apps "):
			var d appsv1.Deployment
			if err := json.Unmarshal([]byte(text), &d); err != nil {
				return r, err
			}
			if d.Labels[backend.LabelManagedBy] != backend.ManagedByValue {
				continue
			}
			deployments++
			r.deployment = string(d.UID)
			if err := runsImage(key, d.Spec.Template.Spec.Containers, image); err != nil {
				return r, err
			}
		case strings.HasPrefix(key, "pods. "):
			var p corev1.Pod
			if err := json.Unmarshal([]byte(text), &p); err != nil {
				return r, err
			}
			if p.Labels[backend.LabelManagedBy] != backend.ManagedByValue || p.DeletionTimestamp != nil {
				continue
			}
			if err := runsImage(key, p.Spec.Containers, image); err != nil {
				return r, err
			}
			for _, c := range p.Status.ContainerStatuses {
				if !c.Ready {
					return r, fmt.Errorf("%s: container %s is not ready: %+v", key, c.Name, c.State)
				}
			}
			hashes[p.Labels["pod-template-hash"]] = true
			r.hash = p.Labels["pod-template-hash"]
		}
	}
	if deployments != 1 || len(hashes) != 1 {
		return r, fmt.Errorf("%s holds %d Deployments of a proxy and pods of %d pod-template-hashes (%v), want 1 and 1", ns, deployments, len(hashes), hashes)
	}
	return r, nil
}

// runsImage says which container of an object does not name image.
func runsImage(object string, containers []corev1.Container, image string) error {
	for _, c := range containers {
		if c.Image != image {
			return fmt.Errorf("%s: container %s runs %s, not the older image %s", object, c.Name, c.Image, image)
		}
	}
	return nil
}
