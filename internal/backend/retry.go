package backend

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Backoff spaces the attempts of Retry.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	// Factor multiplies the delay after each failed attempt.
	Factor float64
}

// DefaultBackoff suits API calls: quick first retries, then at most one attempt every 10 seconds.
var DefaultBackoff = Backoff{Initial: 250 * time.Millisecond, Max: 10 * time.Second, Factor: 2}

func (b Backoff) next(d time.Duration) time.Duration {
	if d <= 0 {
		return b.Initial
	}
	n := time.Duration(float64(d) * b.Factor)
	if n > b.Max {
		return b.Max
	}
	return n
}

// Retry calls op until it succeeds, fails with an error that is not Retryable, or ctx ends. It never waits past
// ctx's deadline: a wait that would end after it is cut short and the last error returned at once. When ctx
// ends, the returned error wraps both ctx's error and the last error of op, so the user sees why it kept failing.
func Retry(ctx context.Context, b Backoff, op func(context.Context) error) error {
	var delay time.Duration
	var earlier error
	for {
		err := op(ctx)
		if err == nil || !Retryable(err) {
			return err
		}
		if ctx.Err() != nil {
			if earlier != nil && errors.Is(err, ctx.Err()) {
				// An attempt cut short by ctx itself says nothing: the one before it says why it kept failing.
				err = earlier
			}
			return gaveUp(ctx, err)
		}
		earlier = err
		delay = b.next(delay)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < delay {
			// Waiting would outlive the caller: report now rather than be cut off mid-wait.
			return gaveUp(ctx, err)
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return gaveUp(ctx, err)
		case <-timer.C:
		}
	}
}

// GaveUpError says an operation stopped retrying because its context ended. Its class is the class of the
// last error, so an error nobody classified is still reported as such, and not as a mere timeout.
type GaveUpError struct {
	Cause error // ctx.Err()
	Last  error
}

func (e *GaveUpError) Error() string {
	return fmt.Sprintf("gave up after %v; last error: %v", e.Cause, e.Last)
}

func (e *GaveUpError) Unwrap() []error { return []error{e.Last, e.Cause} }

func gaveUp(ctx context.Context, last error) error {
	cause := ctx.Err()
	if cause == nil {
		cause = context.DeadlineExceeded
	}
	return &GaveUpError{Cause: cause, Last: last}
}

// Poll calls check until it reports done, returns an error that is not Retryable, or ctx ends. Retryable errors
// from check count as "not done yet" and are kept for the report if time runs out.
func Poll(ctx context.Context, interval time.Duration, check func(context.Context) (bool, error)) error {
	b := Backoff{Initial: interval, Max: interval, Factor: 1}
	return Retry(ctx, b, func(ctx context.Context) error {
		done, err := check(ctx)
		if err != nil {
			return err
		}
		if !done {
			return errNotYet
		}
		return nil
	})
}

var errNotYet = &Error{Class: ClassTransient, Err: fmt.Errorf("not ready yet")}
