package kvm

import (
	"context"
	"fmt"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// RPC calls per operation, counted through the api interface. They are a property of the backend's logic,
// so the fake counts them exactly; BenchmarkRPCCallsLive counts the same against a real libvirtd.
//
// The per-domain metadata read in ListByTag is what libvirt forces: no call returns several domains'
// metadata. Everything else is constant per host. Get is 7 for a running proxy whose address must be
// discovered (lease, then guest agent) and whose agent is pinged (Reconfigurable), 4 with a fixed IP, plus
// the network's XML the first time a process reads a proxy on that network (egressAddress: its forward mode
// decides whether destinations see the guest's address), which later Gets take from the Backend's cache.
// Create ends with the same ping, and looks its libvirt network up before it makes anything, so that a
// missing one is refused with nothing left behind.
func TestRPCCallCounts(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, cnt := fakeBackend(f)
	ctx := context.Background()
	spec := fakeSpec("uid-0", "o")

	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	create, perCreate := cnt.take()
	if _, err := b.Get(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	get, perGet := cnt.take()
	if err := b.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	del, perDelete := cnt.take()

	const n = 100
	for i := range n {
		if _, err := b.Create(ctx, fakeSpec(fmt.Sprintf("uid-%d", i), "o")); err != nil {
			t.Fatal(err)
		}
	}
	cnt.take()
	list, err := b.ListByTag(ctx, backend.Selector{Owner: "o"})
	if err != nil || len(list) != n {
		t.Fatalf("ListByTag = %d instances, %v", len(list), err)
	}
	lst, perList := cnt.take()

	// From an image file: later Creates read the image volume once, by pool and name, where a base volume
	// costs a lookup and a read (13, one call fewer than from a base volume). The first also checks the
	// pool, creates the volume, uploads the image and reads the volume again (5 calls more).
	path := writeImage(t, 100000, true, gib)
	if _, err := b.Create(ctx, imageSpec("img-a", path)); err != nil {
		t.Fatal(err)
	}
	upload, perUpload := cnt.take()
	if _, err := b.Create(ctx, imageSpec("img-b", path)); err != nil {
		t.Fatal(err)
	}
	shared, perShared := cnt.take()

	t.Logf("Create %d %v\nGet %d %v\nDelete %d %v\nListByTag(%d) %d %v\nCreate uploading an image %d %v\nCreate on an uploaded image %d %v",
		create, perCreate, get, perGet, del, perDelete, n, lst, perList, upload, perUpload, shared, perShared)
	want := map[string][2]int{
		"Create": {create, 14}, "Get": {get, 7}, "Delete": {del, 6}, "ListByTag": {lst, n + 3},
		"Create uploading an image": {upload, 18}, "Create on an uploaded image": {shared, 13},
	}
	for op, w := range want {
		if w[0] != w[1] {
			t.Errorf("%s made %d calls, want %d", op, w[0], w[1])
		}
	}
}

// BenchmarkRPCCalls reports calls/op for each operation against the fake host.
func BenchmarkRPCCalls(b *testing.B) {
	ctx := context.Background()
	// discard drops the calls counted so far in this iteration: an op's setup is not what is measured.
	var discard func()
	run := func(b *testing.B, setup func(*Backend) backend.ProviderID, op func(*Backend, backend.ProviderID, int) error) {
		f := newFakeHost()
		be, cnt := fakeBackend(f)
		id := setup(be)
		cnt.take()
		discard = func() { cnt.take() }
		total := 0
		for i := 0; b.Loop(); i++ {
			if err := op(be, id, i); err != nil {
				b.Fatal(err)
			}
			n, _ := cnt.take()
			total += n
		}
		b.ReportMetric(float64(total)/float64(b.N), "calls/op")
	}
	none := func(*Backend) backend.ProviderID { return backend.ProviderID{} }
	b.Run("Create", func(b *testing.B) {
		run(b, none, func(be *Backend, _ backend.ProviderID, i int) error {
			_, err := be.Create(ctx, fakeSpec(fmt.Sprintf("c-%d", i), "o"))
			return err
		})
	})
	b.Run("Get", func(b *testing.B) {
		run(b, func(be *Backend) backend.ProviderID {
			inst, _ := be.Create(ctx, fakeSpec("g", "o"))
			return inst.ID
		}, func(be *Backend, id backend.ProviderID, _ int) error {
			_, err := be.Get(ctx, id)
			return err
		})
	})
	b.Run("Delete", func(b *testing.B) {
		run(b, none, func(be *Backend, _ backend.ProviderID, i int) error {
			inst, err := be.Create(ctx, fakeSpec(fmt.Sprintf("d-%d", i), "o"))
			if err != nil {
				return err
			}
			discard() // only the Delete's calls count
			return be.Delete(ctx, inst.ID)
		})
	})
	b.Run("ListByTag100", func(b *testing.B) {
		run(b, func(be *Backend) backend.ProviderID {
			for i := range 100 {
				if _, err := be.Create(ctx, fakeSpec(fmt.Sprintf("l-%d", i), "o")); err != nil {
					b.Fatal(err)
				}
			}
			return backend.ProviderID{}
		}, func(be *Backend, _ backend.ProviderID, _ int) error {
			_, err := be.ListByTag(ctx, backend.Selector{Owner: "o"})
			return err
		})
	})
}
