package kvm

import (
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// countingLiveBackend is liveBackend with every libvirt call counted.
func countingLiveBackend(t testing.TB) (*Backend, *counter) {
	t.Helper()
	cnt := &counter{calls: map[string]int{}}
	b, err := newBackend(Config{Hosts: map[string]HostConfig{liveHost: liveHostConfig(t)}}, func(ctx context.Context, h HostConfig, tg target) (*session, error) {
		s, err := dialLibvirt(ctx, h, tg)
		if err == nil {
			s.api = countingAPI(s.api, cnt)
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
		specs[i].Placement.KVM.ImageFile = path
		cleanupProxy(t, b, specs[i].Name)
	}
	cnt.take()
	var wg sync.WaitGroup
	errs := make([]error, len(specs))
	for i := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = b.Create(ctxFor(t, 3*time.Minute), specs[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Create %d: %v", i, err)
		}
	}
	_, per := cnt.take()
	if per["StorageVolUpload"] != 3 {
		t.Errorf("StorageVolUpload calls = %d, want 3: the image once, a seed per proxy", per["StorageVolUpload"])
	}

	var images []string
	var image libvirtxml.StorageVolume
	inspect(t, b, func(l api) error {
		p, err := l.StoragePoolLookupByName(b.hosts[liveHost].Pool)
		if err != nil {
			return err
		}
		vols, _, err := l.StoragePoolListAllVolumes(p, 1, 0)
		if err != nil {
			return err
		}
		for _, v := range vols {
			if strings.HasPrefix(v.Name, imageVolumePrefix+info.sum[:16]) {
				images = append(images, v.Name)
			}
		}
		s, err := l.StorageVolGetXMLDesc(volRef(p.Name, info.volumeName()), 0)
		if err != nil {
			return err
		}
		return image.Unmarshal(s)
	})
	if len(images) != 1 || images[0] != info.volumeName() {
		t.Fatalf("image volumes = %v, want exactly %s", images, info.volumeName())
	}
	if image.Physical == nil || image.Physical.Value != uint64(info.size) || image.Target.Format.Type != "qcow2" || image.Capacity.Value != info.capacity {
		t.Errorf("image volume = physical %v format %v capacity %v; want the file's %d bytes, qcow2, %d", image.Physical, image.Target.Format, image.Capacity, info.size, info.capacity)
	}
	// The pool's copy is the file, byte for byte.
	if out, err := exec.Command("cmp", path, image.Target.Path).CombinedOutput(); err != nil {
		t.Errorf("image volume differs from the file: %v %s", err, out)
	}
	for _, spec := range specs {
		if st, ok := domainState(t, b, spec.Name); !ok || st != libvirt.DomainRunning {
			t.Errorf("domain %s state %v (found %v), want running", spec.Name, st, ok)
		}
		var root libvirtxml.StorageVolume
		inspect(t, b, func(l api) error {
			s, err := l.StorageVolGetXMLDesc(volRef(b.hosts[liveHost].Pool, rootVolumeName(spec.Name)), 0)
			if err != nil {
				return err
			}
			return root.Unmarshal(s)
		})
		if root.BackingStore == nil || root.BackingStore.Path != image.Target.Path {
			t.Errorf("root overlay of %s backs on %+v, want %s", spec.Name, root.BackingStore, image.Target.Path)
		}
	}

	for _, spec := range specs {
		if err := b.Delete(ctxFor(t, time.Minute), idOf(backend.Spec{Name: spec.Name, Placement: backend.Placement{Target: liveHost}})); err != nil {
			t.Fatal(err)
		}
	}
	inspect(t, b, func(l api) error {
		_, err := l.StorageVolGetXMLDesc(volRef(b.hosts[liveHost].Pool, info.volumeName()), 0)
		return err
	})
	list, err := b.ListByTag(ctxFor(t, time.Minute), backend.Selector{Owner: owner})
	if err != nil || len(list) != 0 {
		t.Errorf("ListByTag after deletes = %v, %v; want nothing (the image is nobody's orphan)", list, err)
	}
}
