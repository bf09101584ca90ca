package provider

import (
	"context"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
)

// The provider-level settings of the gcp backend, with the conventions of the HashiCorp Google provider.

type gcpProviderModel struct {
	Project                   types.String               `tfsdk:"project"`
	Projects                  map[string]gcpProjectModel `tfsdk:"projects"`
	Credentials               types.String               `tfsdk:"credentials"`
	AccessToken               types.String               `tfsdk:"access_token"`
	ImpersonateServiceAccount types.String               `tfsdk:"impersonate_service_account"`
	DefaultZone               types.String               `tfsdk:"default_zone"`
	Region                    types.String               `tfsdk:"region"`
	ComputeEndpoint           types.String               `tfsdk:"compute_endpoint"`
	SecretManagerEndpoint     types.String               `tfsdk:"secret_manager_endpoint"`
	ResourceManagerEndpoint   types.String               `tfsdk:"resource_manager_endpoint"`
}

type gcpProjectModel struct {
	Credentials               types.String `tfsdk:"credentials"`
	AccessToken               types.String `tfsdk:"access_token"`
	ImpersonateServiceAccount types.String `tfsdk:"impersonate_service_account"`
	DefaultZone               types.String `tfsdk:"default_zone"`
	Region                    types.String `tfsdk:"region"`
	ComputeEndpoint           types.String `tfsdk:"compute_endpoint"`
	SecretManagerEndpoint     types.String `tfsdk:"secret_manager_endpoint"`
	ResourceManagerEndpoint   types.String `tfsdk:"resource_manager_endpoint"`
}

