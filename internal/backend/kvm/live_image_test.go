package kvm

import (
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"
)

// countingLiveBackend is liveBackend with every libvirt call counted.
func countingLiveBackend(t testing.TB) (*Backend, *counter) {
	t.Helper()
	cnt := &counter{calls: map[string]int{}}
	b, err := newBackend(Config{Hosts: map[string]HostConfig{liveHost: liveHostConfig(t)}}, func(ctx context.Context, h HostConfig, tg target) (*libvirtconn.Session, error) {
		s, err := dialLibvirt(ctx, h, tg)
		if err == nil {
			s.API = countingAPI(s.API, cnt)
		}
		return s, err
	})
	if err != nil {
		t.Fatal(err)
	}
	b.pollInterval = 200 * time.Millisecond
	closeAtEnd(t, b)
	return b, cnt
}

// liveQCOW2 makes a qcow2 image of random content (so its volume is this test's alone) with qemu-img.
func liveQCOW2(t *testing.T, dataMiB int) string {
	t.Helper()
	dir := t.TempDir()
	raw := filepath.Join(dir, "image.raw")
	data := make([]byte, dataMiB<<20)
	rand.Read(data)
	if err := os.WriteFile(raw, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "image.qcow2")
	if b, err := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, out).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert: %v: %s", err, b)
	}
	return out
}

// removeImageVolume deletes the image volume the test made: the provider never does.
func removeImageVolume(t *testing.T, b *Backend, name string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := b.conns[liveHost].do(ctx, func(l api) error { return deleteVolume(l, b.hosts[liveHost].Pool, name) }); err != nil {
			t.Errorf("cleanup of image volume %s: %v", name, err)
		}
	})
}

func TestLiveImageFileSharedByParallelCreates(t *testing.T) {
	b, cnt := countingLiveBackend(t)
	owner := testOwner()
	path := liveQCOW2(t, 48)
	info, err := inspectImage(ctxFor(t, time.Minute), path)
	if err != nil {
		t.Fatal(err)
	}
	removeImageVolume(t, b, info.volumeName())

	specs := []backend.Spec{liveSpec(owner), liveSpec(owner)}
	for i := range specs {
		optionsOf(specs[i].Placement).ImageFile = path
		cleanupProxy(t, b, specs[i].Name)
	}
	cnt.take()
	createSideBySide(ctxFor(t, 3*time.Minute), t, b, specs)
	_, per := cnt.take()
	if per["StorageVolUpload"] != 3 {
		t.Errorf("StorageVolUpload calls = %d, want 3: the image once, a seed per proxy", per["StorageVolUpload"])
	}

	if images := poolVolumesNamed(t, b, imageVolumePrefix+info.sum[:16]); len(images) != 1 || images[0] != info.volumeName() {
		t.Fatalf("image volumes = %v, want exactly %s", images, info.volumeName())
	}
	if info.format != formatQCOW2 {
		t.Errorf("image file read as %s, want qcow2", info.format)
	}
	// The pool's copy is the file, byte for byte, with the file's format and capacity.
	image := checkImageVolume(t, b, info.volumeName(), path, info)
	for _, spec := range specs {
		if st, ok := domainState(t, b, spec.Name); !ok || st != libvirt.DomainRunning {
			t.Errorf("domain %s state %v (found %v), want running", spec.Name, st, ok)
		}
		if root := volumeXML(t, b, rootVolumeName(spec.Name)); root.BackingStore == nil || root.BackingStore.Path != image.Target.Path {
			t.Errorf("root overlay of %s backs on %+v, want %s", spec.Name, root.BackingStore, image.Target.Path)
		}
	}

	for _, spec := range specs {
		if err := b.Delete(ctxFor(t, time.Minute), idOf(backend.Spec{Name: spec.Name, Placement: backend.Placement{Target: liveHost}})); err != nil {
			t.Fatal(err)
		}
	}
	volumeXML(t, b, info.volumeName()) // fails the test if a Delete took the image along
	list, err := b.ListByTag(ctxFor(t, time.Minute), backend.Selector{Owner: owner})
	if err != nil || len(list) != 0 {
		t.Errorf("ListByTag after deletes = %v, %v; want nothing (the image is nobody's orphan)", list, err)
	}
}
