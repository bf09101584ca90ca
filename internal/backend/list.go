package backend

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// ScopeError is one scope (a host, a zone, a namespace) that ListByTag could not read.
type ScopeError struct {
	Backend Kind
	Scope   string
	Err     error
}

func (e ScopeError) Error() string {
	return fmt.Sprintf("%s scope %q: %v", e.Backend, e.Scope, e.Err)
}

func (e ScopeError) Unwrap() error { return e.Err }

// ListError is returned by ListByTag, beside the instances it did find, when some scopes failed.
type ListError struct {
	Failed []ScopeError
}

func (e *ListError) Error() string {
	parts := make([]string, len(e.Failed))
	for i, f := range e.Failed {
		parts[i] = f.Error()
	}
	return fmt.Sprintf("%d scope(s) could not be listed: %s", len(e.Failed), strings.Join(parts, "; "))
}

// Unwrap exposes each scope's error so errors.Is finds their classes.
func (e *ListError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		errs[i] = f
	}
	return errs
}

// ListErrorOf returns nil when failed is empty, so callers can return it unconditionally.
func ListErrorOf(failed []ScopeError) error {
	if len(failed) == 0 {
		return nil
	}
	return &ListError{Failed: failed}
}

// EachTarget runs fn for every target (a backend's hosts, projects or clusters) side by side, as Check and
// ListByTag do so that one slow or unreachable target does not hold up the others, and returns fn's results
// in the order of targets.
func EachTarget[T any](ctx context.Context, targets []string, fn func(ctx context.Context, target string) T) []T {
	out := make([]T, len(targets))
	var wg sync.WaitGroup
	for i, target := range targets {
		wg.Go(func() { out[i] = fn(ctx, target) })
	}
	wg.Wait()
	return out
}

// Listed is one target's part of a ListByTag: what it found, and the scopes it could not read.
type Listed struct {
	Found  []Instance
	Failed []ScopeError
}

// ListEach is ListByTag over every target side by side: the instances found, sorted by id, and the scopes
// that failed as one ListError (nil when none did), which does not hide what the other scopes found.
func ListEach(ctx context.Context, targets []string, list func(ctx context.Context, target string) Listed) ([]Instance, error) {
	var all []Instance
	var failed []ScopeError
	for _, l := range EachTarget(ctx, targets, list) {
		all = append(all, l.Found...)
		failed = append(failed, l.Failed...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].ID.String() < all[j].ID.String() })
	return all, ListErrorOf(failed)
}