// Environment fallbacks, in the order the Google provider reads them.
var (
	gcpProjectEnvVars     = []string{"GOOGLE_PROJECT", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"}
	gcpCredentialsEnvVars = []string{"GOOGLE_CREDENTIALS", "GOOGLE_APPLICATION_CREDENTIALS"}
	gcpAccessTokenEnvVars = []string{"GOOGLE_OAUTH_ACCESS_TOKEN"}
)

// gcpProjectAttributes are the settings of one project; perProject says they sit in gcp.projects, where an
// unset one takes the top-level value rather than an environment variable.
func gcpProjectAttributes(perProject bool) map[string]schema.Attribute {
	fallback := func(top string) string {
		if perProject {
			return " The top-level `gcp` value when unset."
		}
		return top
	}
	return map[string]schema.Attribute{
		"credentials": schema.StringAttribute{Optional: true, Sensitive: true,
			MarkdownDescription: "Service account key or other credentials JSON, or the path of a file holding it." + fallback(
				" Defaults to `GOOGLE_CREDENTIALS`, then `GOOGLE_APPLICATION_CREDENTIALS`; Application Default Credentials when neither this nor `access_token` is set.")},
		"access_token": schema.StringAttribute{Optional: true, Sensitive: true,
			MarkdownDescription: "OAuth2 access token used as is." + fallback(" Defaults to `GOOGLE_OAUTH_ACCESS_TOKEN`.")},
		"impersonate_service_account": schema.StringAttribute{Optional: true,
			MarkdownDescription: "Service account whose short-lived tokens the provider uses, obtained with the credentials above." + fallback("")},
		"default_zone": schema.StringAttribute{Optional: true,
			MarkdownDescription: "Zone of proxies that name none, such as `europe-west1-b`." + fallback(" Defaults to `"+gcp.DefaultZone+"`."),
			Validators:          []validator.String{gcpZone()}},
		"region": schema.StringAttribute{Optional: true,
			MarkdownDescription: "Region whose quotas `egress_backends` reports, such as `europe-west1`; the region of `default_zone` when unset.",
			Validators:          []validator.String{gcpRegion()}},
		"compute_endpoint": schema.StringAttribute{Optional: true,
			MarkdownDescription: "Compute Engine API endpoint, an `http` or `https` URL, for private endpoints and tests, such as `https://compute.p.example.internal`." + fallback(""),
			Validators:          []validator.String{attribute_validator.URLWithScheme("http", "https")}},
		"secret_manager_endpoint": schema.StringAttribute{Optional: true,
			MarkdownDescription: "Secret Manager API endpoint the provider calls, an `http` or `https` URL, for private endpoints and tests. " +
				"The proxy VMs read their secrets at Secret Manager's public endpoint." + fallback(""),
			Validators: []validator.String{attribute_validator.URLWithScheme("http", "https")}},
		"resource_manager_endpoint": schema.StringAttribute{Optional: true,
			MarkdownDescription: "Cloud Resource Manager API endpoint, an `http` or `https` URL, for private endpoints and tests: " +
				"`egress_backends` asks it which of the permissions the backend needs the provider's account lacks." + fallback(""),
			Validators: []validator.String{attribute_validator.URLWithScheme("http", "https")}},
	}
}

func gcpProviderSchema() schema.SingleNestedAttribute {
	attrs := gcpProjectAttributes(false)
	attrs["project"] = schema.StringAttribute{Optional: true,
		MarkdownDescription: "Default project ID. Defaults to `GOOGLE_PROJECT`, `GOOGLE_CLOUD_PROJECT` or `CLOUDSDK_CORE_PROJECT`."}
	attrs["projects"] = schema.MapNestedAttribute{Optional: true,
		MarkdownDescription: "More projects by project ID, each with settings of its own; unset ones take the values above.",
		NestedObject:        schema.NestedAttributeObject{Attributes: gcpProjectAttributes(true)}}
	return schema.SingleNestedAttribute{
		Optional: true,
		MarkdownDescription: "GCP Compute Engine backend. Clients are built, and credentials read, when a resource first uses it: " +
			"a configuration without GCP proxies never reads them.",
		Attributes: attrs,
	}
}

// gcpFactory builds the backend on first use; the environment fallbacks are read then too.
func gcpFactory(m *gcpProviderModel) backend.Factory {
	return func(context.Context) (backend.Backend, error) {
		return gcp.New(gcpBackendConfig(m))
	}
}

func gcpBackendConfig(m *gcpProviderModel) gcp.Config {
	cfg := gcp.Config{
		DefaultProject: stringOrEnv(m.Project, gcpProjectEnvVars),
		ProjectConfig: gcpProjectModel{
			Credentials: m.Credentials, AccessToken: m.AccessToken, ImpersonateServiceAccount: m.ImpersonateServiceAccount,
			DefaultZone: m.DefaultZone, Region: m.Region, ComputeEndpoint: m.ComputeEndpoint,
			SecretManagerEndpoint: m.SecretManagerEndpoint, ResourceManagerEndpoint: m.ResourceManagerEndpoint,
		}.config(),
		Projects: map[string]gcp.ProjectConfig{},
	}
	if cfg.Credentials == "" && cfg.AccessToken == "" {
		cfg.AccessToken = stringOrEnv(types.StringNull(), gcpAccessTokenEnvVars)
		if cfg.AccessToken == "" {
			cfg.Credentials = stringOrEnv(types.StringNull(), gcpCredentialsEnvVars)
		}
	}
	for id, p := range m.Projects {
		cfg.Projects[id] = p.config()
	}
	return cfg
}

func (p gcpProjectModel) config() gcp.ProjectConfig {
	return gcp.ProjectConfig{
		Credentials: p.Credentials.ValueString(), AccessToken: p.AccessToken.ValueString(),
		ImpersonateServiceAccount: p.ImpersonateServiceAccount.ValueString(), DefaultZone: p.DefaultZone.ValueString(),
		Region: p.Region.ValueString(), ComputeEndpoint: p.ComputeEndpoint.ValueString(),
		SecretManagerEndpoint: p.SecretManagerEndpoint.ValueString(), ResourceManagerEndpoint: p.ResourceManagerEndpoint.ValueString(),
	}
}

// stringOrEnv is v when set, else the first environment variable of names that is set.
func stringOrEnv(v types.String, names []string) string {
	if s := v.ValueString(); s != "" {
		return s
	}
	for _, n := range names {
		if s := os.Getenv(n); s != "" {
			return s
		}
	}
	return ""
}
