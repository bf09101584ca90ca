package attribute_validator //nolint:revive

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
)

type trueConflictsWith struct {
	other path.Expression
	why   string
}

// TrueConflictsWith refuses true while the attribute at other is set; why says what the pair would do.
// Unlike ConflictsWith, an explicit false goes with anything.
func TrueConflictsWith(other path.Expression, why string) validator.Bool {
	return trueConflictsWith{other, why}
}

func (v trueConflictsWith) Description(context.Context) string {
	return fmt.Sprintf("when true, %s must not be set: %s", v.other, v.why)
}
func (v trueConflictsWith) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v trueConflictsWith) ValidateBool(ctx context.Context, req validator.BoolRequest, resp *validator.BoolResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() || !req.ConfigValue.ValueBool() {
		return
	}
	paths, diags := req.Config.PathMatches(ctx, req.PathExpression.Merge(v.other))
	resp.Diagnostics.Append(diags...)
	for _, p := range paths {
		var value attr.Value
		resp.Diagnostics.Append(req.Config.GetAttribute(ctx, p, &value)...)
		if value == nil || value.IsNull() {
			continue
		}
		resp.Diagnostics.AddAttributeError(req.Path, "Conflicting "+req.Path.String(),
			fmt.Sprintf("Attribute %s is true, so %s must not be set: %s.", req.Path, p, v.why))
	}
}
