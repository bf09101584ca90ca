package provider

import (
	"context"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// addressMover is a descriptor whose proxy's egress address may change on an update in place (kubernetes:
// the address is the one of the nodes the pods run on, and new rules roll the pods out, a new replica count
// adds some).
type addressMover interface {
	egressAddressMovesInPlace()
}

// keepUnlessAddressMoves is UseStateForUnknown for egress_address, except for a proxy placed on a backend
// whose address may move on an update in place (the descriptors that are addressMovers, whose placement
// attributes movers names): a plan that promised the old address would make Terraform reject the apply's
// result as inconsistent, so the plan leaves it unknown instead.
type keepUnlessAddressMoves struct {
	movers []string
}

var _ planmodifier.String = keepUnlessAddressMoves{}

// keepUnlessAddressMovesOf builds the modifier for the registered descriptors.
func keepUnlessAddressMovesOf(descriptors []backendDescriptor) keepUnlessAddressMoves {
	var m keepUnlessAddressMoves
	for _, d := range descriptors {
		if _, moves := d.(addressMover); moves {
			m.movers = append(m.movers, string(d.kind()))
		}
	}
	return m
}

func (m keepUnlessAddressMoves) Description(context.Context) string {
	if len(m.movers) == 0 {
		return "Keeps the value of the state."
	}
	return "Keeps the value of the state, except when an update of a proxy on " + strings.Join(m.movers, " or ") +
		" may move it to other machines."
}

func (m keepUnlessAddressMoves) MarkdownDescription(ctx context.Context) string {
	return m.Description(ctx)
}

func (m keepUnlessAddressMoves) PlanModifyString(ctx context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	// As UseStateForUnknown: nothing to keep on create, nothing to do for a known plan or an unknown config.
	if req.State.Raw.IsNull() || !req.PlanValue.IsUnknown() || req.ConfigValue.IsUnknown() {
		return
	}
	for _, kind := range m.movers {
		var placement types.Object
		resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root(kind), &placement)...)
		if resp.Diagnostics.HasError() || !placement.IsNull() {
			return
		}
	}
	resp.PlanValue = req.StateValue
}
