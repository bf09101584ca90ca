package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	providerschema "github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
)

// kubernetesDescriptor is the kubernetes backend in the Terraform layer: its provider block is in
// provider_kubernetes.go, its egress_proxy attribute in proxy_resource_kubernetes.go.
type kubernetesDescriptor struct{}

func (kubernetesDescriptor) kind() backend.Kind     { return kubernetes.Kind }
func (kubernetesDescriptor) idForm() backend.IDForm { return kubernetes.IDForm }
func (kubernetesDescriptor) title() string          { return "Kubernetes" }

// egressAddressMovesInPlace: egress_address is the address of the nodes the pods run on, and an update in
// place (new rules roll the pods out, a new replica count adds some) can move them.
func (kubernetesDescriptor) egressAddressMovesInPlace() {}

// servesMetrics: the proxy's pod runs mtail and the Squid exporter beside Squid (metricsServer).
func (kubernetesDescriptor) servesMetrics() {}

var _ addressMover = kubernetesDescriptor{}

func (kubernetesDescriptor) providerSchema() providerschema.SingleNestedAttribute {
	return kubernetesProviderSchema()
}

// readProviderBlock also records the image published with this provider version: the proxies' default.
func (kubernetesDescriptor) readProviderBlock(ctx context.Context, block types.Object, version string) (providerBlock, diag.Diagnostics) {
	m, diags := readObject[kubernetesProviderModel](ctx, block)
	m.releaseImage = kubernetes.ReleaseImage(version)
	return m, diags
}

func (kubernetesDescriptor) placementSchema() schema.SingleNestedAttribute {
	return kubernetesPlacementSchema()
}
func (kubernetesDescriptor) targetAttribute() string { return "cluster" }

func (kubernetesDescriptor) readPlacement(ctx context.Context, block types.Object) (placementModel, diag.Diagnostics) {
	return readObject[kubernetesPlacementModel](ctx, block)
}

func (kubernetesDescriptor) importedPlacement(p backend.Placement) placementModel {
	read, _ := p.Options.(*kubernetes.Options)
	return &kubernetesPlacementModel{Cluster: types.StringValue(p.Target), Namespace: types.StringValue(p.Scope),
		kubernetesPlacementExtra: kubernetesPlacementFrom(read)}
}

func (kubernetesDescriptor) egressAddressNote() string {
	return "`kubernetes`: the public address of the node the proxy's pods run on: the node's `ExternalIP`, or an `InternalIP` that is " +
		"a public address. Null when the nodes have only private addresses (traffic then leaves through the cluster's NAT or egress " +
		"gateway, whose address its operator knows), when the pods run on nodes with different addresses, or when the credentials " +
		"may not `get` Nodes (cluster-scoped: a namespace Role cannot grant it, and the proxy works without it)."
}

func (kubernetesDescriptor) ingressAddressNote() string {
	return "`kubernetes`: the `LoadBalancer` Service's ingress IP or host name (null with `ClusterIP`, and with " +
		"`NodePort`, where clients use any node's address and the Service's node port)."
}

func (m *kubernetesProviderModel) factory() backend.Factory { return kubernetesFactory(m) }

func (m *kubernetesProviderModel) targets() ([]string, bool) {
	return kubernetesBackendConfig(m).ClusterNames(), true
}

type kubernetesPlacementModel struct {
	Cluster   types.String `tfsdk:"cluster"`
	Namespace types.String `tfsdk:"namespace"`
	// The rest is in proxy_resource_kubernetes.go.
	kubernetesPlacementExtra
}

// placement maps the attribute onto the contract; empty values take the backend's defaults.
func (m *kubernetesPlacementModel) placement() backend.Placement {
	return backend.Placement{Backend: kubernetes.Kind, Target: m.Cluster.ValueString(), Scope: m.Namespace.ValueString(),
		Options: m.backendPlacement()}
}

// setResolved has nothing to record: the cluster and namespace have defaults in the schema.
func (m *kubernetesPlacementModel) setResolved(backend.Instance) {}
