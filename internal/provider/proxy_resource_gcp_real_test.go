package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"golang.org/x/oauth2"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
)

// The gcp lifecycle on a real Compute Engine project, which the fake cannot stand in for: the stock Debian
// image running the startup script, guest attributes, the firewall, a static address, and billing. It runs
// when GOOGLE_PROJECT, credentials and EGRESS_TEST_GCP_CLIENT_CIDR are set, and skips with one line otherwise.
//
// It makes, for about ten minutes: one e2-small VM (then its e2-medium replacement), a static external
// address, and an ingress firewall rule admitting the test machine's address to the proxy port on the VM's
// network tag; everything is deleted at the end, and the test checks that nothing carrying its owner label is
// left. The test machine reaches the proxy over the internet, on its external address.
//
//	GOOGLE_PROJECT=my-project GOOGLE_APPLICATION_CREDENTIALS=key.json \
//	EGRESS_TEST_GCP_CLIENT_CIDR=$(curl -s https://checkip.amazonaws.com)/32 make testacc TESTARGS='-run TestAccProxyGCP_realProject'
//
// GOOGLE_ZONE picks the zone (us-central1-a by default).

const realGCPSkip = "real Compute Engine project not configured: set GOOGLE_PROJECT, credentials (GOOGLE_APPLICATION_CREDENTIALS, " +
	"GOOGLE_CREDENTIALS or GOOGLE_OAUTH_ACCESS_TOKEN) and EGRESS_TEST_GCP_CLIENT_CIDR (this machine's public address, /32) to run it; it bills a few cents"

// realGCPOptions are the test's own client options, from the same environment the provider reads.
func realGCPOptions() []option.ClientOption {
	if token := stringOrEnv(types.StringNull(), gcpAccessTokenEnvVars); token != "" {
		return []option.ClientOption{option.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token, TokenType: "Bearer"}))}
	}
	if c := os.Getenv("GOOGLE_CREDENTIALS"); c != "" {
		if strings.HasPrefix(strings.TrimSpace(c), "{") {
			return []option.ClientOption{option.WithCredentialsJSON([]byte(c))} //nolint:staticcheck // the tester's own credentials
		}
		return []option.ClientOption{option.WithCredentialsFile(c)} //nolint:staticcheck // as above
	}
	return nil // GOOGLE_APPLICATION_CREDENTIALS: Application Default Credentials
}

func TestAccProxyGCP_realProject(t *testing.T) {
	project := stringOrEnv(types.StringNull(), gcpProjectEnvVars)
	creds := stringOrEnv(types.StringNull(), append(append([]string{}, gcpCredentialsEnvVars...), gcpAccessTokenEnvVars...))
	clientCIDR := os.Getenv("EGRESS_TEST_GCP_CLIENT_CIDR")
	if project == "" || creds == "" || clientCIDR == "" {
		t.Skip(realGCPSkip)
	}
	if _, _, err := net.ParseCIDR(clientCIDR); err != nil {
		t.Fatalf("EGRESS_TEST_GCP_CLIENT_CIDR: %v", err)
	}
	zone := os.Getenv("GOOGLE_ZONE")
	if zone == "" {
		zone = gcp.DefaultZone
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	name := "egress-real-" + hex.EncodeToString(suffix)
	owner := "acc-" + hex.EncodeToString(suffix)
	secret := make([]byte, 12)
	_, _ = rand.Read(secret)
	password := hex.EncodeToString(secret)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()

	allowFirewall(ctx, t, project, name, clientCIDR)

	config := func(machineType string, destinations ...string) string {
		return fmt.Sprintf(`
provider "egress" {
  owner = %q
  gcp   = { project = %q, default_zone = %q }
}
resource "egress_proxy" "test" {
  name                 = %q
  gcp                  = { static_egress_ip = true, wait_for_proxy = true, network_tags = [%q], machine_type = %q }
  allowed_client_cidrs = [%q]
  allowed_destinations = [%s]
  auth                 = { username = "acc", password = %q }
  timeouts             = { create = "20m", update = "10m", delete = "10m" }
}
`, owner, project, zone, name, name, machineType, clientCIDR, `"`+strings.Join(destinations, `", "`)+`"`, password)
	}
	through := func(target string, want int) resource.TestCheckFunc {
		return func(s *terraform.State) error {
			rs := s.RootModule().Resources["egress_proxy.test"].Primary
			return proxiedGet(ctx, rs.Attributes["egress_address"], "acc", password, target, want)
		}
	}
	sameEgress := statecheck.CompareValue(compare.ValuesSame())
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		CheckDestroy:             nothingLeft(ctx, owner),
		Steps: []resource.TestStep{
			{
				// The VM boots the stock image, installs Squid and reports through a guest attribute.
				Config: config("e2-small", "example.com"),
				ConfigStateChecks: []statecheck.StateCheck{
					sameEgress.AddStateValue("egress_proxy.test", tfjsonpath.New("egress_address")),
				},
				Check: resource.ComposeTestCheckFunc(through("http://example.com/", http.StatusOK), through("http://example.org/", http.StatusForbidden)),
			},
			{
				// A rule change in place: the same VM, the new rule enforced when the apply returns.
				Config:           config("e2-small", "example.com", "example.org"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate)}},
				Check:            through("http://example.org/", http.StatusOK),
			},
			{
				// A replacement keeps the reserved egress address.
				Config:           config("e2-medium", "example.com", "example.org"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionDestroyBeforeCreate)}},
				ConfigStateChecks: []statecheck.StateCheck{
					sameEgress.AddStateValue("egress_proxy.test", tfjsonpath.New("egress_address")),
				},
				Check: through("http://example.com/", http.StatusOK),
			},
		},
	})
}

