package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// keepUnlessPodsMove is UseStateForUnknown for egress_address, except on kubernetes. There the address is
// the one of the nodes the pods run on, and an update in place can move them (new rules roll the pods out, a
// new replica count adds some): a plan that promised the old address would make Terraform reject the apply's
// result as inconsistent, so the plan leaves it unknown instead.
type keepUnlessPodsMove struct{}

var _ planmodifier.String = keepUnlessPodsMove{}

func (keepUnlessPodsMove) Description(context.Context) string {
	return "Keeps the value of the state, except when an update of a kubernetes proxy may move its pods to other nodes."
}

func (m keepUnlessPodsMove) MarkdownDescription(ctx context.Context) string {
	return m.Description(ctx)
}

func (keepUnlessPodsMove) PlanModifyString(ctx context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	// As UseStateForUnknown: nothing to keep on create, nothing to do for a known plan or an unknown config.
	if req.State.Raw.IsNull() || !req.PlanValue.IsUnknown() || req.ConfigValue.IsUnknown() {
		return
	}
	var k8s types.Object
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("kubernetes"), &k8s)...)
	if resp.Diagnostics.HasError() || !k8s.IsNull() {
		return
	}
	resp.PlanValue = req.StateValue
}
