package provider

import (
	"context"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
)

// The kvm placement's rules by which a changed image attribute still names the image a proxy runs on, for
// requiresReplaceExcept's unlessSame (proxy_resource_kvm.go).

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

// baseVolumeOfImage plans a base_volume the configuration leaves unset as the state holds it (what the host
// resolved, or the volume the image became), unless the proxy is to move to another image: image_file,
// image_url or image_sha256 changed (the new image's volume is known once the apply placed it), or the state
// reads its instances on several images (kvm.IsMixedBaseVolume: an image roll cut short, which the next apply
// finishes even when the configuration is what the state already holds).
type baseVolumeOfImage struct{}

func (baseVolumeOfImage) Description(context.Context) string {
	return "The state's value, unless the image changes or the instances run several images."
}

func (m baseVolumeOfImage) MarkdownDescription(ctx context.Context) string { return m.Description(ctx) }

func (baseVolumeOfImage) PlanModifyString(ctx context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	if req.State.Raw.IsNull() || req.Plan.Raw.IsNull() || req.StateValue.IsNull() || !req.PlanValue.IsUnknown() || !req.ConfigValue.IsNull() {
		return
	}
	if kvm.IsMixedBaseVolume(req.StateValue.ValueString()) {
		return
	}
	for _, name := range []string{"image_file", "image_url", "image_sha256"} {
		var prior, planned types.String
		at := path.Root("kvm").AtName(name)
		if d := req.State.GetAttribute(ctx, at, &prior); d.HasError() {
			return
		}
		if d := req.Plan.GetAttribute(ctx, at, &planned); d.HasError() {
			return
		}
		if !prior.Equal(planned) {
			return
		}
	}
	resp.PlanValue = req.StateValue
}
