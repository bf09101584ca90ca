package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// memberAttrTypes are one element of `members`: a VM or pod of a proxy that several serve behind one address.
var memberAttrTypes = map[string]attr.Type{
	"name":             types.StringType,
	"scope":            types.StringType,
	"internal_address": types.StringType,
	"egress_address":   types.StringType,
	"healthy":          types.BoolType,
	"reason":           types.StringType,
}

// membersAttributes are what a proxy of several instances reports of each: where it runs, its own addresses,
// whether it serves. Computed alone, so a member's health never shows in a plan as a change of the user's.
func membersAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"egress_addresses": schema.ListAttribute{Computed: true, ElementType: types.StringType,
			MarkdownDescription: "Every source address destinations may see on the proxy's connections, each once, in the order of `members`: " +
				"what a partner's allow-list needs when the proxy has several `instances`. With one instance, `egress_address` alone (empty list where that is null)."},
		"members": schema.ListNestedAttribute{Computed: true,
			MarkdownDescription: "The VMs or pods that serve the proxy behind `internal_address`, when it has several (`instances` of a `kvm`, `gcp` or `aws` placement, two or more `kubernetes.replicas`); empty for a proxy of one. " +
				"While some are unhealthy `state` is `Degraded` and Read warns with each one's reason.",
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"name":             schema.StringAttribute{Computed: true, MarkdownDescription: "The member's own VM or pod."},
				"scope":            schema.StringAttribute{Computed: true, MarkdownDescription: "Where it runs: a zone, an availability zone, a host."},
				"internal_address": schema.StringAttribute{Computed: true, MarkdownDescription: "Its own address (health checks, a Prometheus); clients use `internal_address`."},
				"egress_address":   schema.StringAttribute{Computed: true, MarkdownDescription: "The source address destinations see on its connections; null where the backend cannot know it."},
				"healthy":          schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether it serves (its health check passes)."},
				"reason":           schema.StringAttribute{Computed: true, MarkdownDescription: "Why it does not serve; empty when healthy."},
			}},
		},
	}
}

// setMembers copies the backend's members and the egress addresses they give into the model. A proxy of one
// member has its egress address, if any, as the list's one element.
func (m *proxyResourceModel) setMembers(inst backend.Instance) diag.Diagnostics {
	var diags diag.Diagnostics
	addresses := []attr.Value{}
	members := []attr.Value{}
	for _, mem := range inst.Members {
		if mem.EgressAddress != "" && !slices.Contains(addresses, attr.Value(types.StringValue(mem.EgressAddress))) {
			// Once each: pods on one node, or VMs behind one NAT, share theirs.
			addresses = append(addresses, types.StringValue(mem.EgressAddress))
		}
		v, d := types.ObjectValue(memberAttrTypes, map[string]attr.Value{
			"name": types.StringValue(mem.Name), "scope": types.StringValue(mem.Scope),
			"internal_address": types.StringValue(mem.InternalAddress), "egress_address": optionalString(mem.EgressAddress),
			"healthy": types.BoolValue(mem.Healthy), "reason": types.StringValue(mem.Reason),
		})
		diags.Append(d...)
		members = append(members, v)
	}
	if len(inst.Members) == 0 && inst.EgressAddress != "" {
		addresses = append(addresses, types.StringValue(inst.EgressAddress))
	}
	var d diag.Diagnostics
	m.EgressAddresses, d = types.ListValue(types.StringType, addresses)
	diags.Append(d...)
	m.Members, d = types.ListValue(types.ObjectType{AttrTypes: memberAttrTypes}, members)
	diags.Append(d...)
	return diags
}

// degradedWarning says which members of a Degraded proxy do not serve and why, or nothing for a proxy that is
// not Degraded: the proxy still serves, so it is a warning on every refresh until they recover, not an error.
func degradedWarning(id string, inst backend.Instance) diag.Diagnostics {
	var diags diag.Diagnostics
	if inst.State != backend.StateDegraded {
		return diags
	}
	var down []string
	gone := 0
	for _, mem := range inst.Members {
		if !mem.Healthy {
			down = append(down, fmt.Sprintf("%s (%s): %s", mem.Name, mem.Scope, mem.Reason))
		}
		if mem.Gone {
			gone++
		}
	}
	advice := "an instance that stays unhealthy is replaced by `terraform apply -replace` of the proxy, or repaired on the backend."
	if gone > 0 {
		advice = "`terraform apply` makes the gone instances again in place; " + advice
	}
	diags.AddWarning("Egress proxy is degraded",
		fmt.Sprintf("%s serves through %d of its %d instances; not serving: %s. Clients are unaffected while the others carry the load; %s",
			id, len(inst.Members)-len(down), len(inst.Members), strings.Join(down, "; "), advice))
	return diags
}

