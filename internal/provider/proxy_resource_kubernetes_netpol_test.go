package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
)

// Addresses of the test cluster's network namespace (scripts/k8s-env.sh), on each of which its HTTP origin
// answers: pods reach any of them unless a network policy stops them.
const (
	k8sNodeIP     = "172.31.255.1"    // the node: the origin every egress-k8s.test name resolves to, and the pods' resolver
	k8sPeerIP     = "172.31.255.2"    // the node's peer: private, and left out of allowed_private_cidrs below
	k8sMetadataIP = "169.254.169.254" // the cloud metadata servers' address
)

// The proxy's NetworkPolicy is enforced by the test cluster's policy controller, below Squid: a pod outside
// allowed_client_cidrs cannot even open a TCP connection to the proxy port (Squid's own ACL would only have
// answered 403), and the proxy pod itself cannot open one to the metadata address or to a private address
// that allowed_private_cidrs leaves out, though no Squid is involved; an allowed client, an allowed private
// address and DNS still work. An in-place update moves both sides of the line.
func TestAccProxyKubernetes_networkPolicyEnforced(t *testing.T) {
	env := k8sAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	ns := env.cluster.Namespace(t, "acc-netpol")
	// The clients run the proxy's own image, which the cluster holds (nothing is pulled), for its bash.
	insideIP := env.cluster.IdlePod(t, ns, "inside", kubernetes.DefaultImage)
	outsideIP := env.cluster.IdlePod(t, ns, "outside", kubernetes.DefaultImage)
	config := func(client string, allowedPrivate ...string) string {
		return k8sProviderBlock(t, env, owner, ns) + fmt.Sprintf(`
resource "egress_proxy" "np" {
  kubernetes            = { cluster = "test", namespace = %q }
  allowed_client_cidrs  = ["%s/32"]
  allowed_destinations  = [%q]
  allowed_private_cidrs = ["%s"]
}
`, ns, client, k8sOrigin, strings.Join(allowedPrivate, `", "`))
	}
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { k8sAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             k8sCheckNothingLabelled(env, owner),
		Steps: []resource.TestStep{
			{
				Config: config(insideIP, k8sNodeIP+"/32"),
				Check: k8sCheckPolicy(t, env, ns, "np",
					netpolProbe{from: "inside", to: "proxy", want: "HTTP/1.1 200 OK"},
					netpolProbe{from: "inside", to: "proxy-pod", want: "connected"},
					netpolProbe{from: "outside", to: "proxy", want: "refused"},
					netpolProbe{from: "outside", to: "proxy-pod", want: "refused"},
					netpolProbe{from: "proxy-pod", to: k8sNodeIP, want: "connected"},
					netpolProbe{from: "proxy-pod", to: k8sMetadataIP, want: "refused"},
					netpolProbe{from: "proxy-pod", to: k8sPeerIP, want: "refused"},
				),
			},
			{
				// The client ranges and private ranges change in place: the policy follows.
				Config: config(outsideIP, k8sNodeIP+"/32", k8sPeerIP+"/32"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.np", plancheck.ResourceActionUpdate),
				}},
				Check: k8sCheckPolicy(t, env, ns, "np",
					netpolProbe{from: "outside", to: "proxy", want: "HTTP/1.1 200 OK"},
					netpolProbe{from: "inside", to: "proxy", want: "refused"},
					netpolProbe{from: "proxy-pod", to: k8sPeerIP, want: "connected"},
					netpolProbe{from: "proxy-pod", to: k8sMetadataIP, want: "refused"},
				),
			},
		},
	})
}

// netpolProbe is one connection attempt and what it must give: "connected" or "refused" for a TCP connection
// to port 80 of an address, or to the proxy port of "proxy" (its Service) or "proxy-pod" (its pod's own
// address); for a plain GET of the origin through "proxy", the status line of the answer. from is an idle pod
// of the test's namespace or "proxy-pod".
type netpolProbe struct {
	from, to, want string
}

// k8sCheckPolicy runs the probes from inside the pods, through the API server's exec. The policy controller
// applies a new policy or pod a moment after the API server stores it, so the probes are repeated until every
// one gives what it must, within a bound a loaded machine meets; a policy that is not enforced never does.
func k8sCheckPolicy(t *testing.T, env k8sEnv, ns, name string, probes ...netpolProbe) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		rs, ok := s.RootModule().Resources["egress_proxy."+name]
		if !ok {
			return fmt.Errorf("egress_proxy.%s is not in the state", name)
		}
		id, err := idForms.Parse(rs.Primary.ID)
		if err != nil {
			return err
		}
		serviceIP, port := rs.Primary.Attributes["internal_address"], rs.Primary.Attributes["port"]
		// One round's probes: each outcome, and an error only when a probe could not be run at all.
		round := func() ([]string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// After an update the rollout's new pod is the proxy; an old one may still be on its way out.
			proxyPod, proxyIP, err := env.cluster.ReadyPod(ctx, ns, backend.LabelName, id.Name)
			if err != nil {
				return nil, err
			}
			var failed []string
			for _, p := range probes {
				from, to, toPort := p.from, p.to, "80"
				switch to {
				case "proxy":
					to, toPort = serviceIP, port
				case "proxy-pod":
					to, toPort = proxyIP, port
				}
				if from == "proxy-pod" {
					from = proxyPod
				}
				script := `exec 3<>"/dev/tcp/$0/$1" && echo connected`
				if strings.HasPrefix(p.want, "HTTP/") {
					script = `exec 3<>"/dev/tcp/$0/$1" && printf 'GET http://%s/ HTTP/1.0\r\nHost: %s\r\n\r\n' "$2" "$2" >&3 && head -n 1 <&3`
				}
				res, err := env.cluster.Exec(ctx, ns, from, "timeout", "10", "bash", "-c", script, to, toPort, k8sOrigin)
				if err != nil {
					return nil, err
				}
				got := strings.TrimSpace(res.Stdout)
				if res.Code != 0 {
					got = "refused"
				}
				if got != p.want {
					failed = append(failed, fmt.Sprintf("from %s to %s:%s: %q (exit %d, %s), want %q",
						p.from, to, toPort, got, res.Code, strings.TrimSpace(res.Stderr), p.want))
				}
			}
			return failed, nil
		}
		deadline := time.Now().Add(3 * time.Minute)
		for n := 1; ; n++ {
			failed, err := round()
			if err != nil {
				return err
			}
			if len(failed) == 0 {
				if n > 1 {
					t.Logf("egress_proxy.%s's policy held after %d rounds of probes", name, n)
				}
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("after %d rounds the network policy of %s still lets through or stops the wrong connections:\n%s",
					n, id, strings.Join(failed, "\n"))
			}
			time.Sleep(time.Second)
		}
	}
}
