package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
)

// The provider-level settings of the aws backend, with the conventions of the AWS SDK and the HashiCorp AWS
// provider: one default region, more regions each with settings of their own.

type awsProviderModel struct {
	Region  types.String              `tfsdk:"region"`
	Regions map[string]awsRegionModel `tfsdk:"regions"`
	awsRegionModel
}

type awsRegionModel struct {
	Profile                types.String        `tfsdk:"profile"`
	SharedConfigFiles      types.List          `tfsdk:"shared_config_files"`
	SharedCredentialsFiles types.List          `tfsdk:"shared_credentials_files"`
	AccessKey              types.String        `tfsdk:"access_key"`
	SecretKey              types.String        `tfsdk:"secret_key"`
	Token                  types.String        `tfsdk:"token"`
	AssumeRole             *awsAssumeRoleModel `tfsdk:"assume_role"`
	Endpoints              *awsEndpointsModel  `tfsdk:"endpoints"`
}

type awsAssumeRoleModel struct {
	RoleARN     types.String `tfsdk:"role_arn"`
	SessionName types.String `tfsdk:"session_name"`
	ExternalID  types.String `tfsdk:"external_id"`
}

type awsEndpointsModel struct {
	EC2           types.String `tfsdk:"ec2"`
	SSM           types.String `tfsdk:"ssm"`
	STS           types.String `tfsdk:"sts"`
	ServiceQuotas types.String `tfsdk:"servicequotas"`
	IAM           types.String `tfsdk:"iam"`
	Logs          types.String `tfsdk:"logs"`
	ELB           types.String `tfsdk:"elasticloadbalancing"`
}

// awsRegionEnvVars are read, in this order, when the block sets no region, as the AWS CLI reads them.
var awsRegionEnvVars = []string{"AWS_REGION", "AWS_DEFAULT_REGION"}

// awsRegionAttributes are how one region is reached; perRegion says they sit in aws.regions, where an unset
// one takes the top-level value.
func awsRegionAttributes(perRegion bool) map[string]schema.Attribute {
	fallback := func(top string) string {
		if perRegion {
			return " The top-level `aws` value when unset."
		}
		return top
	}
	endpoint := func(service string) schema.StringAttribute {
		return schema.StringAttribute{Optional: true,
			MarkdownDescription: "The " + service + " endpoint, an `http` or `https` URL, for private endpoints and tests.",
			Validators:          []validator.String{attribute_validator.URLWithScheme("http", "https")}}
	}
	return map[string]schema.Attribute{
		"profile": schema.StringAttribute{Optional: true,
			MarkdownDescription: "Named profile of the shared configuration files." + fallback(" Defaults to `AWS_PROFILE`, then `default`.")},
		"shared_config_files": schema.ListAttribute{Optional: true, ElementType: types.StringType,
			MarkdownDescription: "Shared configuration files." + fallback(" Defaults to `AWS_CONFIG_FILE`, then `~/.aws/config`.")},
		"shared_credentials_files": schema.ListAttribute{Optional: true, ElementType: types.StringType,
			MarkdownDescription: "Shared credentials files." + fallback(" Defaults to `AWS_SHARED_CREDENTIALS_FILE`, then `~/.aws/credentials`.")},
		"access_key": schema.StringAttribute{Optional: true, Sensitive: true,
			MarkdownDescription: "Access key ID, with `secret_key`." + fallback(" Defaults to `AWS_ACCESS_KEY_ID`; the SDK's default chain (environment, "+
				"shared files, SSO, the instance's or task's role) when unset.")},
		"secret_key": schema.StringAttribute{Optional: true, Sensitive: true,
			MarkdownDescription: "Secret access key, with `access_key`." + fallback(" Defaults to `AWS_SECRET_ACCESS_KEY`.")},
		"token": schema.StringAttribute{Optional: true, Sensitive: true,
			MarkdownDescription: "Session token of temporary credentials." + fallback(" Defaults to `AWS_SESSION_TOKEN`.")},
		"assume_role": schema.SingleNestedAttribute{Optional: true,
			MarkdownDescription: "A role assumed with the credentials above before any EC2 or SSM call." + fallback(""),
			Attributes: map[string]schema.Attribute{
				"role_arn":     schema.StringAttribute{Required: true, MarkdownDescription: "ARN of the role."},
				"session_name": schema.StringAttribute{Optional: true, MarkdownDescription: "Session name, shown in CloudTrail."},
				"external_id":  schema.StringAttribute{Optional: true, MarkdownDescription: "External ID the role's trust policy asks for."},
			}},
		"endpoints": schema.SingleNestedAttribute{Optional: true,
			MarkdownDescription: "Service endpoints instead of the region's public ones." + fallback(""),
			Attributes: map[string]schema.Attribute{"ec2": endpoint("EC2"), "ssm": endpoint("SSM"), "sts": endpoint("STS"),
				"servicequotas":        endpoint("Service Quotas"),
				"elasticloadbalancing": endpoint("Elastic Load Balancing (used only by proxies of several `instances`)"),
				"logs": schema.StringAttribute{Optional: true,
					MarkdownDescription: "The CloudWatch Logs endpoint, an `http` or `https` URL, for private endpoints and tests. A proxy's guest " +
						"sends its access log there too when it is `https`; otherwise, to the region's public one.",
					Validators: []validator.String{attribute_validator.URLWithScheme("http", "https")}},
				"iam": schema.StringAttribute{Optional: true,
					MarkdownDescription: "The IAM endpoint, an `http` or `https` URL, for tests: IAM is global, one endpoint for every region of a " +
						"partition. Used only by proxies with `create_instance_role`.",
					Validators: []validator.String{attribute_validator.URLWithScheme("http", "https")}}}},
	}
}

