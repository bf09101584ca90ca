package attribute_validator

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
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
	paths, isTrue := whenTrue(ctx, req, resp, v.other)
	if !isTrue {
		return
	}
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

// TrueRequiresFalse refuses true while the boolean at other is (or defaults to, otherDefault) true too; why
// says what the combination would fail to do.
func TrueRequiresFalse(other path.Expression, otherDefault bool, why string) validator.Bool {
	return trueRequiresFalseValidator{other: other, otherDefault: otherDefault, why: why}
}

type trueRequiresFalseValidator struct {
	other        path.Expression
	otherDefault bool
	why          string
}

func (v trueRequiresFalseValidator) Description(context.Context) string {
	return fmt.Sprintf("true only with %s = false: %s", v.other, v.why)
}

func (v trueRequiresFalseValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v trueRequiresFalseValidator) ValidateBool(ctx context.Context, req validator.BoolRequest, resp *validator.BoolResponse) {
	paths, isTrue := whenTrue(ctx, req, resp, v.other)
	if !isTrue {
		return
	}
	for _, p := range paths {
		var other types.Bool
		resp.Diagnostics.Append(req.Config.GetAttribute(ctx, p, &other)...)
		// Unknown until apply: nothing to refuse yet. Null: the default decides.
		on := other.ValueBool() || (other.IsNull() && v.otherDefault)
		if other.IsUnknown() || !on {
			continue
		}
		resp.Diagnostics.AddAttributeError(req.Path, "Conflicting "+req.Path.String(),
			fmt.Sprintf("Attribute %s is true, so %s must be set to false: %s.", req.Path, p, v.why))
	}
}
