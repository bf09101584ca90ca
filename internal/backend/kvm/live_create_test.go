package kvm

import (
	"sort"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

func TestLiveCreateGetDelete(t *testing.T) {
	b := liveBackend(t)
	spec := liveSpec(testOwner())
	cleanupProxy(t, b, spec.Name)

	inst, err := b.Create(ctxFor(t, 2*time.Minute), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if want := "kvm/" + liveHost + "/" + spec.Name; inst.ID.String() != want {
		t.Errorf("id = %s, want %s", inst.ID, want)
	}
	if inst.State != backend.StateRunning {
		t.Errorf("state = %s, want Running", inst.State)
	}
	if st, ok := domainState(t, b, spec.Name); !ok || st != libvirt.DomainRunning {
		t.Fatalf("domain state = %v (found %v), want running under QEMU", st, ok)
	}
	vols := volumesOf(t, b, spec.Name)
	sort.Strings(vols)
	if want := []string{spec.Name + "-root.qcow2", spec.Name + "-seed.iso"}; !equalStrings(vols, want) {
		t.Errorf("volumes = %v, want exactly %v", vols, want)
	}

	got, err := b.Get(ctxFor(t, 30*time.Second), inst.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.UID != spec.UID || got.Owner != spec.Owner || got.State != backend.StateRunning || got.Labels["team"] != "egress" {
		t.Errorf("Get = %+v, want uid %s owner %s Running with labels", got, spec.UID, spec.Owner)
	}
	if got.CreatedAt.IsZero() || time.Since(got.CreatedAt) > 5*time.Minute {
		t.Errorf("CreatedAt = %v, want about now", got.CreatedAt)
	}
	if optionsOf(got.Placement) == nil || optionsOf(got.Placement).MemoryMiB != 128 || optionsOf(got.Placement).DomainType != DomainTypeQEMU {
		t.Errorf("placement read back = %+v", optionsOf(got.Placement))
	}

	if err := b.Delete(ctxFor(t, time.Minute), inst.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, ok := domainState(t, b, spec.Name); ok {
		t.Error("domain still exists after Delete")
	}
	if vols := volumesOf(t, b, spec.Name); len(vols) != 0 {
		t.Errorf("volumes left after Delete: %v", vols)
	}
	if _, err := b.Get(ctxFor(t, 30*time.Second), inst.ID); !backend.IsNotFound(err) {
		t.Errorf("Get after Delete = %v, want NotFound", err)
	}
	if err := b.Delete(ctxFor(t, time.Minute), inst.ID); err != nil {
		t.Errorf("second Delete = %v, want nil (idempotent)", err)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
