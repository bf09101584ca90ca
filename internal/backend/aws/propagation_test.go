package aws

import (
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// TestCreateWaitsForWhatWasJustMade: what Create (or the user's apply) made moments ago can be unknown to
// EC2 for a while (issue 35, item 8): the proxy's new security group (ec2fake R46), its new Elastic IP (R47),
// an instance profile IAM has just made (R48). Create retries each until EC2 knows it; past the bound, the
// error is Permanent and says what to check. The fake hides each object from a count of calls, so the test
// waits for nothing.
func TestCreateWaitsForWhatWasJustMade(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		opts    ec2fake.Options
		profile int // launches that do not see the instance profile yet
		static  bool
		what    string
	}{
		"a new security group":       {opts: ec2fake.Options{Timing: &ec2fake.Timing{PendingPolls: 1, UnseenGroupCalls: 3}}, what: "security group"},
		"a new Elastic IP":           {opts: ec2fake.Options{Timing: &ec2fake.Timing{PendingPolls: 1, UnseenAddressCalls: 3}}, static: true, what: "Elastic IP"},
		"an instance profile of now": {profile: 3, what: "instance profile"},
	} {
		for _, bounded := range []bool{false, true} {
			t.Run(name+map[bool]string{false: "", true: ", past the bound"}[bounded], func(t *testing.T) {
				t.Parallel()
				fake, b := newTest(t, tc.opts)
				spec := testSpec(fake, "fresh")
				o, err := backend.OptionsOf[Options](spec.Placement)
				if err != nil {
					t.Fatal(err)
				}
				o.StaticEgressIP = tc.static
				spec.Placement.Options = o
				if tc.profile > 0 {
					fake.NewInstanceProfile(o.IAMInstanceProfile, tc.profile)
				}
				if bounded {
					b.propagation = 0
				}
				in, err := b.Create(t.Context(), spec)
				if !bounded {
					if err != nil {
						t.Fatalf("Create: %v", err)
					}
					if tc.static && in.EgressAddress == "" {
						t.Errorf("no egress address: the Elastic IP was not attached")
					}
					return
				}
				if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(backend.AdviceOf(err), "still did not know the "+tc.what) {
					t.Fatalf("Create past the bound = %v (class %s, advice %q), want Permanent with advice on the %s", err, backend.ClassOf(err), backend.AdviceOf(err), tc.what)
				}
			})
		}
	}
}
