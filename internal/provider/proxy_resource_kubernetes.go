package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
)

// kubernetesPlacementExtra are the Kubernetes placement settings beyond cluster and namespace.
type kubernetesPlacementExtra struct {
	Replicas      types.Int64       `tfsdk:"replicas"`
	Image         types.String      `tfsdk:"image"`
	NodeSelector  types.Map         `tfsdk:"node_selector"`
	Tolerations   []tolerationModel `tfsdk:"tolerations"`
	Resources     *resourcesModel   `tfsdk:"resources"`
	ServiceType   types.String      `tfsdk:"service_type"`
	NetworkPolicy types.Bool        `tfsdk:"network_policy"`
}

type tolerationModel struct {
	Key      types.String `tfsdk:"key"`
	Operator types.String `tfsdk:"operator"`
	Value    types.String `tfsdk:"value"`
	Effect   types.String `tfsdk:"effect"`
}

type resourcesModel struct {
	Requests types.Map `tfsdk:"requests"`
	Limits   types.Map `tfsdk:"limits"`
}

// kubernetesPlacementSchema is the resource's kubernetes block: where on which cluster, then how the pods run.
func kubernetesPlacementSchema() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		Optional: true,
		MarkdownDescription: "Run the proxy as a Deployment on a Kubernetes cluster configured on the provider, " +
			"with its ConfigMap, Secret (with `auth` or `tls`), Service and NetworkPolicy. Changing anything here but `replicas` replaces the proxy.",
		PlanModifiers: []planmodifier.Object{requiresReplaceExcept("replicas")},
		Attributes: mergeAttributes(map[string]schema.Attribute{
			"cluster": schema.StringAttribute{
				Optional:            true,
				Computed:            true,
				Default:             stringdefault.StaticString(kubernetes.DefaultClusterName),
				MarkdownDescription: "Name of a cluster in the provider's `kubernetes.clusters`. Defaults to `" + kubernetes.DefaultClusterName + "`.",
				Validators:          []validator.String{attribute_validator.NameOf("kubernetes cluster name")},
			},
			"namespace": schema.StringAttribute{
				Required:            true,
				MarkdownDescription: "Namespace of the proxy's objects.",
				Validators:          []validator.String{attribute_validator.NameOf("kubernetes namespace")},
			},
		}, kubernetesPlacementAttributes()),
	}
}

func kubernetesPlacementAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"replicas": schema.Int64Attribute{Optional: true, Computed: true, Default: int64default.StaticInt64(kubernetes.DefaultReplicas),
			MarkdownDescription: fmt.Sprintf("Proxy pods behind the Service; changes in place. Defaults to `%d`.", kubernetes.DefaultReplicas), Validators: []validator.Int64{int64validator.Between(1, 100)}},
		"image": schema.StringAttribute{Optional: true,
			MarkdownDescription: "Squid image; the cluster's `image` when unset. " + defaultImageDescription,
			Validators:          []validator.String{kubernetesImage()}},
		"node_selector": schema.MapAttribute{Optional: true, ElementType: types.StringType,
			MarkdownDescription: "Node labels the pods must run on, such as egress nodes with known addresses.",
			Validators: []validator.Map{
				mapvalidator.KeysAre(nodeSelectorKey()),
				mapvalidator.ValueStringsAre(nodeSelectorValue()),
			}},
		"tolerations": schema.ListNestedAttribute{Optional: true, MarkdownDescription: "Taints the pods tolerate.",
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"key":      schema.StringAttribute{Optional: true, MarkdownDescription: "Taint key; empty with `Exists` matches every taint."},
				"operator": schema.StringAttribute{Optional: true, MarkdownDescription: "`Equal` or `Exists`.", Validators: []validator.String{stringvalidator.OneOf("Equal", "Exists")}},
				"value":    schema.StringAttribute{Optional: true, MarkdownDescription: "Taint value for `Equal`."},
				"effect":   schema.StringAttribute{Optional: true, MarkdownDescription: "`NoSchedule`, `PreferNoSchedule` or `NoExecute`; empty matches all.", Validators: []validator.String{stringvalidator.OneOf("NoSchedule", "PreferNoSchedule", "NoExecute")}},
			}}},
		"resources": schema.SingleNestedAttribute{Optional: true,
			MarkdownDescription: "The Squid container's resource requests and limits: `cpu`, `memory`, `ephemeral-storage`, `hugepages-<size>` " +
				"or an extended resource such as `example.com/dongle`, each a Kubernetes quantity. No request may exceed its limit.",
			Validators: []validator.Object{kubernetesRequestsWithinLimits()},
			Attributes: map[string]schema.Attribute{
				"requests": schema.MapAttribute{Optional: true, ElementType: types.StringType, MarkdownDescription: "Such as `{ cpu = \"100m\", memory = \"128Mi\" }`.",
					Validators: []validator.Map{kubernetesResources()}},
				"limits": schema.MapAttribute{Optional: true, ElementType: types.StringType, MarkdownDescription: "Such as `{ memory = \"256Mi\" }`.",
					Validators: []validator.Map{kubernetesResources()}},
			}},
		"service_type": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(kubernetes.DefaultServiceType),
			MarkdownDescription: "The Service's type: `ClusterIP`, `NodePort` or `LoadBalancer`. `NodePort` and `LoadBalancer` keep the clients' " +
				"addresses for the client check (`externalTrafficPolicy: Local`); `LoadBalancer` also admits only `allowed_client_cidrs` " +
				"(`loadBalancerSourceRanges`). Defaults to `" + kubernetes.DefaultServiceType + "`.",
			Validators: []validator.String{stringvalidator.OneOf(kubernetes.ServiceTypes...)}},
		"network_policy": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(kubernetes.DefaultNetworkPolicy),
			MarkdownDescription: "A NetworkPolicy, a backstop below Squid where the cluster's network plugin enforces policies: only " +
				"`allowed_client_cidrs` reach the proxy port, and the proxy's pods reach DNS (port 53) and no address Squid refuses " +
				"(the always-refused ranges, and private ranges outside `allowed_private_cidrs`). With `metrics`, only " +
				"`metrics.allowed_client_cidrs` reach the metrics ports; a proxy with `metrics` needs it, since nothing else keeps " +
				"those ports to those ranges. " +
				fmt.Sprintf("Defaults to `%t`.", kubernetes.DefaultNetworkPolicy),
			Validators: []validator.Bool{kubernetesMetricsNeedPolicy{}}},
	}
}

