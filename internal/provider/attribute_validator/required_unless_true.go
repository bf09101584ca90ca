package attribute_validator

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

type requiredUnlessTrue struct {
	other path.Expression
	why   string
}

// RequiredUnlessTrue refuses a string left unset while the boolean at other is not true (unset or false);
// why says what the string is needed for. An unknown value of either is left to the apply.
func RequiredUnlessTrue(other path.Expression, why string) validator.String {
	return requiredUnlessTrue{other, why}
}

func (v requiredUnlessTrue) Description(context.Context) string {
	return fmt.Sprintf("required unless %s is true: %s", v.other, v.why)
}
func (v requiredUnlessTrue) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v requiredUnlessTrue) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if !req.ConfigValue.IsNull() {
		return
	}
	paths, diags := req.Config.PathMatches(ctx, req.PathExpression.Merge(v.other))
	resp.Diagnostics.Append(diags...)
	for _, p := range paths {
		var other types.Bool
		resp.Diagnostics.Append(req.Config.GetAttribute(ctx, p, &other)...)
		if other.IsUnknown() || other.ValueBool() {
			return
		}
	}
	resp.Diagnostics.AddAttributeError(req.Path, "Missing "+req.Path.String(),
		fmt.Sprintf("Set %s, or set %s = true: %s.", req.Path, v.other, v.why))
}
