package provider

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil/k8stest"
)

// What goes wrong on a real cluster comes back as a classified diagnostic naming the object and the cause,
// within the time the cluster takes to say so, not at the end of a create timeout.

func k8sProxyIn(namespace, extra string) string {
	return fmt.Sprintf(`
resource "egress_proxy" "k8s" {
  kubernetes           = { cluster = "test", namespace = %q %s }
  allowed_client_cidrs = ["10.244.0.0/16"]
  allowed_destinations = [%q]
}
`, namespace, extra, k8sOrigin)
}

// k8sTokenProviderBlock configures the provider with creds alone, a bearer token for the test cluster, as a
// user whose rights are narrower than the kubeconfig's cluster admin: what such credentials may and may not
// do is what the tests using it ask.
func k8sTokenProviderBlock(owner string, creds k8stest.Credentials) string {
	return fmt.Sprintf(`
provider "egress" {
  owner = %q
  kubernetes = { clusters = { test = {
    host                   = %q
    token                  = %q
    cluster_ca_certificate = %q
  } } }
}
`, owner, creds.Host, creds.Token, creds.CA)
}

// k8sAccTestCase is the test case of an acceptance test on the test cluster: the real provider (a cluster
// is the point), and a destroy that must leave nothing labelled with the test's owner.
func k8sAccTestCase(t *testing.T, env k8sEnv, owner string, steps ...resource.TestStep) resource.TestCase {
	return resource.TestCase{
		PreCheck:                 func() { k8sAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             k8sCheckNothingLabelled(env, owner),
		Steps:                    steps,
	}
}

// A ResourceQuota of zero pods: the Deployment is made, its ReplicaSet may not make a pod, and the apply
// fails with the Quota class and the quota's name. The half-made proxy is tainted and destroyed.
func TestAccProxyKubernetes_quotaForbidsThePod(t *testing.T) {
	env := k8sAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	ns := env.cluster.Namespace(t, "egress-quota")
	env.cluster.ForbidPods(t, ns, "no-pods")
	resource.ParallelTest(t, k8sAccTestCase(t, env, owner, resource.TestStep{
		Config: k8sProviderBlock(t, env, owner, ns) + k8sProxyIn(ns, ""),
		ExpectError: wrapped(fmt.Sprintf(`(?s)Deployment %s/egress-[0-9a-f]+ on cluster test.*Error class: Quota.*`+
			`ResourceQuota "no-pods" forbids its pods`, ns)),
	}))
}

// A ServiceAccount token that no role is bound to: egress_backends names every verb it lacks, and an apply
// fails Permanent with the API server's refusal and the verbs to grant in the namespace.
func TestAccProxyKubernetes_tokenWithoutRights(t *testing.T) {
	env := k8sAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	ns := env.cluster.Namespace(t, "egress-rbac")
	creds := env.cluster.ServiceAccountToken(t, ns, "no-rights")
	provider := k8sTokenProviderBlock(owner, creds)
	resource.ParallelTest(t, k8sAccTestCase(t, env, owner,
		resource.TestStep{
			Config: provider + `data "egress_backends" "all" {}`,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("healthy"), knownvalue.Bool(false)),
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends").AtSliceIndex(0).AtMapKey("reason"),
					knownvalue.StringExact("Unauthorized")),
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends").AtSliceIndex(0).AtMapKey("details").AtMapKey("missing_permissions"),
					knownvalue.StringRegexp(wrapped(`create deployments\.apps.*create configmaps.*list pods, watch pods`))),
			},
		},
		resource.TestStep{
			Config: provider + k8sProxyIn(ns, ""),
			ExpectError: wrapped(fmt.Sprintf(`(?s)Error class: Permanent.*cannot create resource "configmaps".*`+
				`in namespace %s the credentials also lack: create deployments\.apps.*Bind the credentials to a Role`, ns)),
		},
	))
}

// An image no node has and no registry serves: the pod's ErrImagePull turns into ImagePullBackOff within
// one pull attempt, and the apply fails with the kubelet's message instead of waiting out the rollout.
func TestAccProxyKubernetes_missingImageFailsFast(t *testing.T) {
	env := k8sAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	ns := env.cluster.Namespace(t, "egress-image")
	resource.ParallelTest(t, k8sAccTestCase(t, env, owner, resource.TestStep{
		Config: k8sProviderBlock(t, env, owner, ns) + k8sProxyIn(ns, `, image = "egress-proxies/does-not-exist:none"`),
		ExpectError: wrapped(fmt.Sprintf(`(?s)Deployment %s/egress-[0-9a-f]+ on cluster test.*Error class: Permanent.*`+
			`container squid: (ImagePullBackOff|ErrImageNeverPull)`, ns)),
	}))
}
