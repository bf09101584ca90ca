package proxyconf

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

// What Squid 5.7 logs when it acts on a helper overload that has lasted 3 minutes (src/helper.cc,
// helper::prepSubmit): with on-persistent-overload=ERR it drops the request and says so once; with the default,
// die, it exits with the fatal message instead.
const (
	overloadDropped = "WARNING: dropping requests to overloaded basicauthenticator helper"
	overloadFatal   = "Too many queued basicauthenticator requests"
)

// TestAuthHelperOverload: a client sending wrong passwords faster than the helpers can check them keeps the
// auth helpers' queue over its limit. Squid does nothing about that for 3 minutes, then applies
// on-persistent-overload: by default it exits, taking the proxy down for every client. So the flood here is
// not bounded by a count of requests but by that event: it goes on until Squid has begun dropping lookups
// (or exited), and then until the right password has got through once more. Throughout, Squid must keep
// running, every wrong password must get 407, and the right password 200, except that a lookup Squid drops
// is answered 407 like a failed one; and after the flood the right password gets 200 at once.
func TestAuthHelperOverload(t *testing.T) {
	if testing.Short() {
		t.Skip("takes over 3 minutes: Squid acts on a helper overload only once it has lasted that long")
	}
	t.Parallel()
	b := squidtest.NewUpstreams(t)
	hp := squidtest.Port(t, b.HTTP)
	user, pass := "flood-user", "the-right-password"
	dir := squidtest.Dir(t)
	s := Settings{
		AllowedClientCIDRs:  []string{"127.0.0.0/8"},
		AllowedDestinations: []string{"allowed.test"},
		AllowedPorts:        []int{hp},
		Users:               []BasicAuth{{Username: user, Password: pass}},
	}
	// The flood keeps every helper busy with bcrypt for minutes on purpose; niced, Squid and its helpers
	// leave the CPU to the tests that run beside this one.
	sq := startSquidUnder(t, []string{"nice", "-n", "10"}, s, testOptions(t, dir, testHosts), dir)
	target := fmt.Sprintf("http://allowed.test:%d/", hp)
	// A lookup waits behind the whole queue, on a machine the helpers share with other tests: the exchange
	// timeout only catches a Squid that stopped answering.
	const exchange = 2 * time.Minute
	right := squidtest.Client{Proxy: sq.Proxy, From: "127.0.0.1", User: user, Pass: pass, Timeout: exchange}
	if got := right.Get(t, target, "allowed.test"); got.Status != 200 {
		t.Fatalf("right password before the flood: got %d, want 200", got.Status)
	}

	// The real user's name with a new wrong password each time: the costly case, as Squid keeps one record
	// per user name and every new password sends it to a helper for a bcrypt check (an unknown user name is
	// refused by the helper at once). The workers keep four times as many lookups in Squid's hands as the
	// helpers and the queue limit hold, so the queue stays overloaded: Squid's 3 minutes start again whenever
	// the queue falls to its limit, which 120 answers in a row without a new lookup would take, as when a
	// loaded machine leaves the workers without a core for seconds (with twice as many, in a cold run of the
	// suite Squid did not act within 6 minutes: the overload lapsed). Each has a source address of its own,
	// as clients of a real flood would.
	const workers = 4 * (authHelpers + authHelperQueue)
	var (
		stop      atomic.Bool
		sent      atomic.Int64
		mu        sync.Mutex
		statuses  = map[int]int{}
		floodErrs []error
		wg        sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := squidtest.Client{Proxy: sq.Proxy, From: fmt.Sprintf("127.0.1.%d", w+1), User: user, Timeout: exchange}
			for !stop.Load() {
				c.Pass = fmt.Sprintf("wrong-password-%d", sent.Add(1))
				got, err := c.TryGet(target, "allowed.test")
				mu.Lock()
				if err != nil {
					floodErrs = append(floodErrs, err)
				} else {
					statuses[got.Status]++
				}
				mu.Unlock()
				if err != nil {
					return // Squid stopped answering: the probe loop below reports it
				}
			}
		}()
	}
	endFlood := func() {
		stop.Store(true)
		wg.Wait()
	}
	defer endFlood()
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return errors.Join(floodErrs...)
	}
	start := time.Now()
	// reportExit fails the test if Squid has exited, or, after a failed exchange, exits within a few seconds:
	// it may not have been reaped yet.
	reportExit := func(when string, failedExchange bool) {
		t.Helper()
		exited := false
		select {
		case <-sq.Exited:
			exited = true
		default:
		}
		if !exited && failedExchange {
			select {
			case <-sq.Exited:
				exited = true
			case <-time.After(10 * time.Second):
			}
		}
		if !exited {
			return
		}
		why := "Squid exited"
		if strings.Contains(sq.File("cache.log"), overloadFatal) {
			why = "Squid exited on the persistent overload"
		}
		t.Fatalf("%s %s, after %s and %d wrong passwords:\n%s", why, when, time.Since(start).Round(time.Second), sent.Load(), cacheLogEnd(sq.File("cache.log")))
	}

	// Probe with the right password, one request after another, until one sent after Squid began dropping
	// lookups gets through. Squid's clock decides when that is; the deadline, twice its 3 minutes, only
	// catches a Squid that never acts.
	deadline := start.Add(6 * time.Minute)
	var probes, dropped int
	var slowest, actedAfter time.Duration
	for {
		reportExit("under the flood", false)
		if err := failed(); err != nil {
			reportExit("under the flood", true)
			t.Fatalf("a flood request failed: %v\n%s", err, cacheLogEnd(sq.File("cache.log")))
		}
		if time.Now().After(deadline) {
			t.Fatalf("Squid did not act on the overload within %s of flooding (%d wrong passwords):\n%s",
				time.Since(start).Round(time.Second), sent.Load(), cacheLogEnd(sq.File("cache.log")))
		}
		wasDropping := strings.Contains(sq.File("cache.log"), overloadDropped)
		if wasDropping && actedAfter == 0 {
			actedAfter = time.Since(start)
		}
		sentAt := time.Now()
		got, err := right.TryGet(target, "allowed.test")
		if err != nil {
			reportExit("under the flood", true)
			t.Fatalf("right password during the flood: %v", err)
		}
		probes++
		slowest = max(slowest, time.Since(sentAt))
		if got.Status == 200 && wasDropping {
			break
		}
		switch got.Status {
		case 200:
		case 407:
			// Only a lookup Squid dropped (on-persistent-overload=ERR) refuses the right password.
			if !cacheLogShows(sq, overloadDropped) {
				t.Fatalf("right password during the flood: got 407 before Squid dropped any lookup:\n%s", cacheLogEnd(sq.File("cache.log")))
			}
			dropped++
		default:
			t.Fatalf("right password during the flood: got %d, want 200", got.Status)
		}
	}
	endFlood()
	reportExit("at the end of the flood", false)
	if err := failed(); err != nil {
		reportExit("at the end of the flood", true)
		t.Fatalf("a flood request failed: %v", err)
	}
	if len(statuses) != 1 || statuses[407] == 0 {
		t.Errorf("wrong passwords got %v, want 407 only", statuses)
	}

	// After the flood Squid still serves the health check, and the right password at once: the queue is empty.
	health := squidtest.Client{Proxy: sq.Health, From: "127.0.0.1"}
	if got := health.Get(t, HealthPath, "127.0.0.1"); got.Status != 200 {
		t.Errorf("health check after the flood: got %d, want 200", got.Status)
	}
	if got := right.Get(t, target, "allowed.test"); got.Status != 200 {
		t.Errorf("right password after the flood: got %d, want 200", got.Status)
	}
	reportExit("after the flood", false)
	if strings.Contains(sq.File("cache.log"), "FATAL") {
		t.Errorf("cache.log reports a fatal error:\n%s", cacheLogEnd(sq.File("cache.log")))
	}
	t.Logf("%d wrong passwords in %s (%v); Squid began dropping lookups after %s; right password: %d probes, %d dropped, slowest %s",
		sent.Load(), time.Since(start).Round(time.Second), statuses, actedAfter.Round(time.Second), probes, dropped, slowest.Round(time.Millisecond))
}

// cacheLogShows waits for cache.log to hold s, which Squid may write a little after the response it concerns.
func cacheLogShows(sq *squidtest.Squid, s string) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if strings.Contains(sq.File("cache.log"), s) {
			return true
		}
	}
	return false
}

// cacheLogEnd is the last lines of Squid's cache log, enough to show why it stopped or dropped requests.
func cacheLogEnd(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}
