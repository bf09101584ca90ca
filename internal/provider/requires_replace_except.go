package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
)

// requiresReplaceExcept replaces the resource when a nested object changes in anything but the named
// attributes: those say how Create behaves (what it waits for), not what it makes, so changing them must
// not rebuild a running proxy.
func requiresReplaceExcept(inPlace ...string) requiresReplaceExceptModifier {
	return requiresReplaceExceptModifier{inPlace: inPlace}
}

// sameAs is a rule by which an attribute whose value changed still names what the object already is.
type sameAs func(ctx context.Context, prior, planned map[string]attr.Value) bool

// anyOf is the rule that finds a change the same when any of rules does.
func anyOf(rules ...sameAs) sameAs {
	return func(ctx context.Context, prior, planned map[string]attr.Value) bool {
		for _, same := range rules {
			if same(ctx, prior, planned) {
				return true
			}
		}
		return false
	}
}

type requiresReplaceExceptModifier struct {
	inPlace []string
	sameAs  map[string]sameAs
	// reconfigurable are attributes that change in place when the backend said, when it last read the object,
	// that it can reconfigure it, and replace it otherwise.
	reconfigurable []string
}

// inPlaceIfReconfigurable makes a change of the named attributes an update when the backend can reconfigure
// the object in place (requires_replace_unless_reconfigurable.go), a replacement otherwise.
func (m requiresReplaceExceptModifier) inPlaceIfReconfigurable(names ...string) requiresReplaceExceptModifier {
	m.reconfigurable = append(slices.Clone(m.reconfigurable), names...)
	return m
}

// unlessSame adds a rule for attribute name: a change the rule finds the same does not replace.
func (m requiresReplaceExceptModifier) unlessSame(name string, rule sameAs) requiresReplaceExceptModifier {
	rules := map[string]sameAs{name: rule}
	for n, r := range m.sameAs {
		rules[n] = r
	}
	m.sameAs = rules
	return m
}

func (m requiresReplaceExceptModifier) Description(context.Context) string {
	d := fmt.Sprintf("Changing this object replaces the resource, unless only %s change.", strings.Join(m.inPlace, " or "))
	if len(m.reconfigurable) > 0 {
		d += fmt.Sprintf(" %s change in place when the backend can reconfigure the object.", strings.Join(m.reconfigurable, " and "))
	}
	return d
}

func (m requiresReplaceExceptModifier) MarkdownDescription(ctx context.Context) string {
	return m.Description(ctx)
}

func (m requiresReplaceExceptModifier) PlanModifyObject(ctx context.Context, req planmodifier.ObjectRequest, resp *planmodifier.ObjectResponse) {
	if req.State.Raw.IsNull() || req.Plan.Raw.IsNull() {
		return // create or destroy: nothing to replace
	}
	if req.StateValue.IsNull() != req.PlanValue.IsNull() || req.PlanValue.IsUnknown() {
		resp.RequiresReplace = !req.StateValue.Equal(req.PlanValue)
		return
	}
	if req.StateValue.IsNull() {
		return
	}
	before, after := req.StateValue.Attributes(), req.PlanValue.Attributes()
	configured := map[string]attr.Value{}
	if !req.ConfigValue.IsNull() && !req.ConfigValue.IsUnknown() {
		configured = req.ConfigValue.Attributes()
	}
	for name, planned := range after {
		if m.ignored(name) {
			continue
		}
		prior, ok := before[name]
		if !ok {
			resp.RequiresReplace = true
			return
		}
		// Object modifiers run before those of the nested attributes: a computed attribute the
		// configuration leaves unset is still unknown here, and keeps its state value later.
		if planned.IsUnknown() {
			if c, set := configured[name]; set && c.IsNull() {
				continue
			}
		}
		if !equalKnown(prior, planned) {
			if same, ok := m.sameAs[name]; ok && same(ctx, before, after) {
				continue
			}
			if slices.Contains(m.reconfigurable, name) && reconfigurable(ctx, req.Private, &resp.Diagnostics) {
				continue
			}
			resp.RequiresReplace = true
			return
		}
	}
}

func (m requiresReplaceExceptModifier) ignored(name string) bool {
	for _, n := range m.inPlace {
		if n == name {
			return true
		}
	}
	return false
}

// equalKnown treats a value still unknown in the plan as a change: the new value cannot be proved the same.
func equalKnown(prior, planned attr.Value) bool {
	return !planned.IsUnknown() && prior.Equal(planned)
}