// privateGoneMembers is the private-state key holding the names of the members the backend last read as Gone
// (backend.Member), a JSON list: the plan then updates the proxy in place, and the backend's Update makes them
// again.
const privateGoneMembers = "gone_members"

// recordGoneMembers writes which of inst's members are gone, for the next plan (planRestoreGoneMembers).
func recordGoneMembers(ctx context.Context, private privateWriter, inst backend.Instance) diag.Diagnostics {
	if private == nil {
		return nil
	}
	gone := []string{}
	for _, mem := range inst.Members {
		if mem.Gone {
			gone = append(gone, mem.Name)
		}
	}
	value, err := json.Marshal(gone)
	if err != nil {
		var diags diag.Diagnostics
		diags.AddError("Recording the proxy's members", err.Error())
		return diags
	}
	return private.SetKey(ctx, privateGoneMembers, value)
}

// planRestoreGoneMembers plans an in-place update of a proxy some of whose members the last read found gone
// (their VM deleted behind Terraform's back): what the backend reports of the members is unknown until the
// apply, whose Update makes them again. Without it the proxy would stay Degraded with an empty plan, and only a
// replacement (a new address) would bring the members back. It says so in a warning on the plan.
func planRestoreGoneMembers(ctx context.Context, private privateReader, state tfsdk.State, plan *tfsdk.Plan) diag.Diagnostics {
	var diags diag.Diagnostics
	if private == nil || state.Raw.IsNull() || plan.Raw.IsNull() {
		return diags
	}
	value, d := private.GetKey(ctx, privateGoneMembers)
	diags.Append(d...)
	var gone []string
	if len(value) == 0 || json.Unmarshal(value, &gone) != nil || len(gone) == 0 {
		return diags
	}
	diags.Append(plan.SetAttribute(ctx, path.Root("state"), types.StringUnknown())...)
	diags.Append(plan.SetAttribute(ctx, path.Root("members"), types.ListUnknown(types.ObjectType{AttrTypes: memberAttrTypes}))...)
	diags.Append(plan.SetAttribute(ctx, path.Root("egress_addresses"), types.ListUnknown(types.StringType))...)
	diags.AddWarning("Egress proxy members will be made again",
		fmt.Sprintf("The proxy's instances %s are gone (deleted outside Terraform). This apply makes them again in place, with the proxy's "+
			"current rules and labels; the others, and the address clients use, stay as they are.", strings.Join(gone, ", ")))
	return diags
}

// keepVolatileOnNoOp: state, members and egress_addresses are what the backend reports of a running proxy
// that changes by itself between a plan and its apply (a member lost or recovered, a rollout ended). An update
// cannot promise them, since Terraform refuses an apply whose result differs from a known planned value, so
// they carry no UseStateForUnknown and the framework plans them unknown on every change. keepVolatileOnNoOp
// plans them as the state holds them when nothing else changes, so that a plan with no change is empty (as for
// a state written before these attributes existed, which holds them null) instead of an update that only
// recomputes them.
func keepVolatileOnNoOp(ctx context.Context, state tfsdk.State, plan *tfsdk.Plan) diag.Diagnostics {
	var diags diag.Diagnostics
	if state.Raw.IsNull() || plan.Raw.IsNull() {
		return diags
	}
	kept := tfsdk.Plan{Schema: plan.Schema, Raw: plan.Raw.Copy()}
	var status types.String
	var members, addresses types.List
	diags.Append(state.GetAttribute(ctx, path.Root("state"), &status)...)
	diags.Append(state.GetAttribute(ctx, path.Root("members"), &members)...)
	diags.Append(state.GetAttribute(ctx, path.Root("egress_addresses"), &addresses)...)
	diags.Append(kept.SetAttribute(ctx, path.Root("state"), status)...)
	diags.Append(kept.SetAttribute(ctx, path.Root("members"), members)...)
	diags.Append(kept.SetAttribute(ctx, path.Root("egress_addresses"), addresses)...)
	if !diags.HasError() && kept.Raw.Equal(state.Raw) {
		*plan = kept
	}
	return diags
}
