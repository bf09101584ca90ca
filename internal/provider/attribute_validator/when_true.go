package attribute_validator

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
)

// whenTrue is the part every "while this bool is true, the attribute at other must ..." validator of this
// package shares: whether the bool is true in the configuration (an explicit false, null or unknown asks
// nothing of the other attribute), and the paths other matches then.
func whenTrue(ctx context.Context, req validator.BoolRequest, resp *validator.BoolResponse, other path.Expression) ([]path.Path, bool) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() || !req.ConfigValue.ValueBool() {
		return nil, false
	}
	paths, diags := req.Config.PathMatches(ctx, req.PathExpression.Merge(other))
	resp.Diagnostics.Append(diags...)
	return paths, true
}
