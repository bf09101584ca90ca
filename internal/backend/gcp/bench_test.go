package gcp

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/secretmanagerfake"
)

// Benchmarks against the fake, counting the calls the backend makes. Run with -benchtime=1x: each iteration
// is a whole scenario. The settings carry no password so bcrypt does not dominate the figures.

func benchBackend(b *testing.B, opts computefake.Options) (*computefake.Server, *Backend) {
	b.Helper()
	opts.Permissions = documentedPermissions(b)
	fake := computefake.New(opts)
	b.Cleanup(fake.Close)
	// ListByTag lists the owner's secrets too (orphans of gone VMs); the Compute fake checks no token.
	secrets := secretmanagerfake.New(secretmanagerfake.Options{AdminToken: "bench-token", AdminPermissions: opts.Permissions})
	b.Cleanup(secrets.Close)
	be, err := New(Config{DefaultProject: testProject, ProjectConfig: ProjectConfig{ComputeEndpoint: fake.URL,
		SecretManagerEndpoint: secrets.URL, AccessToken: "bench-token"}})
	if err != nil {
		b.Fatal(err)
	}
	be.retry = backend.Backoff{Initial: 10 * time.Millisecond, Max: time.Second, Factor: 2}
	b.Cleanup(func() { _ = be.Close() })
	return fake, be
}

func benchSpec(i int, zone string) backend.Spec {
	uid := fmt.Sprintf("bench-%04d", i)
	return backend.Spec{
		Name: backend.NameFromUID(uid), UID: uid, Owner: "bench",
		Placement: backend.Placement{Backend: Kind, Target: testProject, Scope: zone},
		Proxy:     proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{".example.com"}},
	}
}

// 50 creates, 10 at a time, each operation taking 2 s: the ideal is 5 waves of 2 s. Reported: the wall time
// over that ideal, and the requests per create.
func BenchmarkCreate50Concurrency10(b *testing.B) {
	const n, parallel, latency = 50, 10, 2 * time.Second
	for range b.N {
		fake, be := benchBackend(b, computefake.Options{OperationLatency: latency})
		ctx := context.Background()
		sem := make(chan struct{}, parallel)
		var wg sync.WaitGroup
		errs := make([]error, n)
		start := time.Now()
		for i := range n {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				_, errs[i] = be.Create(ctx, benchSpec(i, "us-central1-a"))
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(elapsed.Seconds()/(float64(n/parallel)*latency.Seconds()), "x-ideal")
		b.ReportMetric(float64(len(fake.Requests()))/n, "requests/create")
	}
}

// A refresh of 200 proxies is 200 instance GETs and nothing else.
func BenchmarkRefresh200(b *testing.B) {
	fake, be := benchBackend(b, computefake.Options{})
	ctx := context.Background()
	var ids []backend.ProviderID
	for i := range 200 {
		inst, err := be.Create(ctx, benchSpec(i, "us-central1-a"))
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, inst.ID)
	}
	b.ResetTimer()
	for range b.N {
		fake.ResetLog()
		for _, id := range ids {
			if _, err := be.Get(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
		gets, all := fake.Count(http.MethodGet, `/zones/[^/]+/instances/[^/]+$`), len(fake.Requests())
		if gets != 200 || all != 200 {
			b.Fatalf("refresh of 200 made %d instance GETs of %d requests, want 200 of 200", gets, all)
		}
		b.ReportMetric(float64(all), "requests/refresh")
	}
}

// ListByTag over 200 proxies in 20 zones is one aggregated call (one page of up to 500), plus one for the
// static addresses kept for no proxy (and one list of Secret Manager's, on its own endpoint).
func BenchmarkListByTag200In20Zones(b *testing.B) {
	var zones []string
	for r := range 5 {
		for _, z := range []string{"a", "b", "c", "d"} {
			zones = append(zones, fmt.Sprintf("bench-north%d-%s", r, z)) // of Compute Engine's form, as ValidateZone wants
		}
	}
	fake, be := benchBackend(b, computefake.Options{Zones: zones})
	ctx := context.Background()
	for i := range 200 {
		if _, err := be.Create(ctx, benchSpec(i, zones[i%len(zones)])); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		fake.ResetLog()
		got, err := be.ListByTag(ctx, backend.Selector{Owner: "bench"})
		if err != nil || len(got) != 200 {
			b.Fatalf("ListByTag = %d, %v; want 200", len(got), err)
		}
		if n := len(fake.Requests()); n != 2 {
			b.Fatalf("ListByTag made %d requests, want 2 (instances and addresses)", n)
		}
		b.ReportMetric(float64(len(fake.Requests())), "requests/list")
	}
}

// BenchmarkGuestAttributeQueries counts the guest attribute queries of a create with wait_for_proxy on a VM
// that boots in three minutes, then of a rule change its guest applies in twenty seconds, with the backend's
// own poll spacing on a virtual clock (guestScenario): minutes of waiting in milliseconds. Reported: queries a
// minute over each wait, and the most in any minute and in any second, which Compute Engine limits to 10 and
// 3 per VM; it fails beyond them.
//
//	go test -run '^$' -bench GuestAttributeQueries -benchtime 1x ./internal/backend/gcp/
func BenchmarkGuestAttributeQueries(b *testing.B) {
	perMinute := func(times []time.Time) float64 {
		if len(times) < 2 || times[len(times)-1].Sub(times[0]) < time.Minute {
			return float64(len(times))
		}
		return float64(len(times)) / times[len(times)-1].Sub(times[0]).Minutes()
	}
	for b.Loop() {
		m := guestScenario{boot: 3 * time.Minute, apply: 20 * time.Second}.run(b)
		all := append(append([]time.Time(nil), m.create...), m.reconfigure...)
		inMinute, inSecond := maxIn(all, time.Minute), maxIn(all, time.Second)
		if inMinute > computefake.GuestQueriesPerMinute || inSecond > computefake.GuestQueriesPerSecond || m.violations > 0 {
			b.Fatalf("%d queries in a minute, %d in a second, %d refused: beyond Compute Engine's %d and %d",
				inMinute, inSecond, m.violations, computefake.GuestQueriesPerMinute, computefake.GuestQueriesPerSecond)
		}
		b.ReportMetric(perMinute(m.create), "create-queries/min")
		b.ReportMetric(perMinute(m.reconfigure), "reconfigure-queries/min")
		b.ReportMetric(float64(len(m.create)), "create-queries")
		b.ReportMetric(float64(len(m.reconfigure)), "reconfigure-queries")
		b.ReportMetric(float64(inMinute), "max-queries/60s")
		b.ReportMetric(float64(inSecond), "max-queries/1s")
	}
}
