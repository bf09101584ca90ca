package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"golang.org/x/crypto/bcrypt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	k8sguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// A kubernetes proxy with a write-only password and a write-only TLS key, on the real cluster, its password
// then rotated in place (a rollout: the old pod terminates with a termination message). Everything a reader
// without access to Secrets can see in the proxy's namespace holds none of the secrets: every object of every
// kind the API server lists there (ConfigMaps, every object's labels and annotations, pod specs and env, pod
// status), every version of its pods and events seen while the test ran (termination messages included), and
// so do the state, the plan and every line of the CLI's and the provider's TRACE log. The secrets: the
// passwords, the htpasswd hashes the backend wrote (any bcrypt hash, in fact), the key's body and any PRIVATE
// KEY block. The proxy serves with them, so they did reach the pod, through the Secret.
func TestAccProxyKubernetes_secretsOnlyInTheSecret(t *testing.T) {
	env := k8sAccPreCheck(t)
	logFile := traceLogTo(t)
	owner := "sec-" + uuid.NewString()[:8]
	ns := env.cluster.Namespace(t, "acc-secrets")
	recording := env.cluster.Record(t, ns)
	cert, key := testutil.SelfSignedPEM(t, k8sTLSName)
	certFile := filepath.Join(t.TempDir(), "proxy.pem")
	if err := os.WriteFile(certFile, []byte(cert), 0o600); err != nil {
		t.Fatal(err)
	}
	password := func(v int) string { return fmt.Sprintf("k8s-surface-password-v%d-%s", v, owner) }
	config := func(passwordVersion int) string {
		return k8sProviderBlock(t, env, owner, ns) + fmt.Sprintf(`
resource "egress_proxy" "sec" {
  kubernetes            = { cluster = "test", namespace = %q }
  allowed_client_cidrs  = ["10.244.0.0/16", "172.31.255.0/24"]
  allowed_destinations  = [%q]
  allowed_private_cidrs = [%q]
  auth = {
    username            = %q
    password_wo         = %q
    password_wo_version = %d
  }
  tls = {
    certificate_pem            = %s
    private_key_pem_wo         = %s
    private_key_pem_wo_version = 1
  }
}
`, ns, k8sOrigin, k8sOriginCIDR, k8sUser, password(passwordVersion), passwordVersion, strconv.Quote(cert), strconv.Quote(key))
	}
	// Every secret the test made; the hashes the backend wrote are found by bcryptHash wherever they are.
	scan := secretScan{secrets: append([]string{password(1), password(2), "PRIVATE KEY"}, keyBodyLines(t, key)...)}
	var id backend.ProviderID
	// The Secret holds what the pod needs, which also proves the bcrypt search would find the hash elsewhere.
	secretHoldsThem := func(passwordVersion int) resource.TestCheckFunc {
		return func(s *terraform.State) error {
			var err error
			if id, err = idForms.Parse(s.RootModule().Resources["egress_proxy.sec"].Primary.ID); err != nil {
				return err
			}
			data, err := env.cluster.SecretData(context.Background(), ns, id.Name)
			if err != nil {
				return err
			}
			user, hash, _ := strings.Cut(strings.TrimSpace(string(data[k8sguest.SecretKey])), ":")
			if user != k8sUser || !bcryptHash.MatchString(hash) || bcrypt.CompareHashAndPassword([]byte(hash), []byte(password(passwordVersion))) != nil {
				return fmt.Errorf("Secret %s/%s does not hold the hash of password %d", ns, id.Name, passwordVersion)
			}
			if string(data[k8sguest.TLSKeyKey]) != key {
				return fmt.Errorf("Secret %s/%s does not hold the key", ns, id.Name)
			}
			return nil
		}
	}
	// scanCluster reads the namespace as a reader without access to Secrets would, and what the recording
	// kept of pods and events since the test began.
	scanCluster := func(*terraform.State) error {
		readable, err := env.cluster.Readable(context.Background(), ns)
		if err != nil {
			return err
		}
		// The scan must see the proxy's own objects, or it would prove nothing.
		for _, want := range []string{"configmaps. " + id.Name, "deployments.apps " + id.Name, "services. " + id.Name, "secrets. " + id.Name} {
			if _, ok := readable[want]; !ok {
				return fmt.Errorf("the scan of %s lacks %s; it found %d objects", ns, want, len(readable))
			}
		}
		texts := map[string]string{}
		for k, v := range readable {
			texts["object "+k] = v
		}
		for k, v := range recording.Versions() {
			texts["recorded "+k] = v
		}
		where := make([]string, 0, len(texts))
		for k := range texts {
			where = append(where, k)
		}
		sort.Strings(where)
		for _, w := range where {
			if err := scan.find(w+" in namespace "+ns, texts[w]); err != nil {
				return err
			}
		}
		t.Logf("scanned %d objects and %d recorded versions of pods and events in %s", len(readable), len(texts)-len(readable), ns)
		return nil
	}
	// A rollout ends the old pod, whose termination message (Squid's cache log) the recording must have seen,
	// or the scan would not cover that surface.
	sawTermination := func(*terraform.State) error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		select {
		case <-recording.Terminated():
		case <-ctx.Done():
			return fmt.Errorf("no pod of %s terminated with a message within 3 minutes of the rollout", ns)
		}
		return scanCluster(nil)
	}
	serves := func(passwordVersion int) resource.TestCheckFunc {
		return k8sCheckServes(t, env, "sec", nil,
			k8sRequest{url: "http://" + k8sOrigin + "/", credentials: k8sUser + ":" + password(passwordVersion), status: "200", viaTLS: certFile},
			k8sRequest{url: "http://" + k8sOrigin + "/", status: "407", viaTLS: certFile},
		)
	}
	planChecks := func(action plancheck.ResourceActionType) resource.ConfigPlanChecks {
		return resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.sec", action), scan.inPlan()}}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { k8sAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             k8sCheckNothingLabelled(env, owner),
		Steps: []resource.TestStep{
			{
				Config:           config(1),
				ConfigPlanChecks: planChecks(plancheck.ResourceActionCreate),
				Check:            resource.ComposeTestCheckFunc(secretHoldsThem(1), scan.inState, serves(1), scanCluster),
			},
			{
				// A new password, in place: new Secret data, a new ConfigMap annotation, a rollout.
				Config:           config(2),
				ConfigPlanChecks: planChecks(plancheck.ResourceActionUpdate),
				Check:            resource.ComposeTestCheckFunc(secretHoldsThem(2), scan.inState, serves(2), sawTermination),
			},
		},
	})
	scan.inTraceLog(t, logFile, "kubernetes/test/"+ns+"/")
}
