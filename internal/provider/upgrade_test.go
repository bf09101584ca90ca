package provider

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
)

// The upgrade tests: a proxy made by the baseline provider (testdata/upgrade-baseline: a recorded commit, later
// the latest release) is left alone by HEAD. Each runs three steps on one state:
//
//  1. the baseline, installed from a filesystem mirror like a released provider, applies a configuration that
//     sets what a user sets: rules, auth with a write-only password, labels, and tls where the backend has it;
//  2. HEAD, served in-process, plans the same configuration: the plan is empty (PlanOnly fails on any change);
//  3. HEAD applies it: the plan is empty again, and the backend saw no call that changes anything, and still
//     holds the very objects the baseline made.
//
// Step 2 is what a user runs first after `terraform init -upgrade`; step 3 is the apply that follows, which
// must not touch a running proxy (a Read that rewrote something would show only there).

// upgradeBaselineFile records the baseline's commit; scripts/build-baseline.sh builds it.
const upgradeBaselineFile = "testdata/upgrade-baseline"

// upgradeBaselineCommit is the commit recorded in upgradeBaselineFile: its first line that is not a comment.
func upgradeBaselineCommit(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(upgradeBaselineFile)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return line
		}
	}
	t.Fatalf("%s records no commit", upgradeBaselineFile)
	return ""
}

// baselineProvider builds the baseline once (scripts/build-baseline.sh: cached, so a run after `make
// test-provider`'s prerequisite, or a second test, finds it at once) and points the CLI at its mirror for this
// test: the egress provider is installed from there, at the baseline's version, and from nowhere else. Steps
// that use it name the returned ExternalProviders; steps of HEAD name ProtoV6ProviderFactories, whose reattached
// provider the CLI prefers over any installed one.
//
// The CLI configuration is an environment variable, so an upgrade test cannot run in parallel with others (the
// testing package refuses t.Setenv in a parallel test): it runs among the package's sequential tests.
func baselineProvider(t *testing.T) map[string]resource.ExternalProvider {
	t.Helper()
	// Before the build, which takes minutes cold: without TF_ACC, resource.Test would skip the test anyway.
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1")
	}
	commit := upgradeBaselineCommit(t)
	cmd := exec.Command("../../scripts/build-baseline.sh", commit)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("building the baseline provider at %s: %v", commit, err)
	}
	mirror := strings.TrimSpace(string(out))
	version := "0.0.0-baseline-" + commit[:min(12, len(commit))]
	const address = "registry.terraform.io/egress-proxies/egress"
	cliConfig := filepath.Join(t.TempDir(), "upgrade.tfrc")
	rc := fmt.Sprintf(`provider_installation {
  filesystem_mirror {
    path    = %q
    include = [%q]
  }
  direct {
    exclude = [%q]
  }
}
`, mirror, address, address)
	if err := os.WriteFile(cliConfig, []byte(rc), 0o600); err != nil {
		t.Fatal(err)
	}
	// OpenTofu reads TOFU_CLI_CONFIG_FILE before TF_CLI_CONFIG_FILE: set both, as scripts/provider-mirror.sh does.
	t.Setenv("TF_CLI_CONFIG_FILE", cliConfig)
	t.Setenv("TOFU_CLI_CONFIG_FILE", cliConfig)
	return map[string]resource.ExternalProvider{"egress": {Source: address, VersionConstraint: "= " + version}}
}

// upgradeSteps are the three steps above for config. settled runs once the baseline is done (its apply and the
// plan that follows it), right before HEAD's first call, and marks the backend's state (what the fake holds,
// its request log's length); unchanged runs after HEAD's apply and checks that nothing changed since the mark,
// so whatever it finds, HEAD did.
func upgradeSteps(t *testing.T, config string, settled func() error, unchanged func() error) []resource.TestStep {
	t.Helper()
	baseline := baselineProvider(t)
	return []resource.TestStep{
		{
			ExternalProviders: baseline,
			Config:            config,
		},
		{
			PreConfig: func() {
				if err := settled(); err != nil {
					t.Fatalf("after the baseline's apply: %v", err)
				}
			},
			ProtoV6ProviderFactories: gcpProviderFactories(), // the real backends, as every backend's tests use them
			Config:                   config,
			PlanOnly:                 true,
		},
		{
			ProtoV6ProviderFactories: gcpProviderFactories(),
			Config:                   config,
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectEmptyPlan(),
			}},
			Check: func(*terraform.State) error { return unchanged() },
		},
	}
}

// writeOnlyAuth is the auth block of the upgrade configurations: a write-only password, the form the docs
// recommend, so that HEAD plans over a state that holds only its version.
func writeOnlyAuth(password string, version int) string {
	return fmt.Sprintf(`auth = {
    username            = "u"
    password_wo         = %q
    password_wo_version = %d
  }`, password, version)
}

// writeOnlyTLS is the tls block of the upgrade configurations, with a write-only key.
func writeOnlyTLS(certPEM, keyPEM string) string {
	return fmt.Sprintf(`tls = {
    certificate_pem            = %s
    private_key_pem_wo         = %s
    private_key_pem_wo_version = 1
  }`, strconv.Quote(certPEM), strconv.Quote(keyPEM))
}

// upgradeRules are the rules every upgrade configuration sets, each one of the rule attributes.
const upgradeRules = `allowed_client_cidrs       = ["10.0.0.0/8", "192.168.0.0/16"]
  allowed_destinations       = [".example.com", "api.example.org"]
  allowed_ports              = [443, 8443]
  allowed_private_cidrs      = ["10.20.0.0/16"]
  max_connections_per_client = 64
  labels                     = { team = "net", env = "prod" }`

// changedSince lists what differs between two descriptions of a backend's objects, each a map from an
// object's name to its description.
func changedSince(before, after map[string]string) []string {
	var changed []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			changed = append(changed, k+": gone")
		} else if v != w {
			changed = append(changed, fmt.Sprintf("%s:\n  was %s\n  now %s", k, v, w))
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			changed = append(changed, k+": new")
		}
	}
	slices.Sort(changed)
	return changed
}
