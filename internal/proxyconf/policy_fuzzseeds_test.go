package proxyconf_test

import (
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/proxyconftest"
)

// TestPolicyFuzzSeedsReachEveryMode: the seeds of FuzzPolicyDecisions that pass validation between them render
// report and enforce rule sets of each kind of client, a deny list and a proxy without a policy, and the others
// are refused, so a plain `go test` runs the oracle over every part of the policy.
func TestPolicyFuzzSeedsReachEveryMode(t *testing.T) {
	t.Parallel()
	reached := map[string]bool{}
	valid := 0
	for _, seed := range proxyconftest.PolicyFuzzSeeds {
		s := seed.Settings()
		if err := s.Validate(); err != nil {
			t.Logf("seed %q refused: %v", seed.Name, err)
			continue
		}
		valid++
		reached["no policy"] = reached["no policy"] || (len(s.RuleSets) == 0 && len(s.DeniedDestinations) == 0)
		reached["deny list"] = reached["deny list"] || len(s.DeniedDestinations) > 0
		for _, r := range s.RuleSets {
			mode := "enforce"
			if r.Mode == proxyconf.RuleSetReport {
				mode = "report"
			}
			reached[mode+" by range"] = reached[mode+" by range"] || len(r.Clients.SourceCIDRs) > 0
			reached[mode+" by user"] = reached[mode+" by user"] || len(r.Clients.Users) > 0
			reached[mode+" by certificate"] = reached[mode+" by certificate"] || len(r.Clients.CertificateSubjects) > 0
		}
	}
	if invalid := len(proxyconftest.PolicyFuzzSeeds) - valid; invalid < 4 {
		t.Errorf("%d seeds are refused, want the 4 made to be", invalid)
	}
	for _, mode := range []string{"no policy", "deny list", "enforce by range", "enforce by user", "enforce by certificate", "report by range", "report by user", "report by certificate"} {
		if !reached[mode] {
			t.Errorf("no valid seed renders %s", mode)
		}
	}
}
