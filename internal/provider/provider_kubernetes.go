package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
)

// The provider-level settings of the kubernetes backend: the clusters and how to reach them.

type kubernetesProviderModel struct {
	Clusters map[string]kubernetesClusterModel `tfsdk:"clusters"`
	// releaseImage is not configuration (the framework leaves unexported fields alone): the image of this
	// provider's release, which Configure sets from the provider's version (provider_kubernetes.go).
	releaseImage string
}

type kubernetesClusterModel struct {
	ConfigPath    types.String `tfsdk:"config_path"`
	ConfigContext types.String `tfsdk:"config_context"`
	// The rest is in provider_kubernetes.go.
	kubernetesClusterExtra
}

// kubeconfigEnvVar is read as the Kubernetes tools read it.
const kubeconfigEnvVar = "KUBECONFIG"

func kubernetesProviderSchema() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		Optional:            true,
		MarkdownDescription: "Kubernetes backend: the clusters proxies may be placed on.",
		Attributes: map[string]schema.Attribute{
			"clusters": schema.MapNestedAttribute{
				Optional: true,
				MarkdownDescription: "Clusters by the name resources use in `kubernetes.cluster`: lowercase letters, digits and hyphens, " +
					"as that name is part of every id. When empty, one cluster named `default` is read from `" + kubeconfigEnvVar + "`.",
				Validators: []validator.Map{mapvalidator.KeysAre(attribute_validator.NameOf("kubernetes cluster name"))},
				NestedObject: schema.NestedAttributeObject{Attributes: withAttributes(map[string]schema.Attribute{
					"config_path":    schema.StringAttribute{Optional: true, MarkdownDescription: "Path of the kubeconfig file. Defaults to `" + kubeconfigEnvVar + "`."},
					"config_context": schema.StringAttribute{Optional: true, MarkdownDescription: "Context in the kubeconfig; its current context when unset."},
				}, kubernetesClusterAttributes())},
			},
		},
	}
}

// kubernetesClusterExtra are a cluster's settings beyond the kubeconfig file and context, named as the
// HashiCorp Kubernetes provider names them.
type kubernetesClusterExtra struct {
	ConfigPaths          types.List   `tfsdk:"config_paths"`
	Host                 types.String `tfsdk:"host"`
	Token                types.String `tfsdk:"token"`
	ClientCertificate    types.String `tfsdk:"client_certificate"`
	ClientKey            types.String `tfsdk:"client_key"`
	ClusterCACertificate types.String `tfsdk:"cluster_ca_certificate"`
	Insecure             types.Bool   `tfsdk:"insecure"`
	Exec                 *execModel   `tfsdk:"exec"`
	Image                types.String `tfsdk:"image"`
	Namespaces           types.List   `tfsdk:"namespaces"`
	RequestsPerSecond    types.Int64  `tfsdk:"requests_per_second"`
	RequestBurst         types.Int64  `tfsdk:"request_burst"`
}

type execModel struct {
	APIVersion types.String `tfsdk:"api_version"`
	Command    types.String `tfsdk:"command"`
	Args       types.List   `tfsdk:"args"`
	Env        types.Map    `tfsdk:"env"`
}

func kubernetesClusterAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"config_paths": schema.ListAttribute{Optional: true, ElementType: types.StringType,
			MarkdownDescription: "Kubeconfig files merged in order. Without `config_path` or `config_paths`, `KUBE_CONFIG_PATH` or `KUBECONFIG`."},
		"host":                   schema.StringAttribute{Optional: true, MarkdownDescription: "API server URL; overrides the kubeconfig's."},
		"token":                  schema.StringAttribute{Optional: true, Sensitive: true, MarkdownDescription: "Bearer token."},
		"client_certificate":     schema.StringAttribute{Optional: true, MarkdownDescription: "PEM client certificate, with `client_key`."},
		"client_key":             schema.StringAttribute{Optional: true, Sensitive: true, MarkdownDescription: "PEM client key."},
		"cluster_ca_certificate": schema.StringAttribute{Optional: true, MarkdownDescription: "PEM CA certificate that signed the API server's."},
		"insecure": schema.BoolAttribute{Optional: true, MarkdownDescription: "Skip verifying the API server's certificate. Defaults to `false`. Not with `cluster_ca_certificate`.",
			Validators: []validator.Bool{attribute_validator.TrueConflictsWith(path.MatchRelative().AtParent().AtName("cluster_ca_certificate"), kubernetes.ErrInsecureWithCA.Error())}},
		"exec": schema.SingleNestedAttribute{Optional: true, MarkdownDescription: "Credential plugin run for a token or certificate.",
			Attributes: map[string]schema.Attribute{
				"api_version": schema.StringAttribute{Required: true, MarkdownDescription: "Such as `client.authentication.k8s.io/v1`."},
				"command":     schema.StringAttribute{Required: true, MarkdownDescription: "The plugin's executable."},
				"args":        schema.ListAttribute{Optional: true, ElementType: types.StringType, MarkdownDescription: "Its arguments."},
				"env":         schema.MapAttribute{Optional: true, ElementType: types.StringType, MarkdownDescription: "Its extra environment."},
			}},
		"image": schema.StringAttribute{Optional: true,
			MarkdownDescription: "Default proxy image on this cluster. " + defaultImageDescription + " Set this to serve the image from a registry of your own (a mirror of it, or your build).",
			Validators:          []validator.String{kubernetesImage()}},
		"namespaces": schema.ListAttribute{Optional: true, ElementType: types.StringType,
			MarkdownDescription: "Namespaces the provider works in: the orphan list reads them one by one where RBAC forbids listing across the cluster, and `egress_backends` checks the credentials' permissions in each of them (across the cluster when none are listed), so that credentials bound by namespace Roles are healthy."},
		"requests_per_second": schema.Int64Attribute{Optional: true,
			MarkdownDescription: fmt.Sprintf("Requests per second one provider run sends this cluster, shared by every proxy Terraform works on at once. Defaults to `%d`. The API server's own limits (API Priority and Fairness) still apply: when it answers `429 Too Many Requests`, the provider waits as its `Retry-After` says and tries again, up to ten times.", kubernetes.DefaultRequestsPerSecond),
			Validators:          []validator.Int64{int64validator.AtLeast(1)}},
		"request_burst": schema.Int64Attribute{Optional: true,
			MarkdownDescription: fmt.Sprintf("Requests that may go out at once before `requests_per_second` paces them. Defaults to `%d`.", kubernetes.DefaultRequestBurst),
			Validators:          []validator.Int64{int64validator.AtLeast(1)}},
	}
}

// defaultImageDescription says which image a proxy runs when neither it nor its cluster names one.
const defaultImageDescription = "Defaults to `" + kubernetes.ImageRepository + ":<version>`, the image published with this provider " +
	"version (linux/amd64 and linux/arm64: Debian 12's `squid-openssl`); a provider built from source that follows no release " +
	"defaults to `" + kubernetes.DefaultImage + "`, the image `make k8s-image` builds, which no registry serves."

// withAttributes merges more attributes into a schema's map.
func withAttributes(m, more map[string]schema.Attribute) map[string]schema.Attribute {
	for k, v := range more {
		m[k] = v
	}
	return m
}

// kubernetesFactory builds the kubernetes backend from the provider block.
func kubernetesFactory(m *kubernetesProviderModel) backend.Factory {
	cfg := kubernetesBackendConfig(m)
	return func(context.Context) (backend.Backend, error) { return kubernetes.New(cfg) }
}

// kubernetesBackendConfig maps the provider block onto the backend's configuration. An empty cluster map
// means one cluster named "default" from the kubeconfig the environment names, which the backend resolves.
// The default image is the provider's release's, or the backend's DefaultImage when it knows no release.
func kubernetesBackendConfig(m *kubernetesProviderModel) kubernetes.Config {
	cfg := kubernetes.Config{Clusters: map[string]kubernetes.ClusterConfig{}, Image: m.releaseImage}
	for name, c := range m.Clusters {
		cc := kubernetes.ClusterConfig{
			ConfigPath: c.ConfigPath.ValueString(), ConfigPaths: stringList(c.ConfigPaths),
			ConfigContext: c.ConfigContext.ValueString(), Host: c.Host.ValueString(), Token: c.Token.ValueString(),
			ClientCertificate: c.ClientCertificate.ValueString(), ClientKey: c.ClientKey.ValueString(),
			ClusterCACertificate: c.ClusterCACertificate.ValueString(), Insecure: c.Insecure.ValueBool(),
			Image: c.Image.ValueString(), Namespaces: stringList(c.Namespaces),
			RequestsPerSecond: int(c.RequestsPerSecond.ValueInt64()), RequestBurst: int(c.RequestBurst.ValueInt64()),
		}
		if c.Exec != nil {
			cc.Exec = &kubernetes.ExecConfig{APIVersion: c.Exec.APIVersion.ValueString(), Command: c.Exec.Command.ValueString(),
				Args: stringList(c.Exec.Args), Env: map[string]string{}}
			for k, v := range c.Exec.Env.Elements() {
				if s, ok := v.(types.String); ok {
					cc.Exec.Env[k] = s.ValueString()
				}
			}
		}
		cfg.Clusters[name] = cc
	}
	return cfg
}

func stringList(l types.List) []string {
	var out []string
	for _, v := range l.Elements() {
		if s, ok := v.(types.String); ok {
			out = append(out, s.ValueString())
		}
	}
	return out
}
