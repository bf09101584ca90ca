package kvm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// writeImage writes a file of size random bytes (so no two tests share a hash, nor an upload flight);
// qcow2 gives it a qcow2 header with the virtual size.
func writeImage(t *testing.T, size int, qcow2 bool, virtual uint64) string {
	t.Helper()
	data := make([]byte, size)
	rand.Read(data)
	if qcow2 {
		copy(data, qcow2Magic)
		binary.BigEndian.PutUint32(data[4:8], 3)
		binary.BigEndian.PutUint64(data[8:16], 0)
		binary.BigEndian.PutUint64(data[24:32], virtual)
	}
	path := filepath.Join(t.TempDir(), "image")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func imageSpec(uid, path string) backend.Spec {
	spec := fakeSpec(uid, "o")
	optionsOf(spec.Placement).ImageFile = path
	optionsOf(spec.Placement).DiskGiB = 0
	return spec
}

// sideBySide makes n calls at once, as Terraform creates independent resources, and returns each call's
// result and error by its index: the image tests ask what calls that race for one image share.
func sideBySide[T any](n int, call func(i int) (T, error)) ([]T, []error) {
	results, errs := make([]T, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = call(i)
		}()
	}
	wg.Wait()
	return results, errs
}

// createSideBySide creates every proxy at once (see sideBySide) and fails the test if any Create fails.
func createSideBySide(ctx context.Context, t testing.TB, b *Backend, specs []backend.Spec) {
	t.Helper()
	_, errs := sideBySide(len(specs), func(i int) (backend.Instance, error) { return b.Create(ctx, specs[i]) })
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Create %d: %v", i, err)
		}
	}
}

// slowUploadBackend is a fake host whose uploads pause after each chunk, so that creates started together
// are still uploading when the others look for the image, and a backend on it that counts its calls.
func slowUploadBackend() (*fakeHost, *Backend, *counter) {
	f := newFakeHost()
	f.uploadDelay = time.Millisecond
	b, cnt := fakeBackend(f)
	return f, b, cnt
}

// deleteProxiesKeepsImage deletes every proxy and checks that the image volume alone is left in the pool:
// an image volume belongs to no proxy, so no Delete may take it with the proxy.
func deleteProxiesKeepsImage(t *testing.T, b *Backend, f *fakeHost, image string, specs ...backend.Spec) {
	t.Helper()
	for _, spec := range specs {
		if err := b.Delete(context.Background(), idOf(spec)); err != nil {
			t.Fatal(err)
		}
	}
	if names := volNames(f); len(names) != 1 || names[0] != image {
		t.Errorf("volumes after deleting every proxy = %v, want only the image", names)
	}
}

// cancelledAtFirstUpload is a context that ends when the backend starts its first StorageVolUpload on f,
// so a test cancels an image upload once its volume exists and before its content is all there.
func cancelledAtFirstUpload(t *testing.T, f *fakeHost) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.onCall = func(method string) {
		if method == "StorageVolUpload" {
			cancel()
		}
	}
	return ctx
}

// checkNothingLeftAfterCancel checks that a cancelled Create left no volume. The partial volume is deleted
// before Create returns, so no wait is needed to see it gone; the pool is read under f.mu, as the fake's
// own calls read it.
func checkNothingLeftAfterCancel(t *testing.T, f *fakeHost) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if names := volNames(f); len(names) != 0 {
		t.Errorf("left behind after cancel: %v", names)
	}
}

