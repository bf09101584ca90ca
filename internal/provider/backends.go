package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	providerschema "github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// backendDescriptors are the backends this provider offers, in the order its documentation shows them. Adding
// a backend is its package under internal/backend, its descriptor file here (backend_<kind>.go) and its line
// in this table: the provider block, the resource attribute, ids, imports, plan-time checks and the docs'
// lists of backends all come from the table.
var backendDescriptors = []backendDescriptor{
	kubernetesDescriptor{},
	gcpDescriptor{},
	kvmDescriptor{},
	awsDescriptor{},
}

// backendDescriptor is everything the Terraform layer knows of one backend. The shared resource, provider and
// data source code loop over backendDescriptors and never name a backend.
type backendDescriptor interface {
	// kind is the backend's kind: the name of its provider block and of its egress_proxy attribute, and the
	// first part of its ids.
	kind() backend.Kind
	// idForm is how the backend's ids look (its package's IDForm).
	idForm() backend.IDForm
	// title names the backend in prose, such as "KVM/libvirt".
	title() string

	// providerSchema is the provider block's attribute: the backend's targets and how to reach them.
	providerSchema() providerschema.SingleNestedAttribute
	// readProviderBlock reads that block, which the configuration sets; version is the provider's own.
	readProviderBlock(ctx context.Context, block types.Object, version string) (providerBlock, diag.Diagnostics)

	// placementSchema is the egress_proxy attribute that places a proxy on this backend, with its validators
	// and plan modifiers: the backend's plan-time rules.
	placementSchema() schema.SingleNestedAttribute
	// targetAttribute names the attribute of the placement that names a provider-configured target.
	targetAttribute() string
	// readPlacement reads that attribute, which the plan, state or configuration sets.
	readPlacement(ctx context.Context, block types.Object) (placementModel, diag.Diagnostics)
	// importedPlacement builds the attribute of an imported proxy from the placement Get read back, with what
	// a configuration that leaves a setting unset reads as.
	importedPlacement(p backend.Placement) placementModel

	// egressAddressNote and ingressAddressNote say what the backend reports as egress_address and
	// ingress_address, for the resource's documentation.
	egressAddressNote() string
	ingressAddressNote() string
}

// providerBlock is one backend's provider block, as its descriptor read it.
type providerBlock interface {
	// factory builds the backend, which connects on first use.
	factory() backend.Factory
	// targets are the names of the targets the block configures; enumerated is false where the block does not
	// list them all (a resource may then name any target).
	targets() (names []string, enumerated bool)
}

// placementModel is one backend's egress_proxy attribute, as its descriptor read it.
type placementModel interface {
	// placement maps the attribute onto the contract; values left unset take the backend's defaults.
	placement() backend.Placement
	// setResolved records what the backend filled in where the configuration left it to the backend.
	setResolved(inst backend.Instance)
}

// descriptorOf finds the descriptor of kind.
func descriptorOf(kind backend.Kind) (backendDescriptor, bool) {
	for _, d := range backendDescriptors {
		if d.kind() == kind {
			return d, true
		}
	}
	return nil, false
}

// idForms are the id forms of every backend, for parsing and documenting ids.
var idForms = func() backend.IDForms {
	forms := make(backend.IDForms, len(backendDescriptors))
	for i, d := range backendDescriptors {
		forms[i] = d.idForm()
	}
	return forms
}()

// backendKinds lists every kind, in the table's order.
func backendKinds() []backend.Kind {
	kinds := make([]backend.Kind, len(backendDescriptors))
	for i, d := range backendDescriptors {
		kinds[i] = d.kind()
	}
	return kinds
}

// orList joins names as prose: "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// readObject reads a backend's block into its model type.
func readObject[T any](ctx context.Context, block types.Object) (*T, diag.Diagnostics) {
	m := new(T)
	diags := block.As(ctx, m, basetypes.ObjectAsOptions{})
	return m, diags
}

// splitBackendBlocks reads obj, a provider configuration or an egress_proxy, whose attributes are shared
// ones and one per backend: the shared ones into shared (a pointer to a struct with a field for each), the
// backends' that are set into the map it returns, by kind.
func splitBackendBlocks(ctx context.Context, obj types.Object, shared any) (map[backend.Kind]types.Object, diag.Diagnostics) {
	var diags diag.Diagnostics
	attrTypes := obj.AttributeTypes(ctx)
	rest, restTypes := map[string]attr.Value{}, map[string]attr.Type{}
	blocks := map[backend.Kind]types.Object{}
	for name, v := range obj.Attributes() {
		if _, isBackend := descriptorOf(backend.Kind(name)); !isBackend {
			rest[name], restTypes[name] = v, attrTypes[name]
			continue
		}
		block, ok := v.(types.Object)
		if !ok {
			diags.AddError("Unexpected schema", fmt.Sprintf("attribute %s is a %T, not an object: this is a bug in the provider", name, v))
			continue
		}
		if !block.IsNull() {
			blocks[backend.Kind(name)] = block
		}
	}
	sharedObj, d := types.ObjectValue(restTypes, rest)
	diags.Append(d...)
	if diags.HasError() {
		return nil, diags
	}
	diags.Append(sharedObj.As(ctx, shared, basetypes.ObjectAsOptions{})...)
	return blocks, diags
}

// joinBackendBlocks is the inverse of splitBackendBlocks: the object of type typ (the schema's) with shared's
// fields and blocks' values, the backends' attributes not in blocks null.
func joinBackendBlocks(ctx context.Context, typ attr.Type, shared any, blocks map[backend.Kind]any) (types.Object, diag.Diagnostics) {
	var diags diag.Diagnostics
	objType, ok := typ.(attr.TypeWithAttributeTypes)
	if !ok {
		diags.AddError("Unexpected schema", fmt.Sprintf("the schema's type is %T, not an object: this is a bug in the provider", typ))
		return types.ObjectNull(nil), diags
	}
	attrTypes := objType.AttributeTypes()
	restTypes := map[string]attr.Type{}
	for name, t := range attrTypes {
		if _, isBackend := descriptorOf(backend.Kind(name)); !isBackend {
			restTypes[name] = t
		}
	}
	sharedObj, d := types.ObjectValueFrom(ctx, restTypes, shared)
	diags.Append(d...)
	if diags.HasError() {
		return types.ObjectNull(attrTypes), diags
	}
	attrs := sharedObj.Attributes()
	for _, kind := range backendKinds() {
		blockType, ok := attrTypes[string(kind)].(attr.TypeWithAttributeTypes)
		if !ok {
			continue
		}
		if m, set := blocks[kind]; set {
			attrs[string(kind)], d = types.ObjectValueFrom(ctx, blockType.AttributeTypes(), m)
			diags.Append(d...)
		} else {
			attrs[string(kind)] = types.ObjectNull(blockType.AttributeTypes())
		}
	}
	out, d := types.ObjectValue(attrTypes, attrs)
	diags.Append(d...)
	return out, diags
}
