package backend

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestClassOf(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		err       error
		want      Class
		notFound  bool
		retryable bool
	}{
		"nil":                    {nil, ClassUnclassified, false, false},
		"plain error":            {errors.New("boom"), ClassUnclassified, false, true},
		"not found":              {NotFound("kvm domain x", "gone"), ClassNotFound, true, false},
		"quota":                  {Quota("gcp instance x", "CPUS"), ClassQuota, false, false},
		"transient":              {Transient("host h", "connection reset"), ClassTransient, false, true},
		"permanent":              {Permanent("ns/x", "forbidden"), ClassPermanent, false, false},
		"wrapped not found":      {fmt.Errorf("get: %w", NotFound("x", "gone")), ClassNotFound, true, false},
		"outermost class wins":   {NewError(ClassPermanent, "x", NotFound("y", "gone")), ClassPermanent, true, false},
		"deadline":               {context.DeadlineExceeded, ClassTransient, false, true},
		"cancelled":              {fmt.Errorf("op: %w", context.Canceled), ClassTransient, false, false},
		"gave up keeps quota":    {&GaveUpError{Cause: context.DeadlineExceeded, Last: Quota("x", "full")}, ClassQuota, false, false},
		"gave up unclassified":   {&GaveUpError{Cause: context.DeadlineExceeded, Last: errors.New("weird")}, ClassUnclassified, false, true},
		"list error scope class": {&ListError{Failed: []ScopeError{{Backend: KindKVM, Scope: "h", Err: NotFound("h", "x")}}}, ClassNotFound, true, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := ClassOf(tc.err); got != tc.want {
				t.Errorf("ClassOf = %v, want %v", got, tc.want)
			}
			if got := IsNotFound(tc.err); got != tc.notFound {
				t.Errorf("IsNotFound = %v, want %v", got, tc.notFound)
			}
			if got := Retryable(tc.err); got != tc.retryable {
				t.Errorf("Retryable = %v, want %v", got, tc.retryable)
			}
		})
	}
}

func TestErrorSentinels(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("create: %w", Quota("gcp instance p/z/x", "quota CPUS exceeded"))
	if !errors.Is(err, ErrQuota) || errors.Is(err, ErrTransient) || errors.Is(err, ErrNotFound) {
		t.Errorf("errors.Is matched the wrong sentinels for %v", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Object != "gcp instance p/z/x" {
		t.Fatalf("errors.As did not find the classified error with its object: %#v", e)
	}
	if got, want := err.Error(), "create: quota: gcp instance p/z/x: quota CPUS exceeded"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if NewError(ClassQuota, "x", nil) != nil {
		t.Error("NewError of a nil error must be nil")
	}
}
