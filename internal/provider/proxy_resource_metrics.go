package provider

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Prometheus metrics (issue 40): metrics turns them on, with the ranges that may scrape them; metrics_url and
// squid_metrics_url say where. What serves them, and the metrics themselves, are internal/metrics's.

// metricsServer is a descriptor whose backend serves metrics (proxyconf.Settings.Metrics). On the others the
// plan refuses metrics, rather than an apply that would create a proxy serving none.
type metricsServer interface {
	servesMetrics()
}

// metricsPlacementRefuser is a metricsServer whose placement may still rule metrics out: refusesMetrics reads
// the configured placement and says why, or "".
type metricsPlacementRefuser interface {
	refusesMetrics(ctx context.Context, placement types.Object) string
}

// metricsModel is the metrics attribute.
type metricsModel struct {
	AllowedClientCIDRs types.Set   `tfsdk:"allowed_client_cidrs"`
	Port               types.Int64 `tfsdk:"port"`
	SquidPort          types.Int64 `tfsdk:"squid_port"`
}

// metricsBackends names, in prose, the backends whose descriptors are metricsServers.
func metricsBackends() string {
	var names []string
	for _, d := range backendDescriptors {
		if _, ok := d.(metricsServer); ok {
			names = append(names, "`"+string(d.kind())+"`")
		}
	}
	switch len(names) {
	case 0:
		return "no backend yet"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

func metricsAttributes() map[string]schema.Attribute {
	port := func(def int, what string) schema.Int64Attribute {
		return schema.Int64Attribute{
			Optional: true, Computed: true, Default: int64default.StaticInt64(int64(def)),
			MarkdownDescription: fmt.Sprintf("The port that serves %s at `%s`. Defaults to %d.", what, proxyconf.MetricsPath, def),
			Validators:          []validator.Int64{int64validator.Between(1, 65535), metricsPortValidator{}},
		}
	}
	urlDescription := func(what, port string) string {
		return fmt.Sprintf("Where %s are scraped: `http://<internal address>:<%s>%s` (on kubernetes the Service's DNS name stands for "+
			"the address); null without `metrics`.", what, port, proxyconf.MetricsPath)
	}
	return map[string]schema.Attribute{
		"metrics": schema.SingleNestedAttribute{
			Optional: true,
			MarkdownDescription: "Serve Prometheus metrics: `egress_proxy_*` (requests by decision, reason and rule set, bytes, durations; " +
				"counted from the access log, so `log_format` must be `json`) on `port`, and Squid's own counters (`squid_*`) on `squid_port`. " +
				"Both ports admit `allowed_client_cidrs` alone: the proxy's clients cannot read them unless listed. The metrics guide lists " +
				"every metric. Served on " + metricsBackends() + "; elsewhere the plan refuses it. " + reconfigurableDescription,
			PlanModifiers: []planmodifier.Object{objectRequiresReplaceUnlessReconfigurable()},
			Attributes: map[string]schema.Attribute{
				"allowed_client_cidrs": schema.SetAttribute{
					ElementType: types.StringType, Required: true,
					MarkdownDescription: fmt.Sprintf("The ranges that may scrape the metrics ports (your Prometheus), in CIDR notation; 1 to %d.", proxyconf.MaxAllowedClientCIDRs),
					Validators: []validator.Set{
						setvalidator.SizeBetween(1, proxyconf.MaxAllowedClientCIDRs),
						setvalidator.ValueStringsAre(attribute_validator.ClientCIDR()),
					},
				},
				"port":       port(proxyconf.DefaultMetricsPort, "`egress_proxy_*`"),
				"squid_port": port(proxyconf.DefaultSquidMetricsPort, "Squid's counters (`squid_*`)"),
			},
		},
		"metrics_url":       schema.StringAttribute{Computed: true, MarkdownDescription: urlDescription("`egress_proxy_*`", "metrics.port"), PlanModifiers: []planmodifier.String{metricsURLPlan{port: "port"}}},
		"squid_metrics_url": schema.StringAttribute{Computed: true, MarkdownDescription: urlDescription("Squid's counters", "metrics.squid_port"), PlanModifiers: []planmodifier.String{metricsURLPlan{port: "squid_port"}}},
	}
}

// metricsPortValidator refuses the ports the proxy keeps for itself on every backend.
type metricsPortValidator struct{}

func (metricsPortValidator) Description(context.Context) string {
	return "a port that is neither the health check's nor the cache manager's"
}
func (v metricsPortValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (metricsPortValidator) ValidateInt64(_ context.Context, req validator.Int64Request, resp *validator.Int64Response) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := proxyconf.ValidateMetricsPort(int(req.ConfigValue.ValueInt64())); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid metrics port", fmt.Sprintf("Attribute %s: %v.", req.Path, err))
	}
}

// metricsChecks refuses, at plan time, metrics on a backend that serves none, and metrics ports that clash
// with each other or with the proxy's port, each on the attribute at fault.
type metricsChecks struct{}

var _ resource.ConfigValidator = metricsChecks{}

const metricsChecksDescription = "metrics only on backends that serve them, on ports of their own"

func (metricsChecks) Description(context.Context) string         { return metricsChecksDescription }
func (metricsChecks) MarkdownDescription(context.Context) string { return metricsChecksDescription }

func (metricsChecks) ValidateResource(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var metrics *metricsModel
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("metrics"), &metrics)...)
	if resp.Diagnostics.HasError() || metrics == nil {
		return
	}
	for _, d := range backendDescriptors {
		var placement types.Object
		resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root(string(d.kind())), &placement)...)
		if placement.IsNull() {
			continue
		}
		if _, ok := d.(metricsServer); !ok {
			resp.Diagnostics.AddAttributeError(path.Root("metrics"), "Metrics not served on "+d.title(), fmt.Sprintf(
				"Attribute metrics: proxies on %s do not serve metrics yet; metrics are served on %s. Remove metrics, or place the proxy there.",
				d.title(), metricsBackends()))
			return
		}
		if r, ok := d.(metricsPlacementRefuser); ok {
			if why := r.refusesMetrics(ctx, placement); why != "" {
				resp.Diagnostics.AddAttributeError(path.Root("metrics"), "Metrics not served here", "Attribute metrics: "+why)
				return
			}
		}
	}
	var proxyPort types.Int64
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("port"), &proxyPort)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ports := map[string]types.Int64{"port": metrics.Port, "squid_port": metrics.SquidPort}
	defaults := map[string]int{"port": proxyconf.DefaultMetricsPort, "squid_port": proxyconf.DefaultSquidMetricsPort}
	value := func(name string) (int, bool) {
		v := ports[name]
		switch {
		case v.IsUnknown():
			return 0, false
		case v.IsNull():
			return defaults[name], true
		}
		return int(v.ValueInt64()), true
	}
	proxy := proxyconf.DefaultPort
	if proxyPort.IsUnknown() {
		proxy = 0
	} else if !proxyPort.IsNull() {
		proxy = int(proxyPort.ValueInt64())
	}
	for _, name := range []string{"port", "squid_port"} {
		if p, ok := value(name); ok && p == proxy {
			at := path.Root("metrics").AtName(name)
			resp.Diagnostics.AddAttributeError(at, "Metrics port taken", fmt.Sprintf(
				"Attribute %s: %d is the proxy's own port; give the metrics a port of their own.", at, p))
		}
	}
	if m, ok := value("port"); ok {
		if s, ok := value("squid_port"); ok && m == s {
			at := path.Root("metrics").AtName("squid_port")
			resp.Diagnostics.AddAttributeError(at, "Metrics port taken", fmt.Sprintf(
				"Attribute %s: %d is also metrics.port; mtail and the Squid exporter each need a port.", at, s))
		}
	}
	if proxy == proxyconf.DefaultManagerPort {
		resp.Diagnostics.AddAttributeError(path.Root("port"), "Port reserved with metrics", fmt.Sprintf(
			"Attribute port: a proxy with metrics keeps %d for Squid's cache manager, which the Squid exporter reads; choose another port.", proxy))
	}
}

