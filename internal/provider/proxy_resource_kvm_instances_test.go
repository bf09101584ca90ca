package provider

import (
	"context"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"
	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// TestAccProxyKVM_instancesRefusedAtPlan: several instances with what cannot serve them is refused by the
// plan, on kvm.instances, before anything is created.
func TestAccProxyKVM_instancesRefusedAtPlan(t *testing.T) {
	for name, tc := range map[string]struct {
		kvm, want string
	}{
		"user_net": {`{ host = "hv1", instances = 2, user_net = true, forward_port = 3128 }`, `Attribute kvm.instances: instances > 1 needs a libvirt network: with user_net`},
		"bridge":   {`{ host = "hv1", instances = 2, bridge = "br0" }`, `Attribute kvm.instances: instances > 1 needs a libvirt network: on a bridge`},
		"ip":       {`{ host = "hv1", instances = 3, ip = "198.18.0.9" }`, `Attribute kvm.instances: instances > 1 takes neither mac nor ip`},
		"mac":      {`{ host = "hv1", instances = 2, mac = "52:54:00:12:34:56" }`, `Attribute kvm.instances: instances > 1 takes neither mac nor ip`},
		"none":     {`{ host = "hv1", instances = 0 }`, `Attribute kvm.instances value must be between 1 and 9`},
		"too many": {`{ host = "hv1", instances = 10 }`, `Attribute kvm.instances value must be between 1 and 9`},
	} {
		t.Run(name, func(t *testing.T) {
			mem := newMemoryBackends()
			tfresource.Test(t, tfresource.TestCase{
				PreCheck:                 func() { testAccPreCheck(t) },
				ProtoV6ProviderFactories: mem.protoV6(),
				Steps: []tfresource.TestStep{{
					Config: proxyConfig(`
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = ["api.example.com"]
  kvm = ` + tc.kvm),
					PlanOnly:    true,
					ExpectError: wrapped(tc.want),
				}},
			})
			for kind, b := range mem {
				if n := b.Calls("create"); n != 0 {
					t.Errorf("%s: create was called %d times", kind, n)
				}
			}
		})
	}
}

// A state written before instances existed holds null: planned against the default of one, it neither
// replaces the proxy (sameInstances) nor shows a change (instancesAddedLater keeps the null); any other
// change of instances replaces it.
func TestKVMInstancesAddedLater(t *testing.T) {
	t.Parallel()
	vals := func(v types.Int64) map[string]attr.Value { return map[string]attr.Value{"instances": v} }
	for name, tc := range map[string]struct {
		prior, planned types.Int64
		same           bool
	}{
		"null to the default": {types.Int64Null(), types.Int64Value(1), true},
		"null to two":         {types.Int64Null(), types.Int64Value(2), false},
		"one to two":          {types.Int64Value(1), types.Int64Value(2), false},
		"null to unknown":     {types.Int64Null(), types.Int64Unknown(), false},
	} {
		if got := sameInstances(context.Background(), vals(tc.prior), vals(tc.planned)); got != tc.same {
			t.Errorf("%s: sameInstances = %v, want %v", name, got, tc.same)
		}
	}
}
