package main

import (
	"archive/tar"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// archiveOf writes an OCI layout archive shaped like scripts/build-k8s-image.sh's: a squid and a pause image
// of one architecture, each with its ref name. It returns the archive's path.
func archiveOf(t *testing.T, arch string) string {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"squid", "pause"} {
		img, err := random.Image(256, 1)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture = "linux", arch
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			t.Fatal(err)
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{refNameAnnotation: ref})); err != nil {
			t.Fatal(err)
		}
	}
	return tarOf(t, filepath.Join(dir, "layout"), nil)
}

// tarOf archives the folder src, plus extra entries (name: content) as they are named.
func tarOf(t *testing.T, src string, extra map[string]string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	tw := tar.NewWriter(f)
	if src != "" {
		if err := tw.AddFS(os.DirFS(src)); err != nil {
			t.Fatal(err)
		}
	}
	for n, content := range extra {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, content); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Pushing is what the release and a mirroring user do: every archive's squid image under one tag, as an index
// with one entry per platform, labelled; what cannot make such an index is refused before anything is pushed.
func TestRun(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	amd64, arm64 := archiveOf(t, "amd64"), archiveOf(t, "arm64")
	escaping := tarOf(t, "", map[string]string{"../outside": "x"})
	lbls := labels{"org.opencontainers.image.version": "0.3.0"}

	tests := map[string]struct {
		reference     string
		archives      []string
		imageName     string
		wantPlatforms []string
		wantErr       string
	}{
		"one archive":                  {reference: "egress/squid:one", archives: []string{amd64}, imageName: "squid", wantPlatforms: []string{"linux/amd64"}},
		"the release's two":            {reference: "egress/squid:0.3.0", archives: []string{amd64, arm64}, imageName: "squid", wantPlatforms: []string{"linux/amd64", "linux/arm64"}},
		"two of one platform":          {reference: "egress/squid:dup", archives: []string{amd64, amd64}, imageName: "squid", wantErr: "archives 1 and 2 are both linux/amd64"},
		"an image the archive lacks":   {reference: "egress/squid:none", archives: []string{amd64}, imageName: "proxy", wantErr: `no image named "proxy"`},
		"an entry outside its folder":  {reference: "egress/squid:esc", archives: []string{escaping}, imageName: "squid", wantErr: "leaves the archive's folder"},
		"a digest instead of a tag":    {reference: "egress/squid@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", archives: []string{amd64}, imageName: "squid", wantErr: "name a tag"},
		"an archive that is not there": {reference: "egress/squid:gone", archives: []string{filepath.Join(t.TempDir(), "missing.tar")}, imageName: "squid", wantErr: "no such file"},
	}
	for tname, tc := range tests {
		t.Run(tname, func(t *testing.T) {
			ref := host + "/" + tc.reference
			pushed, err := run(context.Background(), ref, tc.archives, tc.imageName, lbls)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("run = %q, %v; want an error with %q", pushed, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := name.ParseReference(ref)
			if err != nil {
				t.Fatal(err)
			}
			idx, err := remote.Index(parsed)
			if err != nil {
				t.Fatalf("reading back %s: %v", ref, err)
			}
			digest, err := idx.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if want := parsed.Context().Digest(digest.String()).String(); pushed != want {
				t.Errorf("run printed %q, want %q", pushed, want)
			}
			m, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if m.Annotations["org.opencontainers.image.version"] != "0.3.0" {
				t.Errorf("the index's annotations are %v, want the label", m.Annotations)
			}
			var platforms []string
			for _, d := range m.Manifests {
				if d.Platform == nil {
					t.Fatalf("index entry %s names no platform", d.Digest)
				}
				platforms = append(platforms, d.Platform.String())
				checkImage(t, idx, d)
			}
			if strings.Join(platforms, " ") != strings.Join(tc.wantPlatforms, " ") {
				t.Errorf("the index's platforms are %v, want %v", platforms, tc.wantPlatforms)
			}
		})
	}
}

// checkImage reads one entry of a pushed index: its config carries the label and names the entry's platform.
func checkImage(t *testing.T, idx v1.ImageIndex, d v1.Descriptor) {
	t.Helper()
	img, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.Labels["org.opencontainers.image.version"] != "0.3.0" {
		t.Errorf("image %s has labels %v, want the label", d.Digest, cf.Config.Labels)
	}
	if cf.Architecture != d.Platform.Architecture {
		t.Errorf("image %s is %s, its index entry says %s", d.Digest, cf.Architecture, d.Platform.Architecture)
	}
}
