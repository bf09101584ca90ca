package kvm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"
)

// BenchmarkRPCCallsLive counts libvirt calls per operation against the real daemon (EGRESS_LIBVIRT_URI),
// with real QEMU domains for Create, Get and Delete. ListByTag100 lists 100 defined (not started) domains.
func BenchmarkRPCCallsLive(b *testing.B) {
	h := liveHostConfig(b)
	cnt := &counter{calls: map[string]int{}}
	be, err := newBackend(Config{Hosts: map[string]HostConfig{liveHost: h}}, func(ctx context.Context, h HostConfig, t target) (*libvirtconn.Session, error) {
		s, err := dialLibvirt(ctx, h, t)
		if err == nil {
			s.API = countingAPI(s.API, cnt)
		}
		return s, err
	})
	if err != nil {
		b.Fatal(err)
	}
	be.pollInterval = 100 * time.Millisecond
	closeAtEnd(b, be)
	ctx := context.Background()
	owner := testOwner()
	report := func(b *testing.B, total int) { b.ReportMetric(float64(total)/float64(b.N), "calls/op") }

	var ids []backend.ProviderID
	b.Run("Create", func(b *testing.B) {
		cnt.take()
		for b.Loop() {
			inst, err := be.Create(ctx, liveSpec(owner))
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, inst.ID)
		}
		n, _ := cnt.take()
		report(b, n)
	})
	b.Run("Get", func(b *testing.B) {
		cnt.take()
		for b.Loop() {
			if _, err := be.Get(ctx, ids[0]); err != nil {
				b.Fatal(err)
			}
		}
		n, _ := cnt.take()
		report(b, n)
	})
	b.Run("Delete", func(b *testing.B) {
		total := 0
		for i := 0; b.Loop(); i++ {
			if i >= len(ids) {
				inst, err := be.Create(ctx, liveSpec(owner))
				if err != nil {
					b.Fatal(err)
				}
				ids = append(ids, inst.ID)
			}
			cnt.take()
			if err := be.Delete(ctx, ids[i]); err != nil {
				b.Fatal(err)
			}
			n, _ := cnt.take()
			total += n
		}
		report(b, total)
	})
	for _, id := range ids {
		if err := be.Delete(ctx, id); err != nil {
			b.Errorf("cleanup of %s: %v", id.Name, err)
		}
	}

	b.Run("ListByTag100", func(b *testing.B) {
		// 100 defined domains with the provider's metadata: no volumes, never started.
		var names []string
		err := be.conns[liveHost].do(ctx, func(l api) error {
			for i := range 100 {
				spec := liveSpec(owner)
				spec.Name = fmt.Sprintf("egress-bench-%03d", i)
				p, err := resolvePlacement(spec, be.hosts)
				if err != nil {
					return err
				}
				meta, _ := newMetadata(spec, p, time.Now()).marshal()
				x, err := domainXML(spec.Name, p, DomainTypeQEMU, 3128, meta)
				if err != nil {
					return err
				}
				if _, err := l.DomainDefineXMLFlags(x, 0); err != nil {
					return err
				}
				names = append(names, spec.Name)
			}
			return nil
		})
		defer func() {
			for _, n := range names {
				if err := be.Delete(ctx, backend.ProviderID{Backend: Kind, Target: liveHost, Name: n}); err != nil {
					b.Errorf("cleanup of %s: %v", n, err)
				}
			}
		}()
		if err != nil {
			b.Fatal(err)
		}
		cnt.take()
		for b.Loop() {
			list, err := be.ListByTag(ctx, backend.Selector{Owner: owner})
			if err != nil || len(list) != 100 {
				b.Fatalf("ListByTag = %d, %v", len(list), err)
			}
		}
		n, _ := cnt.take()
		report(b, n)
	})
}
