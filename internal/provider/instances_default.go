package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// severalInPlace is the sameAs rule of a backend whose proxy of several instances changes its count in
// place: an instances of null (a state from before the attribute) counts as def, and two counts above one
// are the same proxy, whose Update adds or removes instances behind the same load balancer. One instance
// and several are different objects (the one bears the proxy's name and address, and has no load
// balancer), so a change between them replaces the proxy.
func severalInPlace(def int64) sameAs {
	return func(_ context.Context, prior, planned map[string]attr.Value) bool {
		before, after := instancesOf(prior, def), instancesOf(planned, def)
		return before == after || (before > 1 && after > 1)
	}
}

// rolledWhenSeveral is the sameAs rule of an attribute (the boot image) that a proxy of several instances
// changes in place, one instance at a time behind its load balancer or virtual address, while it keeps more
// than one; a proxy of one is replaced. An instances of null or unknown counts as one, every backend's default.
func rolledWhenSeveral(_ context.Context, prior, planned map[string]attr.Value) bool {
	return instancesOf(prior, 1) > 1 && instancesOf(planned, 1) > 1
}

// instancesOf is a placement's instances, def where it is null or unknown.
func instancesOf(placement map[string]attr.Value, def int64) int64 {
	if n, ok := placement["instances"].(types.Int64); ok && !n.IsNull() && !n.IsUnknown() {
		return n.ValueInt64()
	}
	return def
}

// instancesDefault plans a placement's instances as def for a new proxy whose configuration leaves it unset,
// and as the state holds it otherwise: null for a proxy of one whose state was written before the attribute
// existed, until a refresh reads it (each descriptor's setResolved). Not a schema default, which would make the
// proposed value differ from such a state and every computed attribute of the proxy unknown on a plan without
// refresh (TestAccUpgrade_aws, TestAccUpgrade_gcp).
type instancesDefault struct{ def int64 }

func (m instancesDefault) Description(context.Context) string {
	return fmt.Sprintf("%d when unset", m.def)
}

func (m instancesDefault) MarkdownDescription(ctx context.Context) string {
	return m.Description(ctx)
}

func (m instancesDefault) PlanModifyInt64(_ context.Context, req planmodifier.Int64Request, resp *planmodifier.Int64Response) {
	if !req.ConfigValue.IsNull() {
		return
	}
	if req.State.Raw.IsNull() {
		resp.PlanValue = types.Int64Value(m.def)
		return
	}
	resp.PlanValue = req.StateValue
}
