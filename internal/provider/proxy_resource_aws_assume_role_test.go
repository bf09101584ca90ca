package provider

import (
	"fmt"
	"regexp"
	"slices"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// The aws block's assume_role against the fake's STS: the provider signs with the configured keys only to
// assume the role, and everything else (the health check's caller identity, EC2, SSM) with the role
// session's temporary credentials.

// awsDeployerRole is the role the tests assume, and the external id its trust policy asks for.
const (
	awsDeployerRole       = "egress-deployer"
	awsDeployerExternalID = "ext-7d1e-acc"
)

// awsAssumeRoleConfig is awsConfig with an assume_role block of externalID, and egress_backends.
func awsAssumeRoleConfig(t *testing.T, fake *ec2fake.Server, externalID, resources string) string {
	t.Helper()
	assumeRole := fmt.Sprintf(`assume_role = { role_arn = %q, session_name = "egress-acc", external_id = %q }`, fake.RoleARN(awsDeployerRole), externalID)
	return awsProviderConfig(t, fake, "team-a", "", assumeRole) + "data \"egress_backends\" \"all\" {}\n" + resources
}

func TestAccProxyAWS_assumeRole(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{Roles: []ec2fake.Role{{Name: awsDeployerRole, ExternalID: awsDeployerExternalID}}})
	assumed := "arn:aws:sts::" + fake.AccountID() + ":assumed-role/" + awsDeployerRole + "/egress-acc"
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		CheckDestroy: func(*terraform.State) error {
			if n := len(liveInstances(fake)); n != 0 {
				return fmt.Errorf("%d instances left after destroy", n)
			}
			return awsSignedByRoleOnly(fake)
		},
		Steps: []resource.TestStep{{
			Config: awsAssumeRoleConfig(t, fake, awsDeployerExternalID, awsProxy(fake, `team = "net"`, ".example.com", "t3.micro")),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectPartial(map[string]knownvalue.Check{
						"backend": knownvalue.StringExact("aws"), "target": knownvalue.StringExact(awsTestRegion),
						"healthy": knownvalue.Bool(true), "reason": knownvalue.StringExact(backend.HealthHealthy),
						"details": knownvalue.MapPartial(map[string]knownvalue.Check{
							"arn":     knownvalue.StringExact(assumed),
							"account": knownvalue.StringExact(fake.AccountID()),
						}),
					}),
				})),
				statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("state"), knownvalue.StringExact("Running")),
			},
			Check: func(*terraform.State) error {
				sessions := fake.Sessions()
				if len(sessions) == 0 {
					return fmt.Errorf("the provider opened no role session")
				}
				for _, s := range sessions {
					if s.RoleARN != fake.RoleARN(awsDeployerRole) || s.SessionName != "egress-acc" || s.AssumedRoleARN != assumed {
						return fmt.Errorf("session %+v: want role %s, session egress-acc", s, fake.RoleARN(awsDeployerRole))
					}
				}
				// The proxy was launched with the session's credentials.
				var launches int
				for _, r := range fake.Requests() {
					if r.Action == "RunInstances" && r.Code == "" {
						launches++
						if !isSessionKey(sessions, r.AccessKey) {
							return fmt.Errorf("RunInstances signed with %s, not with a role session's key (%v)", r.AccessKey, sessions)
						}
					}
				}
				if launches != 1 || len(liveInstances(fake)) != 1 {
					return fmt.Errorf("%d launches, %d instances: want 1 of each", launches, len(liveInstances(fake)))
				}
				return awsSignedByRoleOnly(fake)
			},
		}},
	})
}

// awsSignedByRoleOnly checks that the configured keys signed nothing but AssumeRole: every other request,
// on every service, carried a role session's key.
func awsSignedByRoleOnly(fake *ec2fake.Server) error {
	sessions := fake.Sessions()
	creds := ec2fake.DefaultAccessKeyID
	for _, r := range fake.Requests() {
		switch {
		case r.Action == "AssumeRole" && r.AccessKey != creds:
			return fmt.Errorf("AssumeRole signed with %s, want the configured key %s", r.AccessKey, creds)
		case r.Action != "AssumeRole" && !isSessionKey(sessions, r.AccessKey):
			return fmt.Errorf("%s %s signed with %s, not with a role session's key", r.Service, r.Action, r.AccessKey)
		}
	}
	return nil
}

// isSessionKey reports whether key is one of the sessions' access keys.
func isSessionKey(sessions []ec2fake.Session, key string) bool {
	return slices.ContainsFunc(sessions, func(s ec2fake.Session) bool { return s.AccessKeyID == key })
}

// A role whose trust policy asks for another external id: STS refuses, and egress_backends reports the
// region unauthorized with STS's words, without a session or any EC2 call.
func TestAccProxyAWS_assumeRoleRefused(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{Roles: []ec2fake.Role{{Name: awsDeployerRole, ExternalID: awsDeployerExternalID}}})
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		Steps: []resource.TestStep{{
			Config: awsAssumeRoleConfig(t, fake, "ext-not-the-one", ""),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectPartial(map[string]knownvalue.Check{
						"target": knownvalue.StringExact(awsTestRegion), "healthy": knownvalue.Bool(false),
						"reason": knownvalue.StringExact(backend.HealthUnauthorized),
						"details": knownvalue.MapPartial(map[string]knownvalue.Check{
							backend.DetailMessage: knownvalue.StringRegexp(regexp.MustCompile(`AccessDenied.*not authorized to perform: sts:AssumeRole on resource: ` +
								regexp.QuoteMeta(fake.RoleARN(awsDeployerRole)))),
						}),
					}),
				})),
			},
			Check: func(*terraform.State) error {
				if n := len(fake.Sessions()); n != 0 {
					return fmt.Errorf("%d role sessions opened with a wrong external id", n)
				}
				for _, r := range fake.Requests() {
					if r.Service != "sts" {
						return fmt.Errorf("%s %s was sent without a role session", r.Service, r.Action)
					}
				}
				return nil
			},
		}},
	})
}
