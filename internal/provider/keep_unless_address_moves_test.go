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

// TestKeepUnlessAddressMoves: egress_address keeps its state value on an update, except for a proxy placed on
// a backend whose descriptor says its address moves in place (kubernetes), where the plan leaves it unknown.
func TestKeepUnlessAddressMoves(t *testing.T) {
	t.Parallel()
	m := keepUnlessAddressMovesOf(backendDescriptors)
	if len(m.movers) != 1 || m.movers[0] != "kubernetes" {
		t.Fatalf("movers = %v, want [kubernetes]", m.movers)
	}
	s := schema.Schema{Attributes: map[string]schema.Attribute{
		"egress_address": schema.StringAttribute{Computed: true},
		"kubernetes":     schema.SingleNestedAttribute{Optional: true, Attributes: map[string]schema.Attribute{"namespace": schema.StringAttribute{Optional: true}}},
		"kvm":            schema.SingleNestedAttribute{Optional: true, Attributes: map[string]schema.Attribute{"host": schema.StringAttribute{Optional: true}}},
	}}
	ty := s.Type().TerraformType(context.Background())
	nested := func(name, attr string, set bool) tftypes.Value {
		t := tftypes.Object{AttributeTypes: map[string]tftypes.Type{attr: tftypes.String}}
		if !set {
			return tftypes.NewValue(t, nil)
		}
		return tftypes.NewValue(t, map[string]tftypes.Value{attr: tftypes.NewValue(tftypes.String, name)})
	}
	object := func(address tftypes.Value, onKubernetes bool) tftypes.Value {
		return tftypes.NewValue(ty, map[string]tftypes.Value{
			"egress_address": address,
			"kubernetes":     nested("egress", "namespace", onKubernetes),
			"kvm":            nested("local", "host", !onKubernetes),
		})
	}
	unknown := tftypes.NewValue(tftypes.String, tftypes.UnknownValue)
	for name, tc := range map[string]struct {
		onKubernetes bool
		create       bool
		want         types.String
	}{
		"kvm update keeps the address":          {want: types.StringValue("203.0.113.7")},
		"kubernetes update leaves it unknown":   {onKubernetes: true, want: types.StringUnknown()},
		"create has nothing to keep":            {create: true, want: types.StringUnknown()},
		"kubernetes create has nothing to keep": {onKubernetes: true, create: true, want: types.StringUnknown()},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			state := tfsdk.State{Schema: s, Raw: object(tftypes.NewValue(tftypes.String, "203.0.113.7"), tc.onKubernetes)}
			if tc.create {
				state.Raw = tftypes.NewValue(ty, nil)
			}
			req := planmodifier.StringRequest{
				State:       state,
				StateValue:  types.StringValue("203.0.113.7"),
				Plan:        tfsdk.Plan{Schema: s, Raw: object(unknown, tc.onKubernetes)},
				PlanValue:   types.StringUnknown(),
				Config:      tfsdk.Config{Schema: s, Raw: object(tftypes.NewValue(tftypes.String, nil), tc.onKubernetes)},
				ConfigValue: types.StringNull(),
			}
			if tc.create {
				req.StateValue = types.StringNull()
			}
			resp := &planmodifier.StringResponse{PlanValue: req.PlanValue}
			m.PlanModifyString(context.Background(), req, resp)
			if resp.Diagnostics.HasError() {
				t.Fatal(resp.Diagnostics)
			}
			if !resp.PlanValue.Equal(tc.want) {
				t.Errorf("planned %v, want %v", resp.PlanValue, tc.want)
			}
		})
	}
}
