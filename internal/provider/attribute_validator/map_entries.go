package attribute_validator

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// mapEntries adapts a check of a map entry, key and value together, into a map validator: for rules where
// what a value may be depends on its key (a quantity on the resource it is for). The error points at the entry.
type mapEntries struct {
	description string
	check       func(key, value string) error
}

var _ validator.Map = mapEntries{}

func (v mapEntries) Description(context.Context) string         { return v.description }
func (v mapEntries) MarkdownDescription(context.Context) string { return v.description }

func (v mapEntries) ValidateMap(_ context.Context, req validator.MapRequest, resp *validator.MapResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	for key, value := range req.ConfigValue.Elements() {
		s, ok := value.(types.String)
		if !ok || s.IsNull() || s.IsUnknown() {
			continue
		}
		if err := v.check(key, s.ValueString()); err != nil {
			p := req.Path.AtMapKey(key)
			resp.Diagnostics.AddAttributeError(p, "Invalid "+v.description, fmt.Sprintf("Attribute %s: %v", p, err))
		}
	}
}

// MapEntries accepts a map whose every entry passes check, key and value together; what names an entry in
// errors ("kubernetes resource"). Backends' Terraform-layer files build their own validators with it.
func MapEntries(what string, check func(key, value string) error) validator.Map {
	return mapEntries{what, check}
}
