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
		"list error scope class": {&ListError{Failed: []ScopeError{{Backend: "kvm", Scope: "h", Err: NotFound("h", "x")}}}, ClassNotFound, true, false},
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

// TestClassify is the one classification every backend's classify is: the drift between three copies it
// replaced (advice dropped when a bare error was named, a bare error never named) cannot come back per backend.
func TestClassify(t *testing.T) {
	t.Parallel()
	sdkErr := errors.New("the SDK's message")
	bare := &Error{Class: ClassQuota, Err: errors.New("out of memory"), Advice: "free some"}
	named := &Error{Class: ClassTransient, Object: "thing a", Err: errors.New("busy")}
	classOf := func(error) (Class, string) { return ClassPermanent, "refused by policy" }
	quotaAdvice := func(e *Error) {
		if e.Class == ClassQuota && e.Advice == "" {
			e.Advice = "raise it"
		}
	}
	tests := map[string]struct {
		err         error
		advice      func(*Error)
		wantSame    bool // err comes back as it is
		wantClass   Class
		wantMessage string
		wantAdvice  string
	}{
		"nil stays nil":                      {err: nil, wantSame: true},
		"a bare classification is named":     {err: bare, wantClass: ClassQuota, wantMessage: "quota: obj: out of memory", wantAdvice: "free some"},
		"a named one keeps its object":       {err: named, wantSame: true},
		"a wrapped one is left as it is":     {err: fmt.Errorf("while starting: %w", bare), wantSame: true},
		"an SDK error gets classOf's class":  {err: sdkErr, wantClass: ClassPermanent, wantMessage: "permanent: obj: refused by policy: the SDK's message"},
		"advice completes the backend's own": {err: &Error{Class: ClassQuota, Err: sdkErr}, advice: quotaAdvice, wantClass: ClassQuota, wantMessage: "quota: obj: the SDK's message", wantAdvice: "raise it"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := Classify("obj", tt.err, classOf, tt.advice)
			if tt.wantSame {
				if got != tt.err { //nolint:errorlint // identity is the point
					t.Fatalf("got %v, want the error itself (%v)", got, tt.err)
				}
				return
			}
			var e *Error
			if !errors.As(got, &e) {
				t.Fatalf("got %T %v, want a *Error", got, got)
			}
			if e.Class != tt.wantClass || e.Object != "obj" || got.Error() != tt.wantMessage || e.Advice != tt.wantAdvice {
				t.Errorf("got class %v, object %q, message %q, advice %q; want %v, obj, %q, %q",
					e.Class, e.Object, got.Error(), e.Advice, tt.wantClass, tt.wantMessage, tt.wantAdvice)
			}
		})
	}
}
