package backend

import (
	"context"
	"errors"
	"testing"
	"time"
)

var fastBackoff = Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, Factor: 2}

func TestRetry(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		errs      []error // returned by successive attempts; nil ends
		wantCalls int
		wantClass Class
		wantErr   bool
	}{
		"success first":          {[]error{nil}, 1, 0, false},
		"transient then success": {[]error{Transient("x", "a"), Transient("x", "b"), nil}, 3, 0, false},
		"unclassified retried":   {[]error{errors.New("odd"), nil}, 2, 0, false},
		"quota not retried":      {[]error{Quota("x", "full"), nil}, 1, ClassQuota, true},
		"permanent not retried":  {[]error{Permanent("x", "no"), nil}, 1, ClassPermanent, true},
		"not found not retried":  {[]error{NotFound("x", "gone"), nil}, 1, ClassNotFound, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			err := Retry(context.Background(), fastBackoff, func(context.Context) error {
				e := tc.errs[calls]
				calls++
				return e
			})
			if calls != tc.wantCalls {
				t.Errorf("calls = %d, want %d", calls, tc.wantCalls)
			}
			if (err != nil) != tc.wantErr || (err != nil && ClassOf(err) != tc.wantClass) {
				t.Errorf("err = %v (class %v), want error=%v class %v", err, ClassOf(err), tc.wantErr, tc.wantClass)
			}
		})
	}
}

// Retry stops when the caller cancels, in the middle of a wait far longer than the test, and reports the last
// error with the cancellation. The bound is a minute against an hour's wait: no timing budget.
func TestRetryHonoursCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow := Backoff{Initial: time.Hour, Max: time.Hour, Factor: 1}
	failed := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		result <- Retry(ctx, slow, func(context.Context) error {
			select {
			case failed <- struct{}{}:
			default:
			}
			return Transient("host h", "connection refused")
		})
	}()
	<-failed // the first attempt has failed: Retry is about to wait an hour
	cancel()
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrTransient) {
			t.Errorf("err = %v, want it to wrap context.Canceled and the last transient error", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Retry still waiting a minute after the cancel, in an hour-long backoff")
	}
}

// Retry does not start a wait that would outlive the deadline: it reports at once, before the deadline.
// The deadline is an hour and the wait two: a Retry that waited would still be waiting when the test gives
// up after a minute.
func TestRetryRespectsDeadline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	slow := Backoff{Initial: 2 * time.Hour, Max: 2 * time.Hour, Factor: 1}
	calls := 0
	result := make(chan error, 1)
	go func() {
		result <- Retry(ctx, slow, func(context.Context) error { calls++; return errors.New("flaky") })
	}()
	select {
	case err := <-result:
		var gaveUp *GaveUpError
		if !errors.As(err, &gaveUp) || gaveUp.Last.Error() != "flaky" || calls != 1 {
			t.Errorf("err = %v after %d calls, want a GaveUpError carrying the last error", err, calls)
		}
		if ctx.Err() != nil {
			t.Errorf("Retry returned after its deadline (%v), not before the wait", ctx.Err())
		}
	case <-time.After(time.Minute):
		t.Fatal("Retry started a two-hour wait with an hour left before its deadline")
	}
}

func TestPoll(t *testing.T) {
	t.Parallel()
	n := 0
	err := Poll(context.Background(), time.Millisecond, func(context.Context) (bool, error) { n++; return n == 3, nil })
	if err != nil || n != 3 {
		t.Errorf("Poll = %v after %d checks, want nil after 3", err, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err = Poll(ctx, time.Millisecond, func(context.Context) (bool, error) { return false, nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Poll that never finishes = %v, want deadline exceeded", err)
	}
}
