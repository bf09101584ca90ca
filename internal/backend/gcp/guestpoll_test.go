package gcp

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
)

// virtualClock is a clock on which Sleep returns at once and moves the time on, so that minutes of guest
// polls play in no time. The fake runs on it too, so its record of each query's time, and its check of the
// documented rate, are on the same time line. at, when set, runs each time the time moves: the test's guest
// acts then.
type virtualClock struct {
	mu  sync.Mutex
	now time.Time
	at  func(time.Time)
}

func (c *virtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *virtualClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	now, at := c.now, c.at
	c.mu.Unlock()
	if at != nil {
		at(now)
	}
	return nil
}

// guestScenario is one proxy made with wait_for_proxy on a VM whose guest reports after boot, then one rule
// change the guest applies after apply: what the backend's guest polls look like to Compute Engine.
type guestScenario struct {
	boot, apply time.Duration
}

// guestPolls is what a scenario measured.
type guestPolls struct {
	create, reconfigure []time.Time // the getGuestAttributes queries of each wait
	// late is how long after the guest's report each wait noticed it.
	createLate, reconfigureLate time.Duration
	violations                  int
}

// run plays the scenario with the backend's own poll spacing (not shortened as newTest shortens it).
func (sc guestScenario) run(tb testing.TB) guestPolls {
	tb.Helper()
	vc := &virtualClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	fake := computefake.New(computefake.Options{Now: vc.Now, Permissions: documentedPermissions(tb)})
	tb.Cleanup(fake.Close)
	b, err := New(Config{DefaultProject: testProject, ProjectConfig: ProjectConfig{ComputeEndpoint: fake.URL}, WithoutAuthentication: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = b.Close() })
	b.clock = vc
	b.pollInitial, b.pollMax = time.Millisecond, 20*time.Millisecond // operation polls: real time, and the fake answers at once

	spec := testSpec("uid-rate", "us-central1-a")
	optionsOf(spec.Placement).WaitForProxy = true
	var mu sync.Mutex
	var reportAt time.Time
	vc.at = func(now time.Time) {
		mu.Lock()
		due := !reportAt.IsZero() && !now.Before(reportAt)
		mu.Unlock()
		if in := fake.Instance(testProject, "us-central1-a", spec.Name); due && in != nil {
			id, _ := metadataValue(in, gcpguest.MetadataConfigID)
			if err := fake.SetGuestAttribute(testProject, "us-central1-a", spec.Name, gcpguest.GuestAttributeNamespace+"/"+gcpguest.GuestAttributeApplied, id); err != nil {
				tb.Error(err)
				mu.Lock()
				reportAt = time.Time{} // said once
				mu.Unlock()
			}
		}
	}
	report := func(after time.Duration) time.Time {
		mu.Lock()
		defer mu.Unlock()
		reportAt = vc.Now().Add(after)
		return reportAt
	}
	// The guest queries since the request log was emptied: each phase empties it first.
	queries := func() []time.Time {
		var out []time.Time
		for _, r := range fake.Requests() {
			if r.Method == http.MethodGet && strings.HasSuffix(r.Path, "/getGuestAttributes") {
				out = append(out, r.Time)
			}
		}
		fake.ResetLog()
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var m guestPolls
	booted := report(sc.boot)
	inst, err := b.Create(ctx, spec)
	if err != nil {
		tb.Fatal(err)
	}
	m.create, m.createLate = queries(), vc.Now().Sub(booted)

	next := spec.Proxy
	next.AllowedDestinations = []string{".example.org"}
	applied := report(sc.apply)
	if _, err := b.Reconfigure(ctx, inst.ID, next); err != nil {
		tb.Fatal(err)
	}
	m.reconfigure, m.reconfigureLate = queries(), vc.Now().Sub(applied)
	m.violations = fake.GuestQueryViolations()
	return m
}

// maxIn is the largest number of times within any window of length w.
func maxIn(times []time.Time, w time.Duration) int {
	best := 0
	for i := range times {
		n := 0
		for _, t := range times[i:] {
			if t.Sub(times[i]) < w {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}

// The backend polls a VM's guest attributes within the rate Compute Engine documents (and within its own
// smaller budget), through a long boot and a rule change, and still notices each report within one poll
// interval of its arrival.
func TestGuestQueriesWithinDocumentedRate(t *testing.T) {
	t.Parallel()
	for name, sc := range map[string]guestScenario{
		"slow boot, quick apply":  {boot: 4 * time.Minute, apply: 15 * time.Second},
		"quick boot, slow apply":  {boot: 40 * time.Second, apply: 3 * time.Minute},
		"reported before polling": {boot: 0, apply: 0},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := sc.run(t)
			all := append(append([]time.Time(nil), m.create...), m.reconfigure...)
			if n := maxIn(all, time.Minute); n > guestQueryBudgetPerMinute || n > computefake.GuestQueriesPerMinute {
				t.Errorf("%d guest attribute queries within one minute, budget %d, documented limit %d", n, guestQueryBudgetPerMinute, computefake.GuestQueriesPerMinute)
			}
			if n := maxIn(all, time.Second); n > guestQueryBudgetPerSecond || n > computefake.GuestQueriesPerSecond {
				t.Errorf("%d guest attribute queries within one second, budget %d, documented limit %d", n, guestQueryBudgetPerSecond, computefake.GuestQueriesPerSecond)
			}
			if m.violations != 0 {
				t.Errorf("the fake counted %d queries beyond the documented rate", m.violations)
			}
			if m.createLate > defaultGuestPollMax || m.reconfigureLate > defaultGuestPollMax {
				t.Errorf("reports noticed %v (create) and %v (reconfigure) after they arrived, want within %v", m.createLate, m.reconfigureLate, defaultGuestPollMax)
			}
		})
	}
}

// The ration books each instance's queries within the budget, whoever asks, and leaves other instances alone.
func TestGuestRation(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var g guestRation
	var booked []time.Time
	for range 3 * guestQueryBudgetPerMinute {
		booked = append(booked, t0.Add(g.reserve(t0, "p/z/a")))
	}
	if n := maxIn(booked, time.Minute); n != guestQueryBudgetPerMinute {
		t.Errorf("asked all at once, the ration booked %d queries within a minute, want %d", n, guestQueryBudgetPerMinute)
	}
	if n := maxIn(booked, time.Second); n != guestQueryBudgetPerSecond {
		t.Errorf("asked all at once, the ration booked %d queries within a second, want %d", n, guestQueryBudgetPerSecond)
	}
	if wait := g.reserve(t0, "p/z/b"); wait != 0 {
		t.Errorf("another instance waits %v behind this one's queries", wait)
	}
}

// A VM whose guest never reports: the wait ends at the caller's deadline, not past it, with the last answer
// and the advice that says where to look.
func TestWaitAppliedGivesUpAtTheDeadline(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, computefake.Options{})
	spec := testSpec("uid-silent", "us-central1-a")
	inst, err := b.Create(ctxT(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	// The next poll is due long after the deadline, so the wait must give up at once with what it last saw
	// rather than sleep into the deadline. The deadline itself is far enough that the requests before the wait
	// (get, setMetadata) meet it on any machine: the test takes no time on any machine either.
	b.guestPollInitial, b.guestPollMax = time.Hour, time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	next := spec.Proxy
	next.AllowedDestinations = []string{".example.org"}
	_, err = b.Reconfigure(ctx, inst.ID, next)
	var gaveUp *backend.GaveUpError
	if !errors.As(err, &gaveUp) || backend.ClassOf(err) != backend.ClassTransient || !strings.Contains(err.Error(), "has not reported") {
		t.Fatalf("Reconfigure of a silent VM = %v, want it to give up, Transient, saying the guest has not reported", err)
	}
	if waited := time.Since(start); waited > 5*time.Minute {
		t.Errorf("Reconfigure returned after %v: it slept towards the deadline instead of giving up when the next poll could not come before it", waited)
	}
	if !strings.Contains(backend.AdviceOf(err), "disableGuestAttributesAccess") {
		t.Errorf("advice %q does not name the policy that silences guest attributes", backend.AdviceOf(err))
	}
	if fake.GuestQueryViolations() != 0 {
		t.Errorf("%d queries beyond the documented rate", fake.GuestQueryViolations())
	}
}