// allowFirewall admits the client to the proxy port on VMs tagged tag, for the test's life: the provider makes
// no firewall rules, users do.
func allowFirewall(ctx context.Context, t *testing.T, project, tag, clientCIDR string) {
	t.Helper()
	fw, err := compute.NewFirewallsRESTClient(ctx, realGCPOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fw.Close() })
	op, err := fw.Insert(ctx, &computepb.InsertFirewallRequest{Project: project, FirewallResource: &computepb.Firewall{
		Name: proto.String(tag), Network: proto.String(gcp.DefaultNetwork), Direction: proto.String("INGRESS"),
		SourceRanges: []string{clientCIDR}, TargetTags: []string{tag},
		Allowed:     []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"3128"}}},
		Description: proto.String("egress provider acceptance test; deleted at its end"),
	}})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err != nil {
		t.Fatalf("making firewall rule %s: %v", tag, err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		op, err := fw.Delete(cctx, &computepb.DeleteFirewallRequest{Project: project, Firewall: tag})
		if err == nil {
			err = op.Wait(cctx)
		}
		if err != nil {
			t.Errorf("deleting firewall rule %s: %v (delete it by hand)", tag, err)
		}
	})
}

// proxiedGet asks for target through the proxy at address:3128 until it answers want: a firewall rule takes
// a moment to apply, which is the only thing waited out.
func proxiedGet(ctx context.Context, address, user, password, target string, want int) error {
	if address == "" {
		return errors.New("egress_address is empty")
	}
	proxy := &url.URL{Scheme: "http", Host: net.JoinHostPort(address, "3128"), User: url.UserPassword(user, password)}
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}, Timeout: 30 * time.Second}
	var last string
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
		}
	}
	return fmt.Errorf("%s through the proxy at %s: %s, want %d", target, address, last, want)
}

// nothingLeft checks, through the backend's own aggregated lists, that no instance and no address carrying the
// test's owner label is left in the project.
func nothingLeft(ctx context.Context, owner string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		b, err := gcp.New(gcpBackendConfig(&gcpProviderModel{}))
		if err != nil {
			return err
		}
		defer func() { _ = b.Close() }()
		left, err := b.ListByTag(ctx, backend.Selector{Owner: owner})
		if err != nil {
			return err
		}
		if len(left) > 0 {
			var ids []string
			for _, in := range left {
				ids = append(ids, in.ID.String())
			}
			return fmt.Errorf("left after destroy: %s", strings.Join(ids, ", "))
		}
		return nil
	}
}
