package provider

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/action"
	"github.com/hashicorp/terraform-plugin-framework/action/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
)

var _ action.ActionWithConfigure = (*proxyGCAction)(nil)

// defaultMaxDeletions bounds one run when the configuration sets no bound: a mistaken known_ids (say, an
// empty list from a failed expression) then costs at most this many proxies, not all of them.
const defaultMaxDeletions = 10

// NewProxyGCAction returns the egress_proxy_gc action: it deletes the owner's orphans.
func NewProxyGCAction() action.Action { return &proxyGCAction{} }

type proxyGCAction struct {
	data *providerData
}

type proxyGCModel struct {
	DryRun       types.Bool   `tfsdk:"dry_run"`
	MaxDeletions types.Int64  `tfsdk:"max_deletions"`
	KnownIDs     types.Set    `tfsdk:"known_ids"`
	MinAge       types.String `tfsdk:"min_age"`
	Backends     types.List   `tfsdk:"backends"`
}

func (a *proxyGCAction) Metadata(_ context.Context, req action.MetadataRequest, resp *action.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_proxy_gc"
}

func (a *proxyGCAction) Schema(_ context.Context, _ action.SchemaRequest, resp *action.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Deletes the orphans of the provider's `owner`: proxies whose id is not in `known_ids` and that are older " +
			"than `min_age`, the ones `egress_proxy_orphans` lists. Each is deleted through the backend as `terraform destroy` would " +
			"delete it, with everything made for it (volumes, seed disks, config objects, reserved addresses). By default it only " +
			"reports what it would delete (`dry_run`). A scope that cannot be listed, or a proxy that cannot be deleted, stops " +
			"nothing else and is reported.",
		Attributes: map[string]schema.Attribute{
			"dry_run": schema.BoolAttribute{Optional: true,
				MarkdownDescription: "Only report what would be deleted. Defaults to `true`: set it to `false` to delete."},
			"max_deletions": schema.Int64Attribute{Optional: true,
				MarkdownDescription: fmt.Sprintf("Delete at most this many proxies in one run; the rest are reported and left "+
					"for the next run. Defaults to `%d`.", defaultMaxDeletions),
				Validators: []validator.Int64{int64validator.AtLeast(1)}},
			"known_ids": schema.SetAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Ids of the proxies that are still wanted, usually `[for p in egress_proxy.all : p.id]`; never deleted.",
				Validators:          []validator.Set{setvalidator.ValueStringsAre(attribute_validator.ProviderID(idForms))}},
			"min_age": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Only proxies at least this old are deleted, so creates in flight are spared. A Go duration; defaults to `" +
					defaultMinAge.String() + "`.",
				Validators: []validator.String{attribute_validator.Duration()}},
			"backends": schema.ListAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Backends to collect on; every configured backend when unset.",
				Validators:          []validator.List{listvalidator.ValueStringsAre(stringvalidator.OneOf(kindNames()...)), listvalidator.UniqueValues()}},
		},
	}
}

func (a *proxyGCAction) Configure(_ context.Context, req action.ConfigureRequest, resp *action.ConfigureResponse) {
	data, diags := providerDataFrom(req.ProviderData)
	resp.Diagnostics.Append(diags...)
	a.data = data
}

// gcRun is one invocation's settings, read from the configuration.
type gcRun struct {
	filter       proxyFilter
	dryRun       bool
	maxDeletions int
}

func (m proxyGCModel) run(ctx context.Context) (gcRun, diag.Diagnostics) {
	var diags diag.Diagnostics
	r := gcRun{
		filter: proxyFilter{orphanedOnly: true, minAge: minAgeOr(m.MinAge, defaultMinAge)},
		dryRun: m.DryRun.IsNull() || m.DryRun.ValueBool(), maxDeletions: defaultMaxDeletions,
	}
	if !m.MaxDeletions.IsNull() {
		r.maxDeletions = int(m.MaxDeletions.ValueInt64())
	}
	var d diag.Diagnostics
	r.filter.known, d = knownIDSet(ctx, m.KnownIDs)
	diags.Append(d...)
	diags.Append(m.Backends.ElementsAs(ctx, &r.filter.kinds, false)...)
	return r, diags
}

