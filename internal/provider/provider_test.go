package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/memory"
)

// memoryBackends stands in for the three real backends: one in-memory Backend per kind, reached through the
// same registry, logging decorator and provider configuration as the real ones.
type memoryBackends map[backend.Kind]*memory.Backend

func newMemoryBackends() memoryBackends {
	m := memoryBackends{}
	for _, k := range backendKinds() {
		m[k] = memory.New(k)
	}
	return m
}

// factories configures exactly the kinds the provider block configures, as defaultFactories does.
func (m memoryBackends) factories(cfg providerModel) map[backend.Kind]backend.Factory {
	out := map[backend.Kind]backend.Factory{}
	for kind := range defaultFactories(cfg) {
		b := m[kind]
		out[kind] = func(context.Context) (backend.Backend, error) { return b, nil }
	}
	return out
}

func (m memoryBackends) protoV6() map[string]func() (tfprotov6.ProviderServer, error) {
	return map[string]func() (tfprotov6.ProviderServer, error){
		"egress": providerserver.NewProtocol6WithError(&egressProvider{version: "test", factories: m.factories}),
	}
}

// testAccPreCheck names what the acceptance environment lacks. `make testacc` sets all of it.
func testAccPreCheck(t *testing.T) {
	t.Helper()
	cli := os.Getenv("TF_ACC_TERRAFORM_PATH")
	if cli == "" {
		t.Fatal("TF_ACC_TERRAFORM_PATH must point at the CLI under test (OpenTofu or Terraform): `make testacc` sets it, `make tofu` prints OpenTofu's path")
	}
	if cliIsOpenTofu(t, cli) && os.Getenv("TF_ACC_PROVIDER_NAMESPACE") != "egress-proxies" {
		t.Fatal("TF_ACC_PROVIDER_NAMESPACE must be egress-proxies when the CLI is OpenTofu: it rejects the legacy default namespace")
	}
}

var cliFlavour = struct {
	sync.Mutex
	tofu map[string]bool
}{tofu: map[string]bool{}}

// cliIsOpenTofu asks the CLI once per path what it is: only OpenTofu needs the provider namespace set.
func cliIsOpenTofu(t *testing.T, cli string) bool {
	t.Helper()
	cliFlavour.Lock()
	defer cliFlavour.Unlock()
	if tofu, ok := cliFlavour.tofu[cli]; ok {
		return tofu
	}
	out, err := exec.Command(cli, "version").Output()
	if err != nil {
		t.Fatalf("TF_ACC_TERRAFORM_PATH=%s does not run: %v", cli, err)
	}
	tofu := strings.HasPrefix(string(out), "OpenTofu")
	cliFlavour.tofu[cli] = tofu
	return tofu
}

func t0ctx() context.Context { return context.Background() }

// wrapped matches pattern in CLI output, where the CLI may break any space into a line break.
func wrapped(pattern string) *regexp.Regexp {
	return regexp.MustCompile(strings.ReplaceAll(pattern, " ", `\s+`))
}

// version1_12 is the first Terraform with resource identity.
var version1_12 = version.Must(version.NewVersion("1.12.0"))

var cliVersions = struct {
	sync.Mutex
	byPath map[string]*version.Version
}{byPath: map[string]*version.Version{}}

// cliVersion is the version of the CLI under test, asked once per path.
func cliVersion(cli string) (*version.Version, error) {
	cliVersions.Lock()
	defer cliVersions.Unlock()
	if v, ok := cliVersions.byPath[cli]; ok {
		return v, nil
	}
	out, err := exec.Command(cli, "version", "-json").Output()
	if err != nil {
		return nil, fmt.Errorf("%s version -json: %w", cli, err)
	}
	var reported struct {
		Version string `json:"terraform_version"`
	}
	if err := json.Unmarshal(out, &reported); err != nil {
		return nil, fmt.Errorf("reading %s version -json: %w", cli, err)
	}
	v, err := version.NewVersion(reported.Version)
	if err != nil {
		return nil, fmt.Errorf("%s reports version %q: %w", cli, reported.Version, err)
	}
	cliVersions.byPath[cli] = v
	return v, nil
}

// skipStepBelow is a per-step tfversion.SkipBelow: the step needs a feature of CLI minimum (resource identity
// needs Terraform 1.12), while the rest of its test holds on older CLIs too.
func skipStepBelow(t *testing.T, minimum *version.Version) func() (bool, error) {
	return func() (bool, error) {
		v, err := cliVersion(os.Getenv("TF_ACC_TERRAFORM_PATH"))
		if err != nil {
			return false, err
		}
		var resp tfversion.CheckTerraformVersionResponse
		tfversion.SkipBelow(minimum).CheckTerraformVersion(context.Background(), tfversion.CheckTerraformVersionRequest{TerraformVersion: v}, &resp)
		if resp.Error != nil {
			return false, resp.Error
		}
		if resp.Skip != "" {
			t.Logf("step skipped on this CLI (%s): %s", v, resp.Skip)
		}
		return resp.Skip != "", nil
	}
}