func awsProviderSchema() schema.SingleNestedAttribute {
	attrs := awsRegionAttributes(false)
	attrs["region"] = schema.StringAttribute{Optional: true,
		MarkdownDescription: "Default region, such as `eu-west-1`. Defaults to `AWS_REGION`, then `AWS_DEFAULT_REGION`.",
		Validators:          []validator.String{attribute_validator.Func("region", aws.ValidateRegion)}}
	attrs["regions"] = schema.MapNestedAttribute{Optional: true,
		MarkdownDescription: "More regions by region code, each with settings of its own; unset ones take the values above.",
		Validators:          []validator.Map{mapvalidator.KeysAre(attribute_validator.Func("region", aws.ValidateRegion))},
		NestedObject:        schema.NestedAttributeObject{Attributes: awsRegionAttributes(true)}}
	return schema.SingleNestedAttribute{
		Optional: true,
		MarkdownDescription: "AWS EC2 backend (preview: tested against a fake of EC2 and SSM). Clients are built, and credentials read, " +
			"when a resource first uses it: a configuration without AWS proxies never reads them.",
		Attributes: attrs,
	}
}

func (m *awsProviderModel) factory() backend.Factory {
	cfg := awsBackendConfig(m)
	return func(context.Context) (backend.Backend, error) { return aws.New(cfg) }
}

// targets are the configured regions: the default one and the map's.
func (m *awsProviderModel) targets() ([]string, bool) { return awsBackendConfig(m).RegionNames(), true }

func awsBackendConfig(m *awsProviderModel) aws.Config {
	cfg := aws.Config{DefaultRegion: stringOrEnv(m.Region, awsRegionEnvVars), Regions: map[string]aws.RegionConfig{}}
	top := m.config(aws.RegionConfig{})
	if cfg.DefaultRegion != "" {
		cfg.Regions[cfg.DefaultRegion] = top
	}
	for name, r := range m.Regions {
		cfg.Regions[name] = r.config(top)
	}
	return cfg
}

// config maps one region's settings, taking from top what they leave unset.
func (r awsRegionModel) config(top aws.RegionConfig) aws.RegionConfig {
	or := func(v types.String, d string) string {
		if v.IsNull() || v.IsUnknown() {
			return d
		}
		return v.ValueString()
	}
	list := func(v types.List, d []string) []string {
		if v.IsNull() || v.IsUnknown() {
			return d
		}
		return stringList(v)
	}
	out := aws.RegionConfig{
		Profile: or(r.Profile, top.Profile), SharedConfigFiles: list(r.SharedConfigFiles, top.SharedConfigFiles),
		SharedCredentialsFiles: list(r.SharedCredentialsFiles, top.SharedCredentialsFiles),
		AccessKey:              or(r.AccessKey, top.AccessKey), SecretKey: or(r.SecretKey, top.SecretKey), SessionToken: or(r.Token, top.SessionToken),
		AssumeRole: top.AssumeRole, EC2Endpoint: top.EC2Endpoint, SSMEndpoint: top.SSMEndpoint, STSEndpoint: top.STSEndpoint,
		ServiceQuotasEndpoint: top.ServiceQuotasEndpoint, IAMEndpoint: top.IAMEndpoint, LogsEndpoint: top.LogsEndpoint,
		ELBEndpoint: top.ELBEndpoint,
	}
	if r.AssumeRole != nil {
		out.AssumeRole = aws.AssumeRole{RoleARN: r.AssumeRole.RoleARN.ValueString(), SessionName: r.AssumeRole.SessionName.ValueString(),
			ExternalID: r.AssumeRole.ExternalID.ValueString()}
	}
	if r.Endpoints != nil {
		out.EC2Endpoint = or(r.Endpoints.EC2, top.EC2Endpoint)
		out.SSMEndpoint = or(r.Endpoints.SSM, top.SSMEndpoint)
		out.STSEndpoint = or(r.Endpoints.STS, top.STSEndpoint)
		out.ServiceQuotasEndpoint = or(r.Endpoints.ServiceQuotas, top.ServiceQuotasEndpoint)
		out.IAMEndpoint = or(r.Endpoints.IAM, top.IAMEndpoint)
		out.LogsEndpoint = or(r.Endpoints.Logs, top.LogsEndpoint)
		out.ELBEndpoint = or(r.Endpoints.ELB, top.ELBEndpoint)
	}
	return out
}