// checkMetricsLogFormat refuses metrics with the text access log in a plan: mtail counts the JSON line. In the
// plan rather than the configuration, because an existing proxy that leaves log_format unset keeps "text".
func checkMetricsLogFormat(ctx context.Context, plan tfsdk.Plan) diag.Diagnostics {
	var metrics types.Object
	var format types.String
	diags := plan.GetAttribute(ctx, path.Root("metrics"), &metrics)
	diags.Append(plan.GetAttribute(ctx, path.Root("log_format"), &format)...)
	if diags.HasError() || metrics.IsNull() || format.IsUnknown() || format.ValueString() == string(proxyconf.LogFormatJSON) {
		return diags
	}
	diags.AddAttributeError(path.Root("metrics"), "Metrics need the JSON access log", fmt.Sprintf(
		"Attribute metrics: the metrics count the JSON access log, and this proxy logs %q: set log_format = \"json\" (in place where "+
			"the backend can reconfigure the proxy), or remove metrics.", format.ValueString()))
	return diags
}

// metricsSettings puts the planned metrics into s.
func (m proxyResourceModel) metricsSettings(ctx context.Context, s *proxyconf.Settings) diag.Diagnostics {
	if m.Metrics == nil {
		return nil
	}
	out := &proxyconf.MetricsSettings{Port: int(m.Metrics.Port.ValueInt64()), SquidPort: int(m.Metrics.SquidPort.ValueInt64())}
	diags := m.Metrics.AllowedClientCIDRs.ElementsAs(ctx, &out.AllowedClientCIDRs, false)
	sort.Strings(out.AllowedClientCIDRs)
	s.Metrics = out
	return diags
}

