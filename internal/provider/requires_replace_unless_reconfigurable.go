package provider

import (
	"context"
	"strconv"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/objectplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/setplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// privateReconfigurable is the private-state key holding what the backend said, when it last read the proxy,
// about changing its rules in place. The plan decides from it: update when true, replace otherwise, so an
// apply never fails half-way on a proxy that cannot be reconfigured.
const privateReconfigurable = "reconfigurable"

const reconfigurableDescription = "Changing this updates the proxy's rules in place when its backend can reconfigure it " +
	"(as it reported when it last read the proxy), and replaces the proxy otherwise."

type privateReader interface {
	GetKey(ctx context.Context, key string) ([]byte, diag.Diagnostics)
}

type privateWriter interface {
	SetKey(ctx context.Context, key string, value []byte) diag.Diagnostics
}

func recordReconfigurable(ctx context.Context, private privateWriter, inst backend.Instance) diag.Diagnostics {
	if private == nil {
		return nil
	}
	return private.SetKey(ctx, privateReconfigurable, []byte(strconv.FormatBool(inst.Reconfigurable)))
}

// reconfigurable is false when nothing was recorded: a proxy read by an older provider version is replaced,
// as it always was, until a refresh records what its backend can do.
func reconfigurable(ctx context.Context, private privateReader, diags *diag.Diagnostics) bool {
	if private == nil {
		return false
	}
	value, d := private.GetKey(ctx, privateReconfigurable)
	diags.Append(d...)
	inPlace, err := strconv.ParseBool(string(value))
	return err == nil && inPlace
}

func setRequiresReplaceUnlessReconfigurable() planmodifier.Set {
	return setplanmodifier.RequiresReplaceIf(func(ctx context.Context, req planmodifier.SetRequest, resp *setplanmodifier.RequiresReplaceIfFuncResponse) {
		resp.RequiresReplace = !reconfigurable(ctx, req.Private, &resp.Diagnostics)
	}, reconfigurableDescription, reconfigurableDescription)
}

func int64RequiresReplaceUnlessReconfigurable() planmodifier.Int64 {
	return int64planmodifier.RequiresReplaceIf(func(ctx context.Context, req planmodifier.Int64Request, resp *int64planmodifier.RequiresReplaceIfFuncResponse) {
		resp.RequiresReplace = !reconfigurable(ctx, req.Private, &resp.Diagnostics)
	}, reconfigurableDescription, reconfigurableDescription)
}

func objectRequiresReplaceUnlessReconfigurable() planmodifier.Object {
	return objectplanmodifier.RequiresReplaceIf(func(ctx context.Context, req planmodifier.ObjectRequest, resp *objectplanmodifier.RequiresReplaceIfFuncResponse) {
		resp.RequiresReplace = !reconfigurable(ctx, req.Private, &resp.Diagnostics)
	}, reconfigurableDescription, reconfigurableDescription)
}

func listRequiresReplaceUnlessReconfigurable() planmodifier.List {
	return listplanmodifier.RequiresReplaceIf(func(ctx context.Context, req planmodifier.ListRequest, resp *listplanmodifier.RequiresReplaceIfFuncResponse) {
		resp.RequiresReplace = !reconfigurable(ctx, req.Private, &resp.Diagnostics)
	}, reconfigurableDescription, reconfigurableDescription)
}

func stringRequiresReplaceUnlessReconfigurable() planmodifier.String {
	return stringplanmodifier.RequiresReplaceIf(func(ctx context.Context, req planmodifier.StringRequest, resp *stringplanmodifier.RequiresReplaceIfFuncResponse) {
		resp.RequiresReplace = !reconfigurable(ctx, req.Private, &resp.Diagnostics)
	}, reconfigurableDescription, reconfigurableDescription)
}
