package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
)

// requiresReplaceExcept replaces the resource when a nested object changes in anything but the named
// attributes: those say how Create behaves (what it waits for), not what it makes, so changing them must
// not rebuild a running proxy.
func requiresReplaceExcept(inPlace ...string) requiresReplaceExceptModifier {
	return requiresReplaceExceptModifier{inPlace: inPlace}
}

// sameAs is a rule by which an attribute whose value changed still names what the object already is.
type sameAs func(ctx context.Context, prior, planned map[string]attr.Value) bool

type requiresReplaceExceptModifier struct {
	inPlace []string
	sameAs  map[string]sameAs
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
	return fmt.Sprintf("Changing this object replaces the resource, unless only %s change.", strings.Join(m.inPlace, " or "))
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

// imageFileOfBaseVolume finds an image_file that the state lacks (an import cannot know a local path) the
// same when the file's content is the image volume the proxy already runs on.
func imageFileOfBaseVolume(ctx context.Context, prior, planned map[string]attr.Value) bool {
	file, ok := planned["image_file"].(types.String)
	if !ok || file.IsNull() || file.IsUnknown() || !prior["image_file"].IsNull() {
		return false
	}
	base, ok := prior["base_volume"].(types.String)
	if !ok || base.IsNull() {
		return false
	}
	name, err := kvm.ImageVolumeName(ctx, file.ValueString())
	return err == nil && name == base.ValueString()
}

// sameURLImage finds a change of image_url or image_sha256 the same image the proxy already runs on, since
// image_sha256 names the content: an import, whose state knows neither (the backend keeps no URL, which may
// carry credentials), when the configured image_sha256 names the base volume the proxy runs on; or image_url
// moved to another copy of the same image (image_sha256 the same, but for its case). A new image_sha256 is a
// new image, and replaces the proxy.
func sameURLImage(_ context.Context, prior, planned map[string]attr.Value) bool {
	url, urlOK := planned["image_url"].(types.String)
	sum, sumOK := planned["image_sha256"].(types.String)
	if !urlOK || !sumOK || url.IsNull() || url.IsUnknown() || sum.IsNull() || sum.IsUnknown() {
		return false
	}
	priorURL, _ := prior["image_url"].(types.String)
	priorSum, _ := prior["image_sha256"].(types.String)
	if priorURL.IsNull() && priorSum.IsNull() {
		base, ok := prior["base_volume"].(types.String)
		return ok && !base.IsNull() && kvm.IsURLImageVolume(base.ValueString(), sum.ValueString())
	}
	return !priorSum.IsNull() && !priorSum.IsUnknown() && strings.EqualFold(priorSum.ValueString(), sum.ValueString())
}
