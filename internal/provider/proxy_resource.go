package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-framework-validators/resourcevalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/identityschema"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

var (
	_ resource.ResourceWithConfigure        = (*proxyResource)(nil)
	_ resource.ResourceWithImportState      = (*proxyResource)(nil)
	_ resource.ResourceWithIdentity         = (*proxyResource)(nil)
	_ resource.ResourceWithModifyPlan       = (*proxyResource)(nil)
	_ resource.ResourceWithConfigValidators = (*proxyResource)(nil)
)

// Default timeouts: a VM that boots and installs Squid takes minutes.
const (
	defaultCreateTimeout = 20 * time.Minute
	defaultReadTimeout   = 5 * time.Minute
	defaultUpdateTimeout = 10 * time.Minute
	defaultDeleteTimeout = 20 * time.Minute
)

// NewProxyResource returns the egress_proxy resource.
func NewProxyResource() resource.Resource { return &proxyResource{} }

type proxyResource struct {
	data *providerData
}

type proxyIdentityModel struct {
	ID types.String `tfsdk:"id"`
}

func (r *proxyResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_proxy"
}

func (r *proxyResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = proxyResourceSchema(ctx)
}

func (r *proxyResource) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	resp.IdentitySchema = identityschema.Schema{Attributes: map[string]identityschema.Attribute{
		"id": identityschema.StringAttribute{RequiredForImport: true, Description: "Provider ID: " + providerIDFormsMarkdown() + "."},
	}}
}

func (r *proxyResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	return []resource.ConfigValidator{resourcevalidator.ExactlyOneOf(backendPaths()...), openProxyWarning{}, policyChecks{}, policyTotals{}, metricsChecks{}}
}

func (r *proxyResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	data, diags := providerDataFrom(req.ProviderData)
	resp.Diagnostics.Append(diags...)
	r.data = data
}

// ModifyPlan checks the placement against the provider's configuration and shows at plan time the labels
// the objects will carry, provider defaults included. A planned destroy is marked for Delete (see
// privatePlannedDestroy).
func (r *proxyResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		resp.Diagnostics.Append(markPlannedDestroy(ctx, resp.Private)...)
		return
	}
	if r.data == nil {
		return
	}
	resp.Diagnostics.Append(r.checkPlacement(ctx, req.Plan)...)
	resp.Diagnostics.Append(checkMetricsLogFormat(ctx, req.Plan)...)
	var labels types.Map
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("labels"), &labels)...)
	if resp.Diagnostics.HasError() || labels.IsUnknown() {
		return
	}
	own := map[string]string{}
	resp.Diagnostics.Append(labels.ElementsAs(ctx, &own, false)...)
	all, d := types.MapValueFrom(ctx, types.StringType, mergeLabels(r.data.defaultLabels, own))
	resp.Diagnostics.Append(d...)
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("all_labels"), all)...)
	resp.Diagnostics.Append(keepVolatileOnNoOp(ctx, req.State, &resp.Plan)...)
	resp.Diagnostics.Append(planRestoreGoneMembers(ctx, req.Private, req.State, &resp.Plan)...)
}

// checkPlacement refuses at plan time what the provider configuration already tells cannot work: a backend
// its block does not configure, or a target (host, cluster, project) that block does not name.
func (r *proxyResource) checkPlacement(ctx context.Context, plan tfsdk.Plan) diag.Diagnostics {
	var diags diag.Diagnostics
	for _, desc := range backendDescriptors {
		kind := desc.kind()
		var placement types.Object
		diags.Append(plan.GetAttribute(ctx, path.Root(string(kind)), &placement)...)
		if diags.HasError() || placement.IsNull() || placement.IsUnknown() {
			continue
		}
		if !slices.Contains(r.data.registry.Configured(), kind) {
			diags.AddAttributeError(path.Root(string(kind)), "Backend not configured",
				(&backend.NotConfiguredError{Kind: kind}).Error()+".")
			continue
		}
		names, enumerated := r.data.targets[kind]
		attribute := path.Root(string(kind)).AtName(desc.targetAttribute())
		var target types.String
		diags.Append(plan.GetAttribute(ctx, attribute, &target)...)
		if !enumerated || target.IsNull() || target.IsUnknown() || slices.Contains(names, target.ValueString()) {
			continue
		}
		diags.AddAttributeError(attribute, "Unknown "+string(kind)+"."+desc.targetAttribute(), fmt.Sprintf(
			"Attribute %s: %q is not configured on the provider; the provider's %s block names %s.",
			attribute, target.ValueString(), kind, strings.Join(names, ", ")))
	}
	return diags
}

