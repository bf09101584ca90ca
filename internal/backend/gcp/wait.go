package gcp

import (
	"context"
	"time"

	compute "cloud.google.com/go/compute/apiv1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// wait polls op until DONE with short growing intervals, instead of Operation.Wait, whose first pause is a
// whole second and which reports an operation's failure with an empty Errors list. The operation's own error
// is read from its proto and classified (QUOTA_EXCEEDED is Quota). Transient poll failures keep polling.
func (b *Backend) wait(ctx context.Context, op *compute.Operation, object string) error {
	delay := b.pollInitial
	for {
		if op.Done() {
			return operationError(object, op.Proto().GetError())
		}
		if err := sleep(ctx, delay); err != nil {
			return backend.NewError(backend.ClassTransient, object, err)
		}
		delay = min(delay*3/2, b.pollMax)
		if err := op.Poll(ctx); err != nil {
			if opErr := operationError(object, op.Proto().GetError()); opErr != nil && op.Done() {
				return opErr
			}
			if cerr := classify(object, err); !backend.Retryable(cerr) || ctx.Err() != nil {
				return cerr
			}
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// pollUntil calls check with growing intervals until it reports done or fails with an error that is not
// Retryable; when ctx ends, the last error is wrapped for the diagnostic.
func (b *Backend) pollUntil(ctx context.Context, check func(context.Context) (bool, error)) error {
	return backend.Retry(ctx, backend.Backoff{Initial: b.pollInitial, Max: b.pollMax, Factor: 1.5}, func(ctx context.Context) error {
		done, err := check(ctx)
		if err != nil {
			return err
		}
		if !done {
			return backend.Transient("", "not ready yet")
		}
		return nil
	})
}
