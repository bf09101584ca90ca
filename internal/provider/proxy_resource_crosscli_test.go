package provider

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
)

// A state written by a CLI without resource identity (Terraform before 1.12), planned after drift by a CLI
// with it (OpenTofu 1.12): the plan must recreate the proxy, not fail with "Missing Resource Identity After
// Read". The CLIs are the two the acceptance suite runs on; `make testacc` names both.
func TestAccProxy_identityLessStateDriftPlannedByNewerCLI(t *testing.T) {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1")
	}
	older, newer := os.Getenv("EGRESS_TEST_TERRAFORM"), os.Getenv("EGRESS_TEST_TOFU")
	if newer == "" {
		t.Fatal("EGRESS_TEST_TOFU must name OpenTofu 1.12: `make testacc` sets it")
	}
	if older == "" {
		// Terraform is optional on a developer's machine; `make testacc` says so in one line when it is missing.
		t.Skip("EGRESS_TEST_TERRAFORM names no Terraform before 1.12: `make testacc TERRAFORM=/path/to/terraform` runs this test")
	}
	if v, err := cliVersion(older); err != nil || !v.LessThan(version1_12) {
		t.Fatalf("EGRESS_TEST_TERRAFORM must be a CLI before 1.12, one that writes no resource identity (got %v, %v)", v, err)
	}
	mem := newMemoryBackends()
	reattach := serveForCLI(t, mem)

	dir := t.TempDir()
	config := `terraform {
  required_providers {
    egress = { source = "registry.terraform.io/egress-proxies/egress" }
  }
}
` + proxyConfig(`  kvm = { host = "hv1" }
  allowed_client_cidrs = ["10.0.0.0/8"]`)
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cliConfig := filepath.Join(dir, "cli.tfrc")
	if err := os.WriteFile(cliConfig, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "TF_REATTACH_PROVIDERS="+reattach, "TF_CLI_CONFIG_FILE="+cliConfig,
		"TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1", "TF_LOG=")
	run := func(cli string, args ...string) (string, error) {
		cmd := exec.Command(cli, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, step := range [][]string{{"init", "-no-color"}, {"apply", "-auto-approve", "-no-color"}} {
		if out, err := run(older, step...); err != nil {
			t.Fatalf("%s %s: %v\n%s", older, step[0], err, out)
		}
	}
	state, err := os.ReadFile(filepath.Join(dir, "terraform.tfstate"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(state), `"identity"`) {
		t.Fatalf("the older CLI wrote a resource identity; this test needs a state without one:\n%s", state)
	}

	instances := mem[kvm.Kind].Instances()
	if len(instances) != 1 {
		t.Fatalf("the apply made %d instances, want 1", len(instances))
	}
	mem[kvm.Kind].Remove(instances[0].ID)

	out, err := run(newer, "plan", "-detailed-exitcode", "-no-color")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("%s plan after drift: want exit code 2 (changes), got %v\n%s", newer, err, out)
	}
	if !strings.Contains(out, "egress_proxy.test will be created") {
		t.Errorf("the plan after drift does not recreate the proxy:\n%s", out)
	}
}