func (r *proxyResource) backendFor(ctx context.Context, kind backend.Kind) (backend.Backend, diag.Diagnostics) {
	var diags diag.Diagnostics
	if r.data == nil {
		diags.AddError("Provider not configured", "The egress provider was not configured before use: this is a bug in the provider or Terraform.")
		return nil, diags
	}
	b, err := r.data.registry.Backend(ctx, kind)
	if err != nil {
		diags.Append(backendErrorDiagnostic("use", string(kind)+" backend", err))
	}
	return b, diags
}

func (r *proxyResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan proxyResourceModel
	resp.Diagnostics.Append(plan.read(ctx, req.Plan)...)
	writeOnly, d := readWriteOnly(ctx, req.Config)
	resp.Diagnostics.Append(d...)
	timeout, d := plan.Timeouts.Create(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	spec, diags := r.spec(ctx, plan, uuid.NewString(), writeOnly)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	b, diags := r.backendFor(ctx, spec.Placement.Backend)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}

	var created backend.Instance
	err := backend.Retry(ctx, backend.DefaultBackoff, func(ctx context.Context) error {
		inst, err := b.Create(ctx, spec)
		if inst.ID.Name != "" {
			created = inst
		}
		return err
	})
	if err != nil {
		resp.Diagnostics.Append(backendErrorDiagnostic("create", describe(spec), err))
		if created.ID.Name != "" {
			// Saving the half-made proxy makes Terraform taint it and replace it later, instead of leaking it.
			resp.Diagnostics.Append(plan.setInstance(created, r.data.defaultLabels)...)
			resp.Diagnostics.Append(plan.write(ctx, &resp.State, resp.State.Schema.Type())...)
			resp.Diagnostics.Append(recordReconfigurable(ctx, resp.Private, created)...)
			resp.Diagnostics.Append(recordGoneMembers(ctx, resp.Private, created)...)
			r.setIdentity(ctx, resp.Identity, created.ID)
			resp.Diagnostics.AddError("Egress proxy saved as tainted", taintedDetail)
		}
		return
	}
	for _, note := range created.Notes {
		resp.Diagnostics.AddWarning("Egress proxy created with a caveat", fmt.Sprintf("%s: %s", created.ID, note))
	}
	resp.Diagnostics.Append(plan.setInstance(created, r.data.defaultLabels)...)
	resp.Diagnostics.Append(plan.write(ctx, &resp.State, resp.State.Schema.Type())...)
	resp.Diagnostics.Append(recordReconfigurable(ctx, resp.Private, created)...)
	resp.Diagnostics.Append(recordGoneMembers(ctx, resp.Private, created)...)
	r.setIdentity(ctx, resp.Identity, created.ID)
}

