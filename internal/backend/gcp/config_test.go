package gcp

import (
	"strings"
	"testing"
)

func TestConfigProjects(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cfg     Config
		wantErr string
		check   func(t *testing.T, p map[string]ProjectConfig)
	}{
		"default project takes top-level settings": {
			cfg: Config{DefaultProject: "p1", ProjectConfig: ProjectConfig{DefaultZone: "europe-west1-b"}},
			check: func(t *testing.T, p map[string]ProjectConfig) {
				if p["p1"].DefaultZone != "europe-west1-b" || p["p1"].Region != "europe-west1" {
					t.Fatalf("p1 = %+v", p["p1"])
				}
			},
		},
		"per-project settings win": {
			cfg: Config{Projects: map[string]ProjectConfig{"a": {DefaultZone: "asia-east1-a"}, "b": {}}, ProjectConfig: ProjectConfig{DefaultZone: "us-east1-b"}},
			check: func(t *testing.T, p map[string]ProjectConfig) {
				if p["a"].Region != "asia-east1" || p["b"].Region != "us-east1" {
					t.Fatalf("projects = %+v", p)
				}
			},
		},
		"built-in zone": {
			cfg: Config{DefaultProject: "p"},
			check: func(t *testing.T, p map[string]ProjectConfig) {
				if p["p"].DefaultZone != DefaultZone {
					t.Fatalf("zone = %q", p["p"].DefaultZone)
				}
			},
		},
		"nothing":            {cfg: Config{}, wantErr: "no project configured"},
		"bad id":             {cfg: Config{DefaultProject: "a/b"}, wantErr: "not a project ID"},
		"token and key file": {cfg: Config{DefaultProject: "p", ProjectConfig: ProjectConfig{Credentials: "{}", AccessToken: "t"}}, wantErr: "not both"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, err := tc.cfg.projects()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, p)
		})
	}
}
