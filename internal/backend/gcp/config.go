package gcp

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"golang.org/x/oauth2"
	"google.golang.org/api/impersonate"
	"google.golang.org/api/option"
)

// Defaults of a proxy VM; the provider's schema and docs read them from here.
const (
	DefaultMachineType = "e2-small"
	DefaultImage       = "projects/debian-cloud/global/images/family/debian-12"
	DefaultNetwork     = "global/networks/default"
	// DefaultZone is used when neither the resource nor the provider names one.
	DefaultZone = "us-central1-a"
)

// DefaultScopes are the OAuth scopes of a VM with a service account: cloud-platform, the one scope that lets
// the VM's token read its secret from Secret Manager (secrets.go). What the token may do is then IAM's to say,
// as Google recommends: the provider grants the account its own secret and nothing more, and the account
// should hold no other role than the logging and monitoring writers.
var DefaultScopes = []string{cloudPlatformScope}

// LegacyDefaultScopes were the default before the secrets moved to Secret Manager: a VM made with them keeps
// its secrets in metadata (its token cannot call Secret Manager), and reads back as having the default.
var LegacyDefaultScopes = []string{
	"https://www.googleapis.com/auth/logging.write",
	"https://www.googleapis.com/auth/monitoring.write",
}

// cloudPlatformScope is what the provider's own credentials ask for.
const cloudPlatformScope = "https://www.googleapis.com/auth/cloud-platform"

// Config is the provider-level configuration of the gcp backend.
type Config struct {
	// Projects are the projects proxies may be placed in, by project ID, each with its own settings.
	// DefaultProject, when set, is added with the top-level settings if it is not listed.
	Projects       map[string]ProjectConfig
	DefaultProject string
	// Top-level settings apply to every project that does not set its own.
	ProjectConfig
	// WithoutAuthentication sends no credentials: only for a test endpoint.
	WithoutAuthentication bool
}

// ProjectConfig is how one project is reached.
type ProjectConfig struct {
	// Credentials is a service account key or other credentials JSON, or a path to one.
	Credentials string
	// AccessToken is an OAuth2 access token used as is.
	AccessToken               string
	ImpersonateServiceAccount string
	DefaultZone               string
	// Region is where static addresses and quotas are read when the zone does not say; derived from
	// DefaultZone when empty.
	Region string
	// ComputeEndpoint replaces the Compute API endpoint (private endpoints, tests).
	ComputeEndpoint string
	// SecretManagerEndpoint replaces the Secret Manager API endpoint the provider calls (private endpoints,
	// tests). The VMs read their secrets at Secret Manager's public endpoint.
	SecretManagerEndpoint string
	// ResourceManagerEndpoint replaces the Cloud Resource Manager API endpoint, which the health check asks
	// which permissions the provider's account holds (private endpoints, tests).
	ResourceManagerEndpoint string
}

// merged fills p's empty settings from top.
func (p ProjectConfig) merged(top ProjectConfig) ProjectConfig {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&p.Credentials, top.Credentials)
	def(&p.AccessToken, top.AccessToken)
	def(&p.ImpersonateServiceAccount, top.ImpersonateServiceAccount)
	def(&p.DefaultZone, top.DefaultZone)
	def(&p.Region, top.Region)
	def(&p.ComputeEndpoint, top.ComputeEndpoint)
	def(&p.SecretManagerEndpoint, top.SecretManagerEndpoint)
	def(&p.ResourceManagerEndpoint, top.ResourceManagerEndpoint)
	def(&p.DefaultZone, DefaultZone)
	def(&p.Region, regionOf(p.DefaultZone))
	return p
}

// projects resolves the configured projects, each with its complete settings.
func (c Config) projects() (map[string]ProjectConfig, error) {
	out := map[string]ProjectConfig{}
	for id, p := range c.Projects {
		out[id] = p.merged(c.ProjectConfig)
	}
	if c.DefaultProject != "" {
		if _, ok := out[c.DefaultProject]; !ok {
			out[c.DefaultProject] = ProjectConfig{}.merged(c.ProjectConfig)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no project configured: set gcp.project, or GOOGLE_PROJECT, or list projects in gcp.projects")
	}
	for id, p := range out {
		if err := validProjectID(id); err != nil {
			return nil, err
		}
		if p.Credentials != "" && p.AccessToken != "" {
			return nil, fmt.Errorf("project %s: set credentials or access_token, not both", id)
		}
	}
	return out, nil
}

func validProjectID(id string) error {
	if id == "" || len(id) > 63 || strings.ContainsAny(id, "/ \t\n") {
		return fmt.Errorf("project %q is not a project ID", id)
	}
	return nil
}

// regionOf returns a zone's region: the zone name without its last "-x".
func regionOf(zone string) string {
	if i := strings.LastIndexByte(zone, '-'); i > 0 {
		return zone[:i]
	}
	return zone
}

// clientOptions builds the credentials of one project's clients, which add their endpoints. Credentials are
// read here, on first use of the project, never when the provider is configured.
func (c Config) clientOptions(ctx context.Context, p ProjectConfig) ([]option.ClientOption, error) {
	var opts []option.ClientOption
	switch {
	case c.WithoutAuthentication:
		return append(opts, option.WithoutAuthentication()), nil
	case p.AccessToken != "":
		opts = append(opts, option.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: p.AccessToken, TokenType: "Bearer"})))
	case p.Credentials != "":
		js, err := credentialsJSON(p.Credentials)
		if err != nil {
			return nil, err
		}
		opts = append(opts, option.WithCredentialsJSON(js)) //nolint:staticcheck // the user chose these credentials; their type is theirs to pick
	}
	// Neither: Application Default Credentials, which the client finds itself.
	if p.ImpersonateServiceAccount != "" {
		ts, err := impersonate.CredentialsTokenSource(ctx, impersonate.CredentialsConfig{
			TargetPrincipal: p.ImpersonateServiceAccount, Scopes: []string{cloudPlatformScope},
		}, opts...)
		if err != nil {
			return nil, fmt.Errorf("impersonating %s: %w", p.ImpersonateServiceAccount, err)
		}
		opts = append(opts, option.WithTokenSource(ts))
	}
	return opts, nil
}

// credentialsJSON accepts the JSON itself or a path to it, as the Google provider does.
func credentialsJSON(v string) ([]byte, error) {
	if strings.HasPrefix(strings.TrimSpace(v), "{") {
		return []byte(v), nil
	}
	b, err := os.ReadFile(v)
	if err != nil {
		return nil, fmt.Errorf("reading credentials file: %w", err)
	}
	return b, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