func (r *proxyResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state proxyResourceModel
	resp.Diagnostics.Append(state.read(ctx, req.State)...)
	timeout, d := state.Timeouts.Read(ctx, defaultReadTimeout)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx = r.owned(ctx, state)
	id, b, diags := r.existing(ctx, state.ID.ValueString())
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}

	inst, err := getRetried(ctx, b, id)
	if backend.IsNotFound(err) {
		tflog.Warn(ctx, "egress proxy is gone from the backend; removing it from state so the next plan recreates it",
			map[string]any{"id": id.String(), "error": err.Error()})
		// A state written by a CLI without resource identity (Terraform before 1.12) has none; the framework
		// refuses a Read that returns none, even for a removed resource, so the drift would break the plan.
		r.setIdentity(ctx, resp.Identity, id)
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.Append(backendErrorDiagnostic("read", id.String(), err))
		return
	}
	resp.Diagnostics.Append(state.setInstance(inst, r.data.defaultLabels)...)
	resp.Diagnostics.Append(degradedWarning(id.String(), inst)...)
	if inst.Drift != "" {
		state.markRulesDrifted()
		resp.Diagnostics.AddWarning("Egress proxy's rules drifted",
			fmt.Sprintf("%s: %s. The plan shows allowed_destinations as changed: applying it writes the proxy's rules again, in place.", id, inst.Drift))
	}
	resp.Diagnostics.Append(state.write(ctx, &resp.State, resp.State.Schema.Type())...)
	resp.Diagnostics.Append(recordReconfigurable(ctx, resp.Private, inst)...)
	resp.Diagnostics.Append(recordGoneMembers(ctx, resp.Private, inst)...)
	r.setIdentity(ctx, resp.Identity, id)
}

// Update changes what changes in place: labels and what Create waits for through the backend's Update, the
// proxy's rules through Reconfigure. The plan only gets here with changed rules when the backend said, when
// it last read the proxy, that it can reconfigure it.
func (r *proxyResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state proxyResourceModel
	resp.Diagnostics.Append(plan.read(ctx, req.Plan)...)
	resp.Diagnostics.Append(state.read(ctx, req.State)...)
	writeOnly, d := readWriteOnly(ctx, req.Config)
	resp.Diagnostics.Append(d...)
	timeout, d := plan.Timeouts.Update(ctx, defaultUpdateTimeout)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx = r.owned(ctx, state)
	spec, diags := r.spec(ctx, plan, state.UID.ValueString(), writeOnly)
	resp.Diagnostics.Append(diags...)
	id, b, diags := r.existing(ctx, state.ID.ValueString())
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}

	var inst backend.Instance
	err := backend.Retry(ctx, backend.DefaultBackoff, func(ctx context.Context) (err error) {
		inst, err = b.Update(ctx, id, spec)
		return err
	})
	if err == nil && plan.rulesDiffer(state) {
		// Asserted on the backend: the logging decorator has Reconfigure only where the backend has it, and a
		// backend without it is refused here as Permanent (the plan only gets here when the backend said it
		// could reconfigure this proxy, so this is a backend that changed its mind, not a user error).
		if reconfigurer, ok := b.(backend.Reconfigurer); ok {
			err = backend.Retry(ctx, backend.DefaultBackoff, func(ctx context.Context) (err error) {
				inst, err = reconfigurer.Reconfigure(ctx, id, spec.Proxy)
				return err
			})
		} else {
			err = backend.Permanent(id.String(), "the %s backend cannot change a proxy's rules in place", id.Backend)
		}
	}
	if err != nil {
		resp.Diagnostics.Append(backendErrorDiagnostic("update", id.String(), err))
		return
	}
	resp.Diagnostics.Append(plan.setInstance(inst, r.data.defaultLabels)...)
	resp.Diagnostics.Append(plan.write(ctx, &resp.State, resp.State.Schema.Type())...)
	resp.Diagnostics.Append(recordReconfigurable(ctx, resp.Private, inst)...)
	resp.Diagnostics.Append(recordGoneMembers(ctx, resp.Private, inst)...)
	r.setIdentity(ctx, resp.Identity, id)
}

