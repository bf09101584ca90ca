// Command pushimage pushes the proxy image from the OCI archives scripts/build-k8s-image.sh writes to a
// registry, as an image index with one entry per archive: the release pushes the amd64 and the arm64
// archive under one tag, a user mirroring the image into a private registry pushes the one they built.
// The entry's platform is read from each image's own config, so two archives of one platform are refused.
//
//	go run ./pushimage [-name squid] [-label key=value]... REFERENCE ARCHIVE...
//
// An archive holds several images (the proxy and the test cluster's pause image); -name picks one by its
// org.opencontainers.image.ref.name. Each -label is set on every image's config (so the image's config and
// manifest are new even when the archive's layers are not) and as an annotation of the index: the release
// labels its image with org.opencontainers.image.source, .version and .revision.
//
// Credentials come from the Docker config (`docker login`, credential helpers), as for docker and crane;
// a registry on a loopback or private address is spoken to over plain HTTP. Prints REFERENCE@DIGEST of the
// index it pushed.
package main

import (
	"archive/tar"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// refNameAnnotation names an image inside an OCI layout; scripts/build-k8s-image.sh sets it on each image.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// labels is the repeatable -label flag.
type labels map[string]string

func (l labels) String() string { return fmt.Sprint(map[string]string(l)) }

func (l labels) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not key=value", s)
	}
	l[k] = v
	return nil
}

func main() {
	imageName := flag.String("name", "squid", "the image to push from each archive, by its "+refNameAnnotation)
	lbls := labels{}
	flag.Var(lbls, "label", "key=value set on every image's config and on the index; repeatable")
	flag.Usage = func() {
		_, _ = fmt.Fprintln(flag.CommandLine.Output(), "usage: pushimage [-name squid] [-label key=value]... REFERENCE ARCHIVE...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 2 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pushed, err := run(ctx, flag.Arg(0), flag.Args()[1:], *imageName, lbls)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pushimage:", err)
		os.Exit(1)
	}
	fmt.Println(pushed)
}

func run(ctx context.Context, reference string, archives []string, imageName string, lbls labels) (string, error) {
	ref, err := name.ParseReference(reference)
	if err != nil {
		return "", fmt.Errorf("reference %q: %w", reference, err)
	}
	if _, ok := ref.(name.Tag); !ok {
		return "", fmt.Errorf("reference %q: name a tag to push to, not a digest", reference)
	}
	// Each archive is unpacked into a folder of its own, read from there while the push runs.
	work, err := os.MkdirTemp("", "pushimage-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(work) }()
	var images []v1.Image
	for i, archive := range archives {
		dir := filepath.Join(work, fmt.Sprint(i))
		if err := unpack(archive, dir); err != nil {
			return "", fmt.Errorf("archive %s: %w", archive, err)
		}
		img, err := imageFrom(dir, imageName)
		if err != nil {
			return "", fmt.Errorf("archive %s: %w", archive, err)
		}
		if img, err = withLabels(img, lbls); err != nil {
			return "", fmt.Errorf("archive %s: %w", archive, err)
		}
		images = append(images, img)
	}
	idx, err := index(images, lbls)
	if err != nil {
		return "", err
	}
	if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return "", err
	}
	return ref.Context().Digest(digest.String()).String(), nil
}

// unpack extracts an OCI layout archive (a tar of index.json, oci-layout and blobs/) into dir. Only plain
// files and folders, and only below dir: an archive is input, not trusted to place files elsewhere.
func unpack(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		clean := filepath.Clean(h.Name)
		if clean == "." {
			continue
		}
		if !filepath.IsLocal(clean) {
			return fmt.Errorf("entry %q leaves the archive's folder", h.Name)
		}
		target := filepath.Join(dir, clean)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := writeFile(target, tr); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q is neither a file nor a folder", h.Name)
		}
	}
}

func writeFile(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// imageFrom returns the image of the layout in dir whose ref name is imageName.
func imageFrom(dir, imageName string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("not an OCI layout: %w", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range m.Manifests {
		n := d.Annotations[refNameAnnotation]
		if n != imageName {
			names = append(names, n)
			continue
		}
		if !d.MediaType.IsImage() {
			return nil, fmt.Errorf("%q is a %s, not an image manifest", imageName, d.MediaType)
		}
		return idx.Image(d.Digest)
	}
	sort.Strings(names)
	return nil, fmt.Errorf("no image named %q (%s) in it; it has %q", imageName, refNameAnnotation, names)
}

// withLabels sets lbls on the image's config.
func withLabels(img v1.Image, lbls labels) (v1.Image, error) {
	if len(lbls) == 0 {
		return img, nil
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg := cf.Config
	l := make(map[string]string, len(cfg.Labels)+len(lbls))
	for k, v := range cfg.Labels {
		l[k] = v
	}
	for k, v := range lbls {
		l[k] = v
	}
	cfg.Labels = l
	return mutate.Config(img, cfg)
}

// index makes the OCI image index of images, each entry with the platform its config names.
func index(images []v1.Image, lbls labels) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]int{}
	for i, img := range images {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		if cf.OS == "" || cf.Architecture == "" {
			return nil, fmt.Errorf("archive %d: the image's config names no os and architecture", i+1)
		}
		p := v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}
		if j, ok := seen[p.String()]; ok {
			return nil, fmt.Errorf("archives %d and %d are both %s: an index holds one image per platform", j+1, i+1, p.String())
		}
		seen[p.String()] = i
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	if len(lbls) == 0 {
		return idx, nil
	}
	annotated, ok := mutate.Annotations(idx, lbls).(v1.ImageIndex)
	if !ok {
		return nil, errors.New("annotating the index did not give an index")
	}
	return annotated, nil
}
