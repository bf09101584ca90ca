package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil/k8stest"
)

// These tests drive the real single-node cluster scripts/k8s-env.sh runs in its own network namespace: the
// proxy pod runs Squid from the image scripts/build-k8s-image.sh builds, and requests go through its Service
// from inside that namespace, to the HTTP origin the script serves there for every name under egress-k8s.test.

const (
	k8sOrigin = "origin.egress-k8s.test"
	k8sOther  = "other.egress-k8s.test"
	// The origin's address is private: the proxy may reach it only through allowed_private_cidrs.
	k8sOriginCIDR = "172.31.255.0/24"
	k8sUser       = "k8s-acc"
	k8sPass       = "k8s-acc-password"
)

type k8sEnv struct {
	kubeconfig, netns string
	cluster           *k8stest.Cluster
}

func k8sAccPreCheck(t *testing.T) k8sEnv {
	t.Helper()
	// Called before resource.Test, as kvmAccPreCheck is: without TF_ACC the test skips, with it a missing
	// cluster fails the test.
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1 (make testacc)")
	}
	testAccPreCheck(t)
	env := k8sEnv{kubeconfig: os.Getenv("EGRESS_K8S_KUBECONFIG"), netns: os.Getenv("EGRESS_K8S_NETNS")}
	if env.kubeconfig == "" || env.netns == "" {
		t.Fatal("EGRESS_K8S_KUBECONFIG and EGRESS_K8S_NETNS must name the test cluster: run `scripts/k8s-env.sh start` " +
			"(EGRESS_K8S_KUBECONFIG=/var/tmp/egress-k8s/kubeconfig, EGRESS_K8S_NETNS=egress-k8s) or `make testacc`")
	}
	if _, err := os.Stat(env.kubeconfig); err != nil {
		t.Fatalf("the test cluster's kubeconfig: %v: run `scripts/k8s-env.sh start` or `make testacc`", err)
	}
	env.cluster = k8stest.Connect(t, env.kubeconfig)
	return env
}

// k8sProviderBlock configures the provider as a user granted exactly the permission documents
// (examples/permissions/kubernetes, as they are) would: a kubeconfig of the documents' ServiceAccount, bound
// to their Role in each of namespaces and to their ClusterRole for Nodes, and to nothing else; the namespaces
// are listed, since the Role allows no list across the cluster (the orphan list and egress_backends read them).
func k8sProviderBlock(t *testing.T, env k8sEnv, owner string, namespaces ...string) string {
	t.Helper()
	listed, err := json.Marshal(namespaces)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`
provider "egress" {
  owner = %q
  kubernetes = { clusters = { test = {
    config_path = %q
    namespaces  = %s
  } } }
}
`, owner, k8sDocumentedKubeconfig(t, env, namespaces...), listed)
}

// k8sDocumentedKubeconfig writes a kubeconfig with a token of the permission documents' ServiceAccount,
// applying the documents first, the Role in each of namespaces; once per test and namespaces, as a test's
// configuration is built again for each step.
func k8sDocumentedKubeconfig(t *testing.T, env k8sEnv, namespaces ...string) string {
	t.Helper()
	key := fmt.Sprintf("%p %q", t, namespaces)
	k8sKubeconfigs.Lock()
	path, ok := k8sKubeconfigs.byTest[key]
	k8sKubeconfigs.Unlock()
	if ok {
		return path
	}
	path = env.cluster.DocumentedCredentials(t, namespaces...).Kubeconfig(t, t.TempDir())
	k8sKubeconfigs.Lock()
	k8sKubeconfigs.byTest[key] = path
	k8sKubeconfigs.Unlock()
	t.Cleanup(func() {
		k8sKubeconfigs.Lock()
		defer k8sKubeconfigs.Unlock()
		delete(k8sKubeconfigs.byTest, key)
	})
	return path
}

var k8sKubeconfigs = struct {
	sync.Mutex
	byTest map[string]string
}{byTest: map[string]string{}}

