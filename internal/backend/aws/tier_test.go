package aws

import (
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// TestOverwriteKeepsTheTier: a parameter that once needed the Advanced tier is overwritten with a value that
// would fit Standard (a proxy whose rules shrink): the write keeps it Advanced, as SSM refuses a downgrade
// (ec2fake R29), instead of failing the update (issue 35, item 7).
func TestOverwriteKeepsTheTier(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	spec := testSpec(fake, "shrinks")
	r, o, err := b.resolve(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	for i, size := range []int{5000, 100} {
		p := parameters{config: []byte(strings.Repeat("c", size)), secrets: []byte(`{"config_key":"k"}`)}
		if err := b.putParameters(t.Context(), r, spec, newStoredSpec(spec.Proxy, o, p), p); err != nil {
			t.Fatalf("write %d (%d bytes): %v", i, size, err)
		}
	}
	got, ok := fake.Parameter(testRegion, guest.ParameterPath(spec.Name, guest.ParameterConfig))
	if !ok || got.Tier != "Advanced" || len(got.Value) != 100 {
		t.Errorf("the config parameter after the small write: tier %q, %d bytes, want Advanced and 100", got.Tier, len(got.Value))
	}
}