func (r *proxyResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state proxyResourceModel
	resp.Diagnostics.Append(state.read(ctx, req.State)...)
	timeout, d := state.Timeouts.Delete(ctx, defaultDeleteTimeout)
	resp.Diagnostics.Append(d...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx = r.owned(ctx, state)
	id, b, diags := r.existing(ctx, state.ID.ValueString())
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}

	// A destroy removes everything; the delete half of a replacement keeps what the successor adopts.
	destroy := plannedDestroy(ctx, req.Private, &resp.Diagnostics)
	successor, keeps := b.(backend.Successor)
	err := backend.Retry(ctx, backend.DefaultBackoff, func(ctx context.Context) error {
		if destroy || !keeps {
			return b.Delete(ctx, id)
		}
		return successor.DeleteForReplacement(ctx, id)
	})
	if err != nil && !backend.IsNotFound(err) {
		resp.Diagnostics.Append(backendErrorDiagnostic("delete", id.String(), err))
		// The state stays; the mark must not stay with it, or a later replacement would delete as a destroy.
		resp.Diagnostics.Append(resp.Private.SetKey(ctx, privatePlannedDestroy, nil)...)
	}
}

func (r *proxyResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if req.ID != "" {
		if _, diags := parseID(req.ID); diags.HasError() {
			resp.Diagnostics.Append(diags...)
			return
		}
	}
	resource.ImportStatePassthroughWithIdentity(ctx, path.Root("id"), path.Root("id"), req, resp)
}

// spec maps the plan onto the contract.
func (r *proxyResource) spec(ctx context.Context, m proxyResourceModel, uid string, writeOnly writeOnlyValues) (backend.Spec, diag.Diagnostics) {
	var diags diag.Diagnostics
	name := m.Name.ValueString()
	if m.Name.IsNull() || m.Name.IsUnknown() {
		name = backend.NameFromUID(uid)
	}
	own := map[string]string{}
	diags.Append(m.Labels.ElementsAs(ctx, &own, false)...)
	settings, d := m.settings(ctx, writeOnly)
	diags.Append(d...)
	placement := m.placement()
	if placement.Backend == "" {
		diags.AddError("No placement", "Set exactly one of "+strings.Join(backendNames(), ", ")+" on the egress_proxy resource to choose where it runs.")
	}
	return backend.Spec{
		Name: name, UID: uid, Owner: r.data.owner,
		Labels:    mergeLabels(r.data.defaultLabels, own),
		Placement: placement,
		Proxy:     settings,
	}, diags
}

func (r *proxyResource) setIdentity(ctx context.Context, identity interface {
	Set(context.Context, any) diag.Diagnostics
}, id backend.ProviderID) {
	if identity == nil {
		return
	}
	identity.Set(ctx, proxyIdentityModel{ID: types.StringValue(id.String())})
}

// existing resolves a state's id to the backend that holds the proxy.
func (r *proxyResource) existing(ctx context.Context, stateID string) (backend.ProviderID, backend.Backend, diag.Diagnostics) {
	id, diags := parseID(stateID)
	if diags.HasError() {
		return id, nil, diags
	}
	b, d := r.backendFor(ctx, id.Backend)
	diags.Append(d...)
	return id, b, diags
}

// owned puts on ctx whose the proxy in state must be, so that the backend refuses to read, change or delete
// an object of its name that another owner, or another proxy, made (see backend.Ownership). An imported
// proxy has no UID in state yet: only its owner is checked.
func (r *proxyResource) owned(ctx context.Context, state proxyResourceModel) context.Context {
	return backend.WithOwnership(ctx, backend.Ownership{Owner: r.data.owner, UID: state.UID.ValueString()})
}

func parseID(s string) (backend.ProviderID, diag.Diagnostics) {
	var diags diag.Diagnostics
	id, err := idForms.Parse(s)
	if err != nil {
		diags.AddAttributeError(path.Root("id"), "Invalid egress proxy id", err.Error())
	}
	return id, diags
}

func describe(spec backend.Spec) string {
	return fmt.Sprintf("egress proxy %q on %s target %q", spec.Name, spec.Placement.Backend, spec.Placement.Target)
}
