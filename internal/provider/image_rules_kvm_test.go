package provider

import (
	"context"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// TestBaseVolumeOfImage: a base_volume the configuration leaves unset keeps its state value, unless the image
// changes (image_file, image_url or image_sha256) or the state reads the instances on two images (a roll cut
// short), where the plan leaves it unknown for the apply to fill in. A configured value is the configuration's.
func TestBaseVolumeOfImage(t *testing.T) {
	t.Parallel()
	kvmAttrs := map[string]schema.Attribute{"base_volume": schema.StringAttribute{Optional: true, Computed: true}}
	for _, name := range []string{"image_file", "image_url", "image_sha256"} {
		kvmAttrs[name] = schema.StringAttribute{Optional: true}
	}
	s := schema.Schema{Attributes: map[string]schema.Attribute{"kvm": schema.SingleNestedAttribute{Optional: true, Attributes: kvmAttrs}}}
	ty := s.Type().TerraformType(context.Background())
	str := func(v string) tftypes.Value {
		if v == "" {
			return tftypes.NewValue(tftypes.String, nil)
		}
		return tftypes.NewValue(tftypes.String, v)
	}
	root, ok := ty.(tftypes.Object)
	if !ok {
		t.Fatalf("the schema's type is %T, not an object", ty)
	}
	kvmType := root.AttributeTypes["kvm"]
	object := func(base tftypes.Value, file, url, sum string) tftypes.Value {
		return tftypes.NewValue(ty, map[string]tftypes.Value{"kvm": tftypes.NewValue(kvmType, map[string]tftypes.Value{
			"base_volume": base, "image_file": str(file), "image_url": str(url), "image_sha256": str(sum),
		})})
	}
	unknown := tftypes.NewValue(tftypes.String, tftypes.UnknownValue)
	const (
		old    = "egress-image-0123456789abcdef.qcow2"
		mixed  = old + " (and egress-image-fedcba9876543210.qcow2 on some of its instances)"
		sumA   = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		sumB   = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
		fileA  = "/images/a.qcow2"
		fileB  = "/images/b.qcow2"
		urlA   = "https://images.example/a.qcow2"
		urlB   = "https://images.example/b.qcow2"
		noFile = ""
	)
	for name, tc := range map[string]struct {
		stateBase                           string
		priorFile, priorURL, priorSum       string
		plannedFile, plannedURL, plannedSum string
		configured                          string
		want                                types.String
	}{
		"same image file keeps the volume":         {stateBase: old, priorFile: fileA, plannedFile: fileA, want: types.StringValue(old)},
		"another image file leaves it unknown":     {stateBase: old, priorFile: fileA, plannedFile: fileB, want: types.StringUnknown()},
		"another checksum leaves it unknown":       {stateBase: old, priorURL: urlA, priorSum: sumA, plannedURL: urlA, plannedSum: sumB, want: types.StringUnknown()},
		"another URL leaves it unknown":            {stateBase: old, priorURL: urlA, priorSum: sumA, plannedURL: urlB, plannedSum: sumA, want: types.StringUnknown()},
		"image file set after an import":           {stateBase: old, plannedFile: fileA, want: types.StringUnknown()},
		"the host's volume, nothing changed, kept": {stateBase: old, want: types.StringValue(old)},
		"two images read back leaves it unknown":   {stateBase: mixed, priorFile: fileB, plannedFile: fileB, want: types.StringUnknown()},
		"a configured volume is not touched":       {stateBase: old, priorFile: noFile, configured: "other.qcow2", want: types.StringValue("other.qcow2")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			planned, configValue := unknown, types.StringNull()
			if tc.configured != "" {
				planned, configValue = str(tc.configured), types.StringValue(tc.configured)
			}
			req := planmodifier.StringRequest{
				State:       tfsdk.State{Schema: s, Raw: object(str(tc.stateBase), tc.priorFile, tc.priorURL, tc.priorSum)},
				StateValue:  types.StringValue(tc.stateBase),
				Plan:        tfsdk.Plan{Schema: s, Raw: object(planned, tc.plannedFile, tc.plannedURL, tc.plannedSum)},
				Config:      tfsdk.Config{Schema: s, Raw: object(str(tc.configured), tc.plannedFile, tc.plannedURL, tc.plannedSum)},
				ConfigValue: configValue,
			}
			req.PlanValue = types.StringUnknown()
			if tc.configured != "" {
				req.PlanValue = types.StringValue(tc.configured)
			}
			resp := &planmodifier.StringResponse{PlanValue: req.PlanValue}
			baseVolumeOfImage{}.PlanModifyString(context.Background(), req, resp)
			if resp.Diagnostics.HasError() {
				t.Fatal(resp.Diagnostics)
			}
			if !resp.PlanValue.Equal(tc.want) {
				t.Errorf("planned %v, want %v", resp.PlanValue, tc.want)
			}
		})
	}
}
