package kubernetes

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The default image follows the provider's version: a release's own tag, the release a development build
// was recorded as built from or after, and otherwise nothing, so DefaultImage applies. ReleaseImage names the
// same image for every version: "dev" and "" send it to what Go recorded, which in a test binary is no release.
func TestReleaseImage(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		version, want string
	}{
		"release as goreleaser sets it":     {"0.3.0", ImageRepository + ":0.3.0"},
		"release tag with its v":            {"v1.12.4", ImageRepository + ":1.12.4"},
		"pre-release":                       {"0.3.0-rc.1", ImageRepository + ":0.3.0-rc.1"},
		"go install at a release":           {"v0.3.0", ImageRepository + ":0.3.0"},
		"modified tree at a release":        {"v0.3.0+dirty", ImageRepository + ":0.3.0"},
		"commits after a release":           {"v0.3.1-0.20260101120000-0123456789ab", ImageRepository + ":0.3.0"},
		"modified tree after a release":     {"v0.3.1-0.20260101120000-0123456789ab+dirty", ImageRepository + ":0.3.0"},
		"commits after a pre-release":       {"v0.4.0-rc.1.0.20260101120000-0123456789ab", ImageRepository + ":0.4.0-rc.1"},
		"commits before any release":        {"v0.0.0-20260101120000-0123456789ab", ""},
		"patch zero without a base":         {"v1.2.0-0.20260101120000-0123456789ab", ""},
		"go's marker for an unknown build":  {"(devel)", ""},
		"nothing recorded":                  {"", ""},
		"main.go's version, unset":          {"dev", ""},
		"the tests' version":                {"test", ""},
		"build metadata, no image tag form": {"0.3.0+build.5", ""},
		"not a version":                     {"latest", ""},
		"not a semver":                      {"snapshot", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, released := releaseImageOf(tc.version), ReleaseImage(tc.version)
			if got != tc.want || released != tc.want {
				t.Errorf("releaseImageOf(%q) = %q, ReleaseImage = %q; want %q", tc.version, got, released, tc.want)
			}
			if tc.want == "" {
				return
			}
			if err := ValidateImage(tc.want); err != nil {
				t.Errorf("the image of %q is no reference a kubelet takes: %v", tc.version, err)
			}
		})
	}
}

// An import reads the image a provider defaulted to as no image: the tree's own, or any release's.
func TestIsDefaultImage(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		image string
		want  bool
	}{
		"the tree's image":           {DefaultImage, true},
		"this release's":             {ImageRepository + ":0.3.0", true},
		"an earlier release's":       {ImageRepository + ":0.1.0", true},
		"a digest of the repository": {ImageRepository + "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", false},
		"a mirror":                   {"registry.example/egress/squid:0.3.0", false},
		"the repository untagged":    {ImageRepository, false},
		"a longer repository name":   {ImageRepository + "-fork:0.3.0", false},
		"empty":                      {"", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := IsDefaultImage(tc.image); got != tc.want {
				t.Errorf("IsDefaultImage(%q) = %t, want %t", tc.image, got, tc.want)
			}
		})
	}
}

// The release pushes its image where the provider's default points: a workflow that pushed elsewhere would
// leave every release's default image missing.
func TestReleaseWorkflowPushesImageRepository(t *testing.T) {
	t.Parallel()
	workflow := filepath.Join("..", "..", "..", ".github", "workflows", "release.yml")
	b, err := os.ReadFile(workflow)
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	if m := regexp.MustCompile(`(?m)^\s*IMAGE:\s*(\S+)\s*$`).FindSubmatch(b); m != nil {
		got = string(m[1])
	}
	if got != ImageRepository {
		t.Fatalf("%s pushes the proxy image to IMAGE %q, want ImageRepository %q", workflow, got, ImageRepository)
	}
}