func TestInspectImage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := writeImage(t, 300000, true, 2*gib)
	info, err := inspectImage(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if info.format != formatQCOW2 || info.capacity != 2*gib || info.size != 300000 || len(info.sum) != 64 {
		t.Errorf("qcow2 image = %+v", info)
	}
	if n := info.volumeName(); n != "egress-image-"+info.sum[:16]+".qcow2" {
		t.Errorf("volume name = %s", n)
	}

	r := writeImage(t, 5000, false, 0)
	info, err = inspectImage(ctx, r)
	if err != nil || info.format != formatRaw || info.capacity != 5000 || !strings.HasSuffix(info.volumeName(), ".raw") {
		t.Errorf("raw image = %+v, %v", info, err)
	}

	// The cache is keyed by size and mtime: new content with a new mtime is hashed again.
	data, err := os.ReadFile(r)
	if err != nil {
		t.Fatal(err)
	}
	data[0] ^= 0xff
	if err := os.WriteFile(r, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(r, time.Now().Add(time.Hour), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	again, err := inspectImage(ctx, r)
	if err != nil || again.sum == info.sum {
		t.Errorf("after a change: %s, %v; want a new hash", again.sum, err)
	}

	overlay := writeImage(t, 1000, true, gib)
	if data, err = os.ReadFile(overlay); err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint64(data[8:16], 512)
	if err := os.WriteFile(overlay, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := inspectImage(ctx, overlay); err == nil || !strings.Contains(err.Error(), "backing file") {
		t.Errorf("qcow2 overlay = %v, want refused", err)
	}
	if _, err := inspectImage(ctx, filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file = %v", err)
	}
}

func TestVerifyingReaderWithholdsTheEnd(t *testing.T) {
	t.Parallel()
	good := bytes.Repeat([]byte("a"), 1000)
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, good, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := hashImage(context.Background(), path, st)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(newVerifyingReader(bytes.NewReader(good), info.size, info.sum)); err != nil || !bytes.Equal(got, good) {
		t.Errorf("same content: %d bytes, %v", len(got), err)
	}
	changed := bytes.Repeat([]byte("b"), 1000)
	var out bytes.Buffer
	_, err = io.Copy(&out, newVerifyingReader(bytes.NewReader(changed), info.size, info.sum))
	var digest *digestError
	if !errors.As(err, &digest) || digest.want != info.sum || out.Len() == len(changed) {
		t.Errorf("changed content: passed %d of %d bytes, %v; want a digest error before the last byte", out.Len(), len(changed), err)
	}
	out.Reset()
	_, err = io.Copy(&out, newVerifyingReader(bytes.NewReader(good[:500]), info.size, info.sum))
	var short *shortError
	if !errors.As(err, &short) || short.missing != 500 {
		t.Errorf("shorter file: %v, want 500 bytes short", err)
	}
}

func TestFakeImageFileSharedByParallelCreates(t *testing.T) {
	t.Parallel()
	f, b, cnt := slowUploadBackend()
	ctx := context.Background()
	path := writeImage(t, 1<<20, true, 3*gib)
	info, err := inspectImage(ctx, path)
	if err != nil {
		t.Fatal(err)
	}

	specs := []backend.Spec{imageSpec("img-1", path), imageSpec("img-2", path)}
	createSideBySide(ctx, t, b, specs)
	_, per := cnt.take()
	// One upload of the image, one seed upload per proxy.
	if per["StorageVolUpload"] != 3 {
		t.Errorf("StorageVolUpload calls = %d, want 3 (one image, two seeds)", per["StorageVolUpload"])
	}
	img := f.pools["pool"].vols[info.volumeName()]
	want, _ := os.ReadFile(path)
	if img == nil || !bytes.Equal(img.data, want) {
		t.Fatalf("image volume %s missing or not the file's content", info.volumeName())
	}
	for _, spec := range specs {
		d := f.domains[spec.Name]
		if d == nil || d.state != int32(libvirt.DomainRunning) {
			t.Fatalf("domain %s not running", spec.Name)
		}
		var root libvirtxml.StorageVolume
		if err := root.Unmarshal(f.pools["pool"].vols[rootVolumeName(spec.Name)].xml); err != nil {
			t.Fatalf("root volume of %s: %v", spec.Name, err)
		}
		if root.BackingStore == nil || root.BackingStore.Path != img.vol.Key || root.BackingStore.Format.Type != "qcow2" || root.Capacity.Value != 3*gib {
			t.Errorf("root overlay of %s = %+v, want on %s (qcow2) with the image's 3 GiB", spec.Name, root.BackingStore, img.vol.Key)
		}
		got, err := b.Get(ctx, idOf(spec))
		if err != nil || optionsOf(got.Placement).ImageFile != path || optionsOf(got.Placement).BaseVolume != info.volumeName() {
			t.Errorf("Get = %+v, %v; want image_file and base volume read back", optionsOf(got.Placement), err)
		}
	}

	// A third proxy later finds the image complete: no upload but its seed's.
	if _, err := b.Create(ctx, imageSpec("img-3", path)); err != nil {
		t.Fatal(err)
	}
	if _, per := cnt.take(); per["StorageVolUpload"] != 1 {
		t.Errorf("third Create: %d uploads, want 1 (its seed)", per["StorageVolUpload"])
	}

	// Image volumes belong to no proxy: Delete keeps them, ListByTag does not report them.
	deleteProxiesKeepsImage(t, b, f, info.volumeName(), imageSpec("img-1", path), imageSpec("img-2", path), imageSpec("img-3", path))
	if list, err := b.ListByTag(ctx, backend.Selector{Owner: "o"}); err != nil || len(list) != 0 {
		t.Errorf("ListByTag = %v, %v; want nothing", list, err)
	}
}

func TestFakeImageWaitsForAnotherUploader(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, cnt := fakeBackend(f)
	ctx := context.Background()
	path := writeImage(t, 200000, false, 0)
	info, _ := inspectImage(ctx, path)
	data, _ := os.ReadFile(path)

	// Another process created the volume and is half way through its upload.
	x, _ := imageVolumeXML(info.volumeName(), info)
	vol, _ := f.StorageVolCreateXML(libvirt.StoragePool{Name: "pool"}, x, 0)
	fv := f.pools["pool"].vols[vol.Name]
	fv.data = append([]byte(nil), data[:100000]...)
	go func() {
		for i := 100000; i < len(data); i += 10000 {
			time.Sleep(5 * time.Millisecond)
			f.mu.Lock()
			fv.data = append(fv.data, data[i:i+10000]...)
			f.mu.Unlock()
		}
	}()
	if _, err := b.Create(ctx, imageSpec("wait-1", path)); err != nil {
		t.Fatal(err)
	}
	if _, per := cnt.take(); per["StorageVolUpload"] != 1 {
		t.Errorf("uploads = %d, want 1 (the seed): the other process's upload is used", per["StorageVolUpload"])
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !bytes.Equal(fv.data, data) {
		t.Errorf("image volume is not the file")
	}
}

func TestFakeImageStalledUploadIsReplaced(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, cnt := fakeBackend(f)
	b.imageStall = 20 * time.Millisecond
	ctx := context.Background()
	path := writeImage(t, 100000, true, gib)
	info, _ := inspectImage(ctx, path)
	data, _ := os.ReadFile(path)

	// An uploader that died at 10%.
	x, _ := imageVolumeXML(info.volumeName(), info)
	vol, _ := f.StorageVolCreateXML(libvirt.StoragePool{Name: "pool"}, x, 0)
	f.pools["pool"].vols[vol.Name].data = data[:10000]
	if _, err := b.Create(ctx, imageSpec("stall-1", path)); err != nil {
		t.Fatal(err)
	}
	if _, per := cnt.take(); per["StorageVolUpload"] != 2 || per["StorageVolDelete"] != 1 {
		t.Errorf("calls %v: want the stalled volume deleted and uploaded again", per)
	}
	if !bytes.Equal(f.pools["pool"].vols[info.volumeName()].data, data) {
		t.Errorf("image volume is not the file")
	}
}

func TestFakeImageUploadFailureLeavesNothing(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	f.failOn["StorageVolUpload"] = lvErr(libvirt.ErrSystemError, "cannot write: No space left on device")
	b, _ := fakeBackend(f)
	path := writeImage(t, 100000, true, gib)
	_, err := b.Create(context.Background(), imageSpec("fail-1", path))
	if backend.ClassOf(err) != backend.ClassQuota || !strings.Contains(err.Error(), "uploading image file") {
		t.Errorf("Create = %v, want a Quota error about the upload", err)
	}
	if names := volNames(f); len(names) != 0 || len(f.domains) != 0 {
		t.Errorf("left behind: volumes %v, %d domains", names, len(f.domains))
	}

	// A cancelled upload also removes its partial volume: the ctx ends once the first chunk is written.
	delete(f.failOn, "StorageVolUpload")
	ctx := cancelledAtFirstUpload(t, f)
	big := writeImage(t, 4<<20, false, 0)
	if _, err := b.Create(ctx, imageSpec("fail-2", big)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Create = %v", err)
	}
	checkNothingLeftAfterCancel(t, f)
}

func TestImagePlacementRules(t *testing.T) {
	t.Parallel()
	hosts := map[string]HostConfig{"h": {URI: "test:///x", Pool: "pool", Network: "net", BaseVolume: "host-base", DomainType: DomainTypeQEMU}}
	spec := imageSpec("p-1", "/images/a.qcow2")
	p, err := resolvePlacement(spec, hosts)
	if err != nil || p.BaseVolume != "" || p.ImageFile != "/images/a.qcow2" {
		t.Errorf("image placement = %+v, %v; the host's base volume must not apply", p, err)
	}
	optionsOf(spec.Placement).BaseVolume = "other"
	if _, err := resolvePlacement(spec, hosts); backend.ClassOf(err) != backend.ClassPermanent {
		t.Errorf("both base volume and image file = %v, want Permanent", err)
	}
	spec = fakeSpec("p-2", "o")
	optionsOf(spec.Placement).WaitForProxy = true
	// The flags are kept as given, so Get reads back what the configuration says; Create applies the rule
	// (no address wait, no proxy wait) where it waits.
	if p, _ := resolvePlacement(spec, hosts); p.WaitForAddress || !p.WaitForProxy {
		t.Errorf("WaitForProxy without WaitForAddress resolved to %+v, want the flags as given", p)
	}
	missing := imageSpec("p-3", filepath.Join(t.TempDir(), "nope.qcow2"))
	b, _ := fakeBackend(newFakeHost())
	if _, err := b.Create(context.Background(), missing); backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "nope.qcow2") {
		t.Errorf("missing image file = %v, want Permanent naming it", err)
	}
}

func TestFakeAdoptNeedsNoImageFile(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, cnt := fakeBackend(f)
	ctx := context.Background()
	path := writeImage(t, 50000, true, gib)
	spec := imageSpec("adopt-img", path)
	first, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	cnt.take()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	again, err := b.Create(ctx, spec)
	if err != nil || again.UID != first.UID || optionsOf(again.Placement).BaseVolume != optionsOf(first.Placement).BaseVolume {
		t.Fatalf("adopting Create after the image file is gone = %+v, %v", again, err)
	}
	if _, per := cnt.take(); per["StorageVolGetXMLDesc"] != 0 || per["StorageVolUpload"] != 0 {
		t.Errorf("adopting Create touched the image: %v", per)
	}
}
