package provider

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
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

// k8sLoadBalancerIP is the ingress address the test's load balancer stand-in gives the proxy's Service: a
// documentation address, which nothing in the cluster's namespace has but kube-proxy's rules for it.
const k8sLoadBalancerIP = "192.0.2.80"

// k8sOriginServer is an HTTP origin of the test's own inside the cluster's network namespace, remembering the
// client address of every request it answers, by path.
type k8sOriginServer struct {
	port int
	mu   sync.Mutex
	seen map[string][]string
}

// k8sServeOrigin listens on address (port 0: any free one) inside netns, the socket made on a thread moved
// there, and answers every request with 200 until the test ends.
func k8sServeOrigin(t *testing.T, netns, address string) *k8sOriginServer {
	t.Helper()
	l, err := testutil.ListenInNetns(netns, "tcp", address)
	if err != nil {
		t.Fatalf("listening on %s in namespace %s: %v", address, netns, err)
	}
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("listener address %v is not TCP", l.Addr())
	}
	o := &k8sOriginServer{port: addr.Port, seen: map[string][]string{}}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		o.mu.Lock()
		o.seen[r.URL.Path] = append(o.seen[r.URL.Path], host)
		o.mu.Unlock()
		_, _ = fmt.Fprintln(w, host) // a failed write shows in the client's status
	})}
	go func() { _ = srv.Serve(l) }() // ends with Close below
	t.Cleanup(func() { _ = srv.Close() })
	return o
}

// clients returns the client addresses the requests for path came from.
func (o *k8sOriginServer) clients(path string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.seen[path]...)
}

// egress_address is what a destination sees, or null; never the load balancer's address, which is
// ingress_address. A request through the proxy's load balancer address reaches an origin of the test's, and
// the client address the origin saw is compared with what the provider reported. On the test cluster the node
// has only a private address (its InternalIP, k8sNodeIP) and the origin runs on the node itself, so it sees
// the pod's own address: neither the node's nor the load balancer's address would have been true, and the
// provider must say it does not know (null) rather than report either.
func TestAccProxyKubernetes_egressAddressIsWhatTheOriginSees(t *testing.T) {
	env := k8sAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	ns := env.cluster.Namespace(t, "egress-addr")
	env.cluster.AssignLoadBalancers(t, ns, k8sLoadBalancerIP)
	origin := k8sServeOrigin(t, env.netns, net.JoinHostPort(k8sNodeIP, "0"))
	path := "/whoami-" + owner
	config := k8sProviderBlock(t, env, owner, ns) + fmt.Sprintf(`
resource "egress_proxy" "addr" {
  kubernetes            = { cluster = "test", namespace = %q, service_type = "LoadBalancer" }
  allowed_client_cidrs  = ["10.244.0.0/16", %q]
  allowed_destinations  = [%q]
  allowed_private_cidrs = [%q]
  allowed_ports         = [%d]
}
`, ns, k8sOriginCIDR, k8sOrigin, k8sOriginCIDR, origin.port)
	checkAddresses := func(s *terraform.State) error {
		rs, ok := s.RootModule().Resources["egress_proxy.addr"]
		if !ok {
			return fmt.Errorf("egress_proxy.addr is not in the state")
		}
		ingress, port := rs.Primary.Attributes["ingress_address"], rs.Primary.Attributes["port"]
		url := "http://" + net.JoinHostPort(k8sOrigin, strconv.Itoa(origin.port)) + path
		// kube-proxy writes the rules for the load balancer's address a moment after the Service has it: the
		// request is repeated until it is answered, within a bound a loaded machine meets.
		var status string
		for deadline := time.Now().Add(2 * time.Minute); ; {
			status = k8sProxied(env.netns, []string{"-x", "http://" + net.JoinHostPort(ingress, port)}, "", url)
			if status == "200" || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second)
		}
		seen := origin.clients(path)
		if status != "200" || len(seen) == 0 {
			return fmt.Errorf("GET %s through the load balancer address %s:%s: status %s, the origin saw %v", url, ingress, port, status, seen)
		}
		egress, known := rs.Primary.Attributes["egress_address"]
		t.Logf("the origin saw the proxy's request come from %s; egress_address %q (known: %t), ingress_address %s", seen[0], egress, known, ingress)
		switch {
		case known && egress != seen[0]:
			return fmt.Errorf("egress_address is %s, but the origin saw the proxy's request come from %s", egress, seen[0])
		case !known && (seen[0] == k8sNodeIP || seen[0] == ingress):
			return fmt.Errorf("egress_address is null, but the origin saw %s, an address the provider knows", seen[0])
		}
		return nil
	}
	resource.Test(t, k8sAccTestCase(t, env, owner,
		resource.TestStep{
			Config: config,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("egress_proxy.addr", tfjsonpath.New("ingress_address"), knownvalue.StringExact(k8sLoadBalancerIP)),
				// The test cluster's node has only a private address: what destinations elsewhere would see
				// is a NAT's, which the cluster does not name.
				statecheck.ExpectKnownValue("egress_proxy.addr", tfjsonpath.New("egress_address"), knownvalue.Null()),
			},
			Check: checkAddresses,
		},
		resource.TestStep{
			Config:   config,
			PlanOnly: true, // the refresh reads the same addresses: an empty plan
		},
	))
}

// Credentials with every right in one namespace and none on the cluster's Nodes (the usual namespace Role)
// run a proxy all the same: the node's address cannot be read, so egress_address is null, and neither the
// apply nor the refresh fails for it.
func TestAccProxyKubernetes_namespaceRightsOnly(t *testing.T) {
	env := k8sAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	ns := env.cluster.Namespace(t, "egress-nsonly")
	creds := env.cluster.NamespaceAdminToken(t, ns, "ns-admin")
	config := k8sTokenProviderBlock(owner, creds) + fmt.Sprintf(`
resource "egress_proxy" "ns" {
  kubernetes           = { cluster = "test", namespace = %q }
  allowed_client_cidrs = ["10.244.0.0/16"]
  allowed_destinations = [%q]
}
`, ns, k8sOrigin)
	resource.ParallelTest(t, k8sAccTestCase(t, env, owner,
		resource.TestStep{
			Config: config,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("egress_proxy.ns", tfjsonpath.New("state"), knownvalue.StringExact("Running")),
				statecheck.ExpectKnownValue("egress_proxy.ns", tfjsonpath.New("egress_address"), knownvalue.Null()),
				statecheck.ExpectKnownValue("egress_proxy.ns", tfjsonpath.New("ingress_address"), knownvalue.Null()),
			},
		},
		resource.TestStep{Config: config, PlanOnly: true},
	))
}