// setMetricsSettings records the metrics the backend reports.
func (m *proxyResourceModel) setMetricsSettings(s proxyconf.Settings) diag.Diagnostics {
	if s.Metrics == nil {
		m.Metrics = nil
		return nil
	}
	var diags diag.Diagnostics
	port, squidPort := s.Metrics.Ports()
	m.Metrics = &metricsModel{
		AllowedClientCIDRs: stringSet(s.Metrics.AllowedClientCIDRs, &diags),
		Port:               types.Int64Value(int64(port)),
		SquidPort:          types.Int64Value(int64(squidPort)),
	}
	return diags
}

// setMetricsURLs sets metrics_url and squid_metrics_url from the instance's address and the model's metrics.
func (m *proxyResourceModel) setMetricsURLs(inst backend.Instance) {
	m.MetricsURL, m.SquidMetricsURL = types.StringNull(), types.StringNull()
	host := inst.InternalAddress
	if inst.InternalName != "" {
		host = inst.InternalName
	}
	if m.Metrics == nil || host == "" {
		return
	}
	url := func(port types.Int64) types.String {
		return types.StringValue("http://" + net.JoinHostPort(host, strconv.FormatInt(port.ValueInt64(), 10)) + proxyconf.MetricsPath)
	}
	m.MetricsURL, m.SquidMetricsURL = url(m.Metrics.Port), url(m.Metrics.SquidPort)
}

// metricsDiffer tells whether metrics differ between m and prior: a change Reconfigure makes in place.
func (m proxyResourceModel) metricsDiffer(prior proxyResourceModel) bool {
	if (m.Metrics == nil) != (prior.Metrics == nil) {
		return true
	}
	return m.Metrics != nil && (!m.Metrics.AllowedClientCIDRs.Equal(prior.Metrics.AllowedClientCIDRs) ||
		!m.Metrics.Port.Equal(prior.Metrics.Port) || !m.Metrics.SquidPort.Equal(prior.Metrics.SquidPort))
}

// metricsURLPlan plans a metrics URL: null without metrics, the state's while the port it names stays, and
// unknown otherwise (a new port, or metrics just turned on).
type metricsURLPlan struct {
	port string // the metrics attribute holding the URL's port
}

func (p metricsURLPlan) Description(context.Context) string {
	return "Null without metrics; kept from the state while metrics." + p.port + " stays."
}
func (p metricsURLPlan) MarkdownDescription(ctx context.Context) string { return p.Description(ctx) }

func (p metricsURLPlan) PlanModifyString(ctx context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	var metrics types.Object
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("metrics"), &metrics)...)
	if resp.Diagnostics.HasError() || metrics.IsUnknown() {
		return
	}
	if metrics.IsNull() {
		resp.PlanValue = types.StringNull()
		return
	}
	if req.State.Raw.IsNull() || req.StateValue.IsNull() || !resp.PlanValue.IsUnknown() {
		return
	}
	var planned, prior types.Int64
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("metrics").AtName(p.port), &planned)...)
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("metrics").AtName(p.port), &prior)...)
	if resp.Diagnostics.HasError() || planned.IsUnknown() || !planned.Equal(prior) {
		return
	}
	// The URL ends in ":<port>/metrics" for the port the state has: keep it.
	if strings.HasSuffix(req.StateValue.ValueString(), ":"+strconv.FormatInt(prior.ValueInt64(), 10)+proxyconf.MetricsPath) {
		resp.PlanValue = req.StateValue
	}
}