func (m *kubernetesPlacementModel) backendPlacement() *kubernetes.Options {
	p := &kubernetes.Options{
		Replicas: int(m.Replicas.ValueInt64()), Image: m.Image.ValueString(), NodeSelector: stringMap(m.NodeSelector),
		ServiceType: m.ServiceType.ValueString(), NetworkPolicy: m.NetworkPolicy.ValueBool(),
	}
	if m.NetworkPolicy.IsNull() || m.NetworkPolicy.IsUnknown() {
		p.NetworkPolicy = kubernetes.DefaultNetworkPolicy
	}
	for _, t := range m.Tolerations {
		p.Tolerations = append(p.Tolerations, kubernetes.Toleration{Key: t.Key.ValueString(), Operator: t.Operator.ValueString(), Value: t.Value.ValueString(), Effect: t.Effect.ValueString()})
	}
	if m.Resources != nil {
		p.Requests, p.Limits = stringMap(m.Resources.Requests), stringMap(m.Resources.Limits)
	}
	return p
}

// kubernetesPlacementFrom maps a placement read back (an import) onto the model; what the user would leave
// unset reads back null.
func kubernetesPlacementFrom(p *kubernetes.Options) kubernetesPlacementExtra {
	if p == nil {
		p = &kubernetes.Options{Replicas: kubernetes.DefaultReplicas, ServiceType: kubernetes.DefaultServiceType, NetworkPolicy: kubernetes.DefaultNetworkPolicy}
	}
	e := kubernetesPlacementExtra{
		Replicas: types.Int64Value(int64(p.Replicas)), Image: optionalString(p.Image), NodeSelector: mapOrNull(p.NodeSelector),
		ServiceType: types.StringValue(p.ServiceType), NetworkPolicy: types.BoolValue(p.NetworkPolicy),
	}
	// The image some provider version defaulted to reads as none: a proxy made with an earlier release's
	// default image imports as a configuration that names no image, like the proxies that release made.
	if kubernetes.IsDefaultImage(p.Image) {
		e.Image = types.StringNull()
	}
	for _, t := range p.Tolerations {
		e.Tolerations = append(e.Tolerations, tolerationModel{Key: optionalString(t.Key), Operator: optionalString(t.Operator), Value: optionalString(t.Value), Effect: optionalString(t.Effect)})
	}
	if len(p.Requests) > 0 || len(p.Limits) > 0 {
		e.Resources = &resourcesModel{Requests: mapOrNull(p.Requests), Limits: mapOrNull(p.Limits)}
	}
	return e
}

func stringMap(m types.Map) map[string]string {
	if m.IsNull() || m.IsUnknown() {
		return nil
	}
	out := map[string]string{}
	for k, v := range m.Elements() {
		if s, ok := v.(types.String); ok {
			out[k] = s.ValueString()
		}
	}
	return out
}

func mapOrNull(m map[string]string) types.Map {
	if len(m) == 0 {
		return types.MapNull(types.StringType)
	}
	vals := make(map[string]attr.Value, len(m))
	for k, v := range m {
		vals[k] = types.StringValue(v)
	}
	return types.MapValueMust(types.StringType, vals)
}

// kubernetesMetricsNeedPolicy refuses network_policy = false beside metrics at plan time: mtail and the Squid
// exporter answer whoever reaches their ports, and the NetworkPolicy alone keeps those ports to
// metrics.allowed_client_cidrs. The backend refuses it too (Permanent, before anything is written); here the
// plan says so on the attribute.
type kubernetesMetricsNeedPolicy struct{}

const kubernetesMetricsNeedPolicyText = "a proxy with metrics needs its NetworkPolicy: it alone keeps the metrics ports to metrics.allowed_client_cidrs"

func (kubernetesMetricsNeedPolicy) Description(context.Context) string {
	return kubernetesMetricsNeedPolicyText
}

func (v kubernetesMetricsNeedPolicy) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (kubernetesMetricsNeedPolicy) ValidateBool(ctx context.Context, req validator.BoolRequest, resp *validator.BoolResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() || req.ConfigValue.ValueBool() {
		return
	}
	var metrics types.Object
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("metrics"), &metrics)...)
	if metrics.IsNull() || metrics.IsUnknown() {
		return
	}
	resp.Diagnostics.AddAttributeError(req.Path, "Metrics need the NetworkPolicy",
		kubernetesMetricsNeedPolicyText+": set network_policy = true (the default), or remove metrics.")
}
