package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"
)

// The Google provider's environment fallbacks apply only where the block leaves a setting unset. Not
// parallel: it sets environment variables.
func TestGCPBackendConfigFallbacks(t *testing.T) {
	for name, tc := range map[string]struct {
		env                         map[string]string
		model                       gcpProviderModel
		project, token, credentials string
	}{
		"block wins": {
			env:     map[string]string{"GOOGLE_PROJECT": "env-p", "GOOGLE_OAUTH_ACCESS_TOKEN": "env-t"},
			model:   gcpProviderModel{Project: types.StringValue("block-p"), AccessToken: types.StringValue("block-t")},
			project: "block-p", token: "block-t",
		},
		"project from the second variable": {
			env:     map[string]string{"GOOGLE_CLOUD_PROJECT": "cloud-p", "CLOUDSDK_CORE_PROJECT": "sdk-p"},
			project: "cloud-p",
		},
		"token before key file": {
			env:     map[string]string{"CLOUDSDK_CORE_PROJECT": "sdk-p", "GOOGLE_OAUTH_ACCESS_TOKEN": "env-t", "GOOGLE_CREDENTIALS": "{}"},
			project: "sdk-p", token: "env-t",
		},
		"key file from the environment": {
			env:     map[string]string{"GOOGLE_PROJECT": "p", "GOOGLE_APPLICATION_CREDENTIALS": "/keys/sa.json"},
			project: "p", credentials: "/keys/sa.json",
		},
		"block credentials keep the environment token out": {
			env:     map[string]string{"GOOGLE_PROJECT": "p", "GOOGLE_OAUTH_ACCESS_TOKEN": "env-t"},
			model:   gcpProviderModel{Credentials: types.StringValue("/k.json")},
			project: "p", credentials: "/k.json",
		},
	} {
		t.Run(name, func(t *testing.T) {
			for _, v := range append(append(append([]string{}, gcpProjectEnvVars...), gcpCredentialsEnvVars...), gcpAccessTokenEnvVars...) {
				t.Setenv(v, tc.env[v])
			}
			cfg := gcpBackendConfig(&tc.model)
			if cfg.DefaultProject != tc.project || cfg.AccessToken != tc.token || cfg.Credentials != tc.credentials {
				t.Fatalf("project %q token %q credentials %q; want %q %q %q", cfg.DefaultProject, cfg.AccessToken, cfg.Credentials, tc.project, tc.token, tc.credentials)
			}
		})
	}
}
