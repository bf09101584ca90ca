package provider

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sclient "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
)

// TestAccProxyKubernetes_metrics: on the test cluster, metrics turn on and off in place (a rollout; the
// Service and its address stay). With them, the proxy's pod runs the two sidecars, metrics_url names the
// Service's metrics port, and mtail answers there to a pod in metrics.allowed_client_cidrs; without them the
// pod is Squid alone again and the URLs are null. What the counters count, and that the NetworkPolicy keeps
// others out, is internal/backend/kubernetes's TestMetricsLive.
func TestAccProxyKubernetes_metrics(t *testing.T) {
	env := k8sAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	ns := env.cluster.Namespace(t, "acc-metrics")
	scraperIP := env.cluster.IdlePod(t, ns, "scraper", kubernetes.DefaultImage)
	config := func(metrics string) string {
		return k8sProviderBlock(t, env, owner, ns) + fmt.Sprintf(`
resource "egress_proxy" "m" {
  kubernetes            = { cluster = "test", namespace = %q }
  allowed_client_cidrs  = ["10.244.0.0/16"]
  allowed_destinations  = [%q]
  allowed_private_cidrs = [%q]
  log_format            = "json"
  %s
}
`, ns, k8sOrigin, k8sOriginCIDR, metrics)
	}
	var address string
	update := tfresource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.m", plancheck.ResourceActionUpdate)}}
	serves := k8sCheckServes(t, env, "m", &address, k8sRequest{url: "http://" + k8sOrigin + "/", status: "200"})
	tfresource.ParallelTest(t, tfresource.TestCase{
		PreCheck:                 func() { k8sAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             k8sCheckNothingLabelled(env, owner),
		Steps: []tfresource.TestStep{
			{
				Config:            config(""),
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownValue("egress_proxy.m", tfjsonpath.New("metrics_url"), knownvalue.Null())},
				Check:             tfresource.ComposeTestCheckFunc(serves, k8sCheckContainers(env, ns, "m", "squid")),
			},
			{
				Config:           config(fmt.Sprintf(`metrics = { allowed_client_cidrs = ["%s/32"] }`, scraperIP)),
				ConfigPlanChecks: update,
				Check: tfresource.ComposeTestCheckFunc(serves, k8sCheckContainers(env, ns, "m", "squid", "mtail", "squid-exporter", "active-requests"),
					// The Service's name, <service>.<namespace>.svc, on its metrics ports.
					k8sCheckMetricsURLs("m"),
					k8sCheckMetricsServed(env, ns, "m", "scraper")),
			},
			{
				Config:            config(""),
				ConfigPlanChecks:  update,
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownValue("egress_proxy.m", tfjsonpath.New("metrics_url"), knownvalue.Null())},
				Check:             tfresource.ComposeTestCheckFunc(serves, k8sCheckContainers(env, ns, "m", "squid")),
			},
		},
	})
}

// k8sCheckMetricsURLs: metrics_url and squid_metrics_url name the Service, <service>.<namespace>.svc, on the
// default metrics ports.
func k8sCheckMetricsURLs(name string) tfresource.TestCheckFunc {
	return func(s *terraform.State) error {
		rs, ok := s.RootModule().Resources["egress_proxy."+name]
		if !ok {
			return fmt.Errorf("egress_proxy.%s is not in the state", name)
		}
		id, err := idForms.Parse(rs.Primary.ID)
		if err != nil {
			return err
		}
		for attr, port := range map[string]int{"metrics_url": 3903, "squid_metrics_url": 9301} {
			if want := fmt.Sprintf("http://%s.%s.svc:%d/metrics", id.Name, id.Scope, port); rs.Primary.Attributes[attr] != want {
				return fmt.Errorf("%s is %q, want %q", attr, rs.Primary.Attributes[attr], want)
			}
		}
		return nil
	}
}

// k8sCheckContainers checks the containers of the proxy's pod template, in order, as the cluster's admin.
func k8sCheckContainers(env k8sEnv, ns, name string, want ...string) tfresource.TestCheckFunc {
	return func(s *terraform.State) error {
		rs, ok := s.RootModule().Resources["egress_proxy."+name]
		if !ok {
			return fmt.Errorf("egress_proxy.%s is not in the state", name)
		}
		id, err := idForms.Parse(rs.Primary.ID)
		if err != nil {
			return err
		}
		admin, err := clientcmd.BuildConfigFromFlags("", env.kubeconfig)
		if err != nil {
			return err
		}
		cs, err := k8sclient.NewForConfig(admin)
		if err != nil {
			return err
		}
		d, err := cs.AppsV1().Deployments(ns).Get(context.Background(), id.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var got []string
		for _, c := range d.Spec.Template.Spec.Containers {
			got = append(got, c.Name)
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			return fmt.Errorf("the pod template's containers are %v, want %v", got, want)
		}
		return nil
	}
}

// k8sCheckMetricsServed asks mtail for its page from the idle pod from, at metrics_url's port on the Service's
// address: the test cluster runs no cluster DNS, so the URL's name does not resolve there, while a cluster's
// DNS resolves it to that address. Repeated until it answers, as the node's rules for the Service's new port
// come a moment after the rollout.
func k8sCheckMetricsServed(env k8sEnv, ns, name, from string) tfresource.TestCheckFunc {
	return func(s *terraform.State) error {
		rs, ok := s.RootModule().Resources["egress_proxy."+name]
		if !ok {
			return fmt.Errorf("egress_proxy.%s is not in the state", name)
		}
		u, err := url.Parse(rs.Primary.Attributes["metrics_url"])
		if err != nil {
			return err
		}
		ip := rs.Primary.Attributes["internal_address"]
		script := `exec 3<>"/dev/tcp/$0/$1" && printf 'GET %s HTTP/1.0\r\n\r\n' "$2" >&3 && cat <&3`
		var last string
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			res, err := env.cluster.Exec(ctx, ns, from, "timeout", "10", "bash", "-c", script, ip, u.Port(), u.Path)
			cancel()
			if err != nil {
				return err
			}
			if f := strings.Fields(res.Stdout); len(f) > 1 && f[1] == "200" && strings.Contains(res.Stdout, "egress_proxy_log_lines_total") {
				return nil
			}
			last = fmt.Sprintf("exit %d, %.300q %s", res.Code, res.Stdout, res.Stderr)
		}
		return fmt.Errorf("mtail at %s:%s%s (metrics_url %s) from %s: %s", ip, u.Port(), u.Path, u, from, last)
	}
}

// TestAccProxy_kubernetesMetricsNeedPolicy: metrics beside network_policy = false are refused by the plan, on
// network_policy, before anything is created.
func TestAccProxy_kubernetesMetricsNeedPolicy(t *testing.T) {
	mem := newMemoryBackends()
	tfresource.Test(t, tfresource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		Steps: []tfresource.TestStep{{
			Config: proxyConfig(`
  kubernetes           = { cluster = "default", namespace = "egress", network_policy = false }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = ["api.example.com"]
  metrics              = { allowed_client_cidrs = ["192.168.7.0/24"] }
`),
			PlanOnly:    true,
			ExpectError: wrapped(`Metrics need the NetworkPolicy[\s\S]*a proxy with metrics needs its NetworkPolicy`),
		}},
	})
	for kind, b := range mem {
		if n := b.Calls("create"); n != 0 {
			t.Errorf("%s: create was called %d times", kind, n)
		}
	}
}