// k8sBackend is the backend with the credentials k8sProviderBlock gives the provider, for what a test does
// and checks behind Terraform's back.
func k8sBackend(t *testing.T, env k8sEnv, namespaces ...string) *kubernetes.Backend {
	t.Helper()
	b, err := kubernetes.New(kubernetes.Config{Clusters: map[string]kubernetes.ClusterConfig{"test": {
		ConfigPath: k8sDocumentedKubeconfig(t, env, namespaces...), Namespaces: namespaces,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// k8sProxied sends one plain HTTP request through the proxy from inside the cluster's network namespace and
// returns curl's status code ("000" when there was no answer). proxyArgs are curl's arguments naming the proxy;
// credentials is user:password, or empty.
func k8sProxied(netns string, proxyArgs []string, credentials, url string) string {
	// nsenter enters the network namespace alone; `ip netns exec` would remount /sys as well.
	args := append([]string{"--net=/run/netns/" + netns, "curl", "-sS", "-o", "/dev/null", "--max-time", "20",
		"-w", "%{http_code}"}, proxyArgs...)
	if credentials != "" {
		args = append(args, "--proxy-user", credentials)
	}
	out, _ := exec.Command("nsenter", append(args, url)...).Output()
	return strings.TrimSpace(string(out))
}

// k8sRequest is one request through the proxy and the status it must get. viaTLS, when set, is the file of
// the certificate the proxy's TLS listener must present for k8sTLSName.
type k8sRequest struct {
	url, credentials, status string
	viaTLS                   string
}

// k8sTLSName is the name in the test certificates; curl is told the Service's address for it.
const k8sTLSName = "proxy.test"

func (r k8sRequest) proxyArgs(ip, port string) []string {
	if r.viaTLS == "" {
		return []string{"-x", "http://" + ip + ":" + port}
	}
	return []string{"-x", "https://" + k8sTLSName + ":" + port, "--proxy-cacert", r.viaTLS,
		"--resolve", k8sTLSName + ":" + port + ":" + ip}
}

// k8sCheckServes sends each request through the Service of egress_proxy.<name>. With address, the Service's
// cluster IP is remembered on the first call and must stay the same on the later ones.
func k8sCheckServes(t *testing.T, env k8sEnv, name string, address *string, requests ...k8sRequest) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		rs, ok := s.RootModule().Resources["egress_proxy."+name]
		if !ok {
			return fmt.Errorf("egress_proxy.%s is not in the state", name)
		}
		ip := rs.Primary.Attributes["internal_address"]
		if address != nil {
			if *address != "" && *address != ip {
				return fmt.Errorf("the Service address changed from %s to %s", *address, ip)
			}
			*address = ip
		}
		port := rs.Primary.Attributes["port"]
		proxy := ip + ":" + port
		// The apply returns once the Deployment has rolled out; kube-proxy rewrites the Service's rules inside
		// the namespace a moment later, and until then a request may reach an old pod on its way out. So the
		// requests are repeated until every one gets its answer, within a bound a loaded machine meets.
		var failed string
		for deadline, round := time.Now().Add(2*time.Minute), 1; ; round++ {
			failed = ""
			for _, r := range requests {
				if got := k8sProxied(env.netns, r.proxyArgs(ip, port), r.credentials, r.url); got != r.status {
					failed = fmt.Sprintf("GET %s through %s (credentials %q): status %s, want %s", r.url, proxy, r.credentials, got, r.status)
					break
				}
			}
			if failed == "" || time.Now().After(deadline) {
				if round > 1 {
					t.Logf("egress_proxy.%s answered as expected after %d rounds of requests", name, round)
				}
				break
			}
			time.Sleep(time.Second)
		}
		if failed != "" {
			id, _ := idForms.Parse(rs.Primary.ID)
			return fmt.Errorf("%s; Squid's log:\n%s", failed, env.cluster.PodLog(context.Background(), id.Scope, backend.LabelName, id.Name))
		}
		return nil
	}
}

// k8sCheckNothingLabelled proves a destroy: no object in any namespace still carries the owner's label.
func k8sCheckNothingLabelled(env k8sEnv, owner string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		left, err := env.cluster.Labelled(context.Background(), backend.LabelOwner, owner)
		if err != nil {
			return fmt.Errorf("listing what carries %s=%s: %w", backend.LabelOwner, owner, err)
		}
		if len(left) > 0 {
			return fmt.Errorf("after destroy these objects still carry %s=%s: %s", backend.LabelOwner, owner, strings.Join(left, ", "))
		}
		return nil
	}
}

func TestAccProxyKubernetes_lifecycleOnRealCluster(t *testing.T) {
	env := k8sAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	b := k8sBackend(t, env, "default")
	// Without auth first: an import of a proxy with a password plans an update, since the cluster never
	// gives the password back, and the import steps want a plan of nothing but the import.
	config := func(destination string, auth bool) string {
		authBlock := ""
		if auth {
			authBlock = fmt.Sprintf("auth = {\n    username = %q\n    password = %q\n  }", k8sUser, k8sPass)
		}
		return k8sProviderBlock(t, env, owner, "default") + fmt.Sprintf(`
resource "egress_proxy" "k8s" {
  kubernetes            = { cluster = "test", namespace = "default" }
  allowed_client_cidrs  = ["10.244.0.0/16", "172.31.255.0/24"]
  allowed_destinations  = [%q]
  allowed_private_cidrs = [%q]
  labels                = { suite = "acceptance" }
  %s
}
`, destination, k8sOriginCIDR, authBlock)
	}
	credentials := k8sUser + ":" + k8sPass
	sameID := statecheck.CompareValue(compare.ValuesSame())
	var id backend.ProviderID
	var address string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { k8sAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy: func(s *terraform.State) error {
			if _, err := b.Get(context.Background(), id); !backend.IsNotFound(err) {
				return fmt.Errorf("%s after destroy: get returned %w, want NotFound", id, err)
			}
			return k8sCheckNothingLabelled(env, owner)(s)
		},
		Steps: []resource.TestStep{
			{
				Config: config(k8sOrigin, false),
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue("egress_proxy.k8s", tfjsonpath.New("id")),
					statecheck.ExpectKnownValue("egress_proxy.k8s", tfjsonpath.New("state"), knownvalue.StringExact("Running")),
					statecheck.ExpectKnownValue("egress_proxy.k8s", tfjsonpath.New("id"),
						knownvalue.StringRegexp(regexp.MustCompile(`^kubernetes/test/default/egress-[0-9a-f]{16}$`))),
					// Pods reach the proxy by its Service's name, which outlives a recreated Service's address.
					statecheck.ExpectKnownValue("egress_proxy.k8s", tfjsonpath.New("proxy_url"),
						knownvalue.StringRegexp(regexp.MustCompile(`^http://egress-[0-9a-f]{16}\.default\.svc:3128$`))),
				},
				Check: resource.ComposeTestCheckFunc(
					func(s *terraform.State) error {
						var err error
						id, err = idForms.Parse(s.RootModule().Resources["egress_proxy.k8s"].Primary.ID)
						return err
					},
					k8sCheckServes(t, env, "k8s", &address,
						k8sRequest{url: "http://" + k8sOrigin + "/", status: "200"},
						k8sRequest{url: "http://" + k8sOther + "/", status: "403"},
					),
				),
			},
			{
				Config:   config(k8sOrigin, false),
				PlanOnly: true, // nothing changed: an empty plan
			},
			{
				ResourceName:            "egress_proxy.k8s",
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts"},
			},
			{
				ResourceName:    "egress_proxy.k8s",
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithID,
			},
			{
				ResourceName:    "egress_proxy.k8s",
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithResourceIdentity,
				SkipFunc:        skipStepBelow(t, version1_12),
			},
			{
				// A new allow-list and credentials change the running proxy: same id, same Service address,
				// new rules.
				Config: config(k8sOther, true),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.k8s", plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{sameID.AddStateValue("egress_proxy.k8s", tfjsonpath.New("id"))},
				Check: k8sCheckServes(t, env, "k8s", &address,
					k8sRequest{url: "http://" + k8sOther + "/", credentials: credentials, status: "200"},
					k8sRequest{url: "http://" + k8sOrigin + "/", credentials: credentials, status: "403"},
					k8sRequest{url: "http://" + k8sOther + "/", status: "407"},
					k8sRequest{url: "http://" + k8sOther + "/", credentials: k8sUser + ":wrong", status: "407"},
				),
			},
			{
				Config:   config(k8sOther, true),
				PlanOnly: true, // the password is in the state, the Secret holds its hash: nothing to change
			},
			{
				// A new label and a second replica change the proxy in place: same id, same Service address,
				// two pods Available behind it, every object relabelled.
				Config: strings.NewReplacer(`namespace = "default" }`, `namespace = "default", replicas = 2 }`,
					`suite = "acceptance" }`, `suite = "acceptance", tier = "egress" }`).Replace(config(k8sOther, true)),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.k8s", plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue("egress_proxy.k8s", tfjsonpath.New("id")),
					statecheck.ExpectKnownValue("egress_proxy.k8s", tfjsonpath.New("kubernetes").AtMapKey("replicas"), knownvalue.Int64Exact(2)),
					// Both pods are members and serve: the update returned once the rollout ended.
					statecheck.ExpectKnownValue("egress_proxy.k8s", tfjsonpath.New("members"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.ObjectPartial(map[string]knownvalue.Check{"healthy": knownvalue.Bool(true), "reason": knownvalue.StringExact("")}),
						knownvalue.ObjectPartial(map[string]knownvalue.Check{"healthy": knownvalue.Bool(true), "reason": knownvalue.StringExact("")}),
					})),
					statecheck.ExpectKnownValue("egress_proxy.k8s", tfjsonpath.New("state"), knownvalue.StringExact("Running")),
				},
				Check: resource.ComposeTestCheckFunc(
					func(*terraform.State) error {
						got, err := b.Get(context.Background(), id)
						if err != nil {
							return err
						}
						opts, _ := got.Placement.Options.(*kubernetes.Options)
						if opts == nil || opts.Replicas != 2 || got.Labels["tier"] != "egress" {
							return fmt.Errorf("after the update the cluster holds replicas %+v and labels %v, want 2 and tier=egress", opts, got.Labels)
						}
						left, err := env.cluster.Labelled(context.Background(), "tier", "egress")
						if err != nil {
							return err
						}
						for _, kind := range []string{"Deployment", "ConfigMap", "Secret", "Service", "NetworkPolicy"} {
							if want := fmt.Sprintf("%s %s/%s", kind, id.Scope, id.Name); !slices.Contains(left, want) {
								return fmt.Errorf("%s lacks the new label; only these carry it: %s", want, strings.Join(left, ", "))
							}
						}
						return nil
					},
					k8sCheckServes(t, env, "k8s", &address,
						k8sRequest{url: "http://" + k8sOther + "/", credentials: credentials, status: "200"},
					),
				),
			},
			{
				// The Deployment is deleted behind Terraform's back (its ConfigMap, Secret, Service and
				// NetworkPolicy go with it): the next plan creates the proxy again.
				PreConfig: func() {
					if err := env.cluster.DeleteDeployment(context.Background(), id.Scope, id.Name); err != nil {
						t.Fatalf("deleting Deployment %s/%s behind terraform's back: %v", id.Scope, id.Name, err)
					}
				},
				Config: config(k8sOther, true),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.k8s", plancheck.ResourceActionCreate),
				}},
				Check: resource.ComposeTestCheckFunc(
					func(s *terraform.State) error {
						var err error
						id, err = idForms.Parse(s.RootModule().Resources["egress_proxy.k8s"].Primary.ID)
						return err
					},
					k8sCheckServes(t, env, "k8s", nil,
						k8sRequest{url: "http://" + k8sOther + "/", credentials: credentials, status: "200"},
						k8sRequest{url: "http://" + k8sOther + "/", status: "407"},
					),
				),
			},
		},
	})
}

