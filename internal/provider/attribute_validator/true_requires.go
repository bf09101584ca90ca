package attribute_validator

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

type trueRequires struct {
	other path.Expression
	why   string
	check func(string) error
}

// TrueRequiresValid accepts true only when the string attribute at other is set too and passes check, a rule
// that holds only while this attribute is true (a name that must leave room for a suffix); why says what it is
// needed for. Unlike AlsoRequires, an explicit false needs nothing.
func TrueRequiresValid(other path.Expression, why string, check func(string) error) validator.Bool {
	return trueRequires{other, why, check}
}

func (v trueRequires) Description(context.Context) string {
	return fmt.Sprintf("when true, %s must be set too: %s", v.other, v.why)
}
func (v trueRequires) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v trueRequires) ValidateBool(ctx context.Context, req validator.BoolRequest, resp *validator.BoolResponse) {
	paths, isTrue := whenTrue(ctx, req, resp, v.other)
	if !isTrue {
		return
	}
	for _, p := range paths {
		var value attr.Value
		resp.Diagnostics.Append(req.Config.GetAttribute(ctx, p, &value)...)
		if value != nil && !value.IsNull() {
			// Set, or unknown until apply: either way it will be there. A known string is checked now.
			if s, ok := value.(types.String); ok && v.check != nil && !s.IsUnknown() {
				if err := v.check(s.ValueString()); err != nil {
					resp.Diagnostics.AddAttributeError(p, "Invalid "+v.other.String(),
						fmt.Sprintf("Attribute %s is true, so %s must suit it: %s.", req.Path, p, err))
				}
			}
			return
		}
	}
	resp.Diagnostics.AddAttributeError(req.Path, "Missing "+v.other.String(),
		fmt.Sprintf("Attribute %s is true, so %s must be set as well: %s.", req.Path, v.other, v.why))
}
