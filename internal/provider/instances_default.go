package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

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