// TLS to the proxy on the cluster: the certificate and key reach the pod through the proxy's Secret, proxy_url
// says https://, and a client that trusts the certificate gets its answers over TLS from the Service. A client
// speaking plain HTTP to the same port gets none: the port is TLS only.
func TestAccProxyKubernetes_tlsListener(t *testing.T) {
	env := k8sAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	cert, key := testutil.SelfSignedPEM(t, k8sTLSName)
	certFile := filepath.Join(t.TempDir(), "proxy.pem")
	if err := os.WriteFile(certFile, []byte(cert), 0o600); err != nil {
		t.Fatal(err)
	}
	credentials := k8sUser + ":" + k8sPass
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { k8sAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             k8sCheckNothingLabelled(env, owner),
		Steps: []resource.TestStep{{
			Config: k8sProviderBlock(t, env, owner, "default") + fmt.Sprintf(`
resource "egress_proxy" "tls" {
  kubernetes            = { cluster = "test", namespace = "default" }
  allowed_client_cidrs  = ["10.244.0.0/16", "172.31.255.0/24"]
  allowed_destinations  = [%q]
  allowed_private_cidrs = [%q]
  auth = { username = %q, password = %q }
  tls  = { certificate_pem = %q, private_key_pem = %q }
}
`, k8sOrigin, k8sOriginCIDR, k8sUser, k8sPass, cert, key),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("egress_proxy.tls", tfjsonpath.New("proxy_url"),
					knownvalue.StringRegexp(regexp.MustCompile(`^https://egress-[0-9a-f]{16}\.default\.svc:3128$`))),
			},
			Check: k8sCheckServes(t, env, "tls", nil,
				k8sRequest{url: "http://" + k8sOrigin + "/", credentials: credentials, status: "200", viaTLS: certFile},
				k8sRequest{url: "http://" + k8sOther + "/", credentials: credentials, status: "403", viaTLS: certFile},
				k8sRequest{url: "http://" + k8sOrigin + "/", status: "407", viaTLS: certFile},
				k8sRequest{url: "http://" + k8sOrigin + "/", credentials: credentials, status: "000"},
			),
		}},
	})
}
