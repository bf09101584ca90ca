package kvm

import (
	"net/url"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// libvirt's test driver (test:///default), served by the same private daemon on its own socket, runs everything that needs
// no real guest: metadata written and read by libvirt itself, states, listing among foreign domains.
func testDriverBackend(t *testing.T) *Backend {
	t.Helper()
	b, err := New(Config{Hosts: map[string]HostConfig{liveHost: {
		URI: "test:///default?socket=" + url.QueryEscape(liveSocket(t)), Pool: "default-pool", Network: "default", BaseVolume: "base.img", DomainType: "qemu",
	}}})
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, b)
	return b
}

func TestTestDriverMetadataStatesAndListing(t *testing.T) {
	b := testDriverBackend(t)
	owner := testOwner()
	spec := liveSpec(owner)
	id := backend.ProviderID{Backend: Kind, Target: liveHost, Name: spec.Name}
	p, err := resolvePlacement(spec, b.hosts)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Now().Truncate(time.Second)
	meta, _ := newMetadata(spec, p, created).marshal()
	x, err := domainXML(spec.Name, p, "test", 3128, meta)
	if err != nil {
		t.Fatal(err)
	}
	var dom libvirt.Domain
	inspect(t, b, func(l api) error {
		dom, err = l.DomainDefineXMLFlags(x, 0)
		return err
	})
	t.Cleanup(func() {
		if err := b.Delete(ctxFor(t, time.Minute), id); err != nil {
			t.Errorf("cleanup of %s: %v", id.Name, err)
		}
	})

	got, err := b.Get(ctxFor(t, time.Minute), id)
	if err != nil || got.UID != spec.UID || !got.CreatedAt.Equal(created) || got.State != backend.StateStopped {
		t.Fatalf("Get of a defined domain = %+v, %v", got, err)
	}
	inspect(t, b, func(l api) error { return l.DomainCreate(dom) })
	if got, err = b.Get(ctxFor(t, time.Minute), id); err != nil || got.State != backend.StateRunning {
		t.Fatalf("Get of a started domain = %+v, %v", got, err)
	}

	spec.Labels = map[string]string{"team": "other"}
	if got, err = b.Update(ctxFor(t, time.Minute), id, spec); err != nil || got.Labels["team"] != "other" {
		t.Fatalf("Update = %+v, %v", got, err)
	}

	list, err := b.ListByTag(ctxFor(t, time.Minute), backend.Selector{Owner: owner})
	if err != nil || len(list) != 1 || list[0].Name != spec.Name || list[0].State != backend.StateRunning {
		t.Fatalf("ListByTag = %+v, %v; want only this proxy, the driver's own domain skipped", list, err)
	}

	// The driver's built-in domain "test" has no provider metadata: never ours, never NotFound.
	foreign := backend.ProviderID{Backend: Kind, Target: liveHost, Name: "test"}
	if _, err := b.Get(ctxFor(t, time.Minute), foreign); backend.ClassOf(err) != backend.ClassPermanent {
		t.Errorf("Get of a foreign domain = %v, want Permanent", err)
	}

	if err := b.Delete(ctxFor(t, time.Minute), id); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctxFor(t, time.Minute), id); !backend.IsNotFound(err) {
		t.Errorf("Get after Delete = %v, want NotFound", err)
	}
}

// TestTestDriverCreateFailureLeavesNothing: the test driver cannot take uploads, so Create fails at the
// seed; the half-made seed volume must not stay behind.
func TestTestDriverCreateFailureLeavesNothing(t *testing.T) {
	b := testDriverBackend(t)
	spec := liveSpec(testOwner())
	inspect(t, b, func(l api) error {
		p, err := l.StoragePoolLookupByName("default-pool")
		if err != nil {
			return err
		}
		_, err = l.StorageVolCreateXML(p, "<volume><name>base.img</name><capacity unit='bytes'>1073741824</capacity></volume>", 0)
		if isCode(err, libvirt.ErrStorageVolExist) {
			return nil
		}
		return err
	})
	_, err := b.Create(ctxFor(t, time.Minute), spec)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "virStorageVolUpload") {
		t.Fatalf("Create on the test driver = %v, want Permanent with libvirt's message", err)
	}
	inspect(t, b, func(l api) error {
		p, err := l.StoragePoolLookupByName("default-pool")
		if err != nil {
			return err
		}
		vols, _, err := l.StoragePoolListAllVolumes(p, 1, 0)
		for _, v := range vols {
			if strings.HasPrefix(v.Name, spec.Name) {
				t.Errorf("volume %s left behind", v.Name)
			}
		}
		return err
	})
	if h := b.Check(ctxFor(t, time.Minute)); !h[0].Healthy || !strings.HasPrefix(h[0].Details["hypervisor"], "TEST") {
		t.Errorf("Check on the test driver = %+v", h)
	}
}