func (a *proxyGCAction) Invoke(ctx context.Context, req action.InvokeRequest, resp *action.InvokeResponse) {
	var m proxyGCModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	run, diags := m.run(ctx)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	if a.data == nil {
		resp.Diagnostics.AddError("Provider not configured", "The egress provider was not configured before the action: this is a bug in the provider or Terraform.")
		return
	}
	progress := func(format string, args ...any) {
		resp.SendProgress(action.InvokeProgressEvent{Message: fmt.Sprintf(format, args...)})
	}

	listCtx, cancel := context.WithTimeout(ctx, defaultReadTimeout)
	instances, failed := a.data.listOwned(listCtx, run.filter.kinds)
	cancel()
	for _, f := range failed {
		progress("scope not listed, its orphans are not collected this run: %s", scopeFailureText(f))
	}
	now := time.Now()
	orphans := run.filter.selectFrom(instances, now)
	chosen, leftOver := orphans, []backend.Instance(nil)
	if len(orphans) > run.maxDeletions {
		chosen, leftOver = orphans[:run.maxDeletions], orphans[run.maxDeletions:]
	}

	var deleted, failedDeletes []string
	for i, inst := range chosen {
		name := displayName(inst, now)
		if run.dryRun {
			progress("would delete %s", name)
			continue
		}
		if ctx.Err() != nil {
			// Interrupted (Ctrl-C): the rest would each fail at once with the same cancellation.
			resp.Diagnostics.AddError("Garbage collection interrupted", fmt.Sprintf(
				"The run was cancelled after %d of %d deletions; the %d orphan(s) left were not tried. Invoke the action again to finish.",
				i, len(chosen), len(chosen)-i))
			break
		}
		progress("deleting %d/%d: %s", i+1, len(chosen), name)
		if err := a.delete(ctx, inst); err != nil {
			// One proxy that cannot be deleted must not keep the others: it is reported at the end.
			resp.Diagnostics.Append(backendErrorDiagnostic("delete orphaned", inst.ID.String(), err))
			failedDeletes = append(failedDeletes, inst.ID.String())
			progress("could not delete %s (class %s), continuing", inst.ID, backend.ClassOf(err))
			continue
		}
		deleted = append(deleted, inst.ID.String())
		progress("deleted %d/%d: %s", i+1, len(chosen), inst.ID)
	}
	for _, inst := range leftOver {
		progress("left for a later run (max_deletions = %d): %s", run.maxDeletions, displayName(inst, now))
	}
	progress("%s", gcSummary(run, len(orphans), len(chosen), deleted, failedDeletes, len(failed)))
	if len(failed) > 0 {
		resp.Diagnostics.Append(incompleteListDiagnostic(failed, "invoke the action again"))
	}
}

// delete deletes one orphan the owner's listing reported, as long as it is still that owner's and that proxy's:
// between the list and the delete, the name may have gone to another proxy.
func (a *proxyGCAction) delete(ctx context.Context, inst backend.Instance) error {
	id := inst.ID
	ctx = backend.WithOwnership(ctx, backend.Ownership{Owner: a.data.owner, UID: inst.UID})
	b, err := a.data.registry.Backend(ctx, id.Backend)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, defaultDeleteTimeout)
	defer cancel()
	err = backend.Retry(ctx, backend.DefaultBackoff, func(ctx context.Context) error { return b.Delete(ctx, id) })
	if backend.IsNotFound(err) {
		return nil // gone already, by another run or by hand: what the action wanted
	}
	return err
}

// gcSummary is the run's last progress message: what was found, what was done, what was left and why.
func gcSummary(run gcRun, found, chosen int, deleted, failedDeletes []string, failedScopes int) string {
	var b strings.Builder
	if run.dryRun {
		fmt.Fprintf(&b, "dry run: %d orphan(s) found, %d would be deleted, nothing was deleted (set dry_run = false to delete)", found, chosen)
	} else {
		fmt.Fprintf(&b, "%d orphan(s) found, %d deleted", found, len(deleted))
		if len(failedDeletes) > 0 {
			fmt.Fprintf(&b, ", %d could not be deleted (%s)", len(failedDeletes), strings.Join(failedDeletes, ", "))
		}
	}
	if left := found - chosen; left > 0 {
		fmt.Fprintf(&b, "; %d left for a later run by max_deletions = %d", left, run.maxDeletions)
	}
	if failedScopes > 0 {
		fmt.Fprintf(&b, "; %d scope(s) could not be listed", failedScopes)
	}
	return b.String()
}
