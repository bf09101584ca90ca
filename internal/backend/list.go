package backend

import (
	"fmt"
	"strings"
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
