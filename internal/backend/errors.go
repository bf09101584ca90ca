package backend

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Class says how callers should react to an error. Backends classify their native errors into exactly one.
type Class int

const (
	// ClassUnclassified is an error no backend classified. It is retried like Transient, but reported as is.
	ClassUnclassified Class = iota
	// ClassNotFound: the object does not exist. Read removes it from state; Delete treats it as success.
	ClassNotFound
	// ClassQuota: a limit was reached (quota, memory, disk space). Not retried: the user must free or raise it.
	ClassQuota
	// ClassTransient: the request may succeed if tried again (network, timeouts, 5xx, conflicts in flight).
	ClassTransient
	// ClassPermanent: the request cannot succeed as made (invalid, forbidden, owned by someone else).
	ClassPermanent
)

var classNames = map[Class]string{
	ClassUnclassified: "Unclassified",
	ClassNotFound:     "NotFound",
	ClassQuota:        "Quota",
	ClassTransient:    "Transient",
	ClassPermanent:    "Permanent",
}

func (c Class) String() string {
	if name, ok := classNames[c]; ok {
		return name
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Sentinels for errors.Is: errors.Is(err, backend.ErrNotFound) holds for every error of class NotFound.
var (
	ErrNotFound  = &Error{Class: ClassNotFound}
	ErrQuota     = &Error{Class: ClassQuota}
	ErrTransient = &Error{Class: ClassTransient}
	ErrPermanent = &Error{Class: ClassPermanent}
)

// Error is a classified backend error about one object.
type Error struct {
	Class Class
	// Object names what the error is about, as the user would find it: "kvm domain egress-1a2b on host local".
	Object string
	// Err is the backend's own error, kept whole so its message reaches the diagnostic.
	Err error
	// Advice, when set, is what the user can do about it in this backend's terms (which settings ask for
	// less, which objects to free); the provider shows it instead of its class's general advice.
	Advice string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(strings.ToLower(e.Class.String()))
	if e.Object != "" {
		b.WriteString(": ")
		b.WriteString(e.Object)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes every Error match the sentinel of its class.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Object == "" && t.Err == nil && t.Class == e.Class
}

// NewError classifies err about object. A nil err gives nil.
func NewError(class Class, object string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Class: class, Object: object, Err: err}
}

// NotFound, Quota, Transient and Permanent build classified errors from a message.
func NotFound(object, format string, args ...any) error {
	return NewError(ClassNotFound, object, fmt.Errorf(format, args...))
}

func Quota(object, format string, args ...any) error {
	return NewError(ClassQuota, object, fmt.Errorf(format, args...))
}

func Transient(object, format string, args ...any) error {
	return NewError(ClassTransient, object, fmt.Errorf(format, args...))
}

func Permanent(object, format string, args ...any) error {
	return NewError(ClassPermanent, object, fmt.Errorf(format, args...))
}

// AdviceOf returns the advice of the outermost classified error in err's chain that has one, or "".
func AdviceOf(err error) string {
	for err != nil {
		var e *Error
		if !errors.As(err, &e) {
			return ""
		}
		if e.Advice != "" {
			return e.Advice
		}
		err = e.Err
	}
	return ""
}

// ClassOf returns the class of the outermost classified error in err's chain. Context cancellation and
// deadlines are Transient: the operation may succeed when given time.
func ClassOf(err error) Class {
	if err == nil {
		return ClassUnclassified
	}
	var g *GaveUpError
	if errors.As(err, &g) {
		return ClassOf(g.Last)
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return ClassTransient
	}
	return ClassUnclassified
}

// IsNotFound reports whether err says the object does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// Retryable reports whether an operation that failed with err may succeed when tried again.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	switch ClassOf(err) {
	case ClassTransient, ClassUnclassified:
		return !errors.Is(err, context.Canceled)
	default:
		return false
	}
}

// Classify is the classification every backend makes of the errors its SDK returns, err about object:
//
//   - an error already classified keeps its class, advice and wording; one that is itself a bare
//     classification (no object: made deep inside an operation that did not know the object's name) is
//     given object, its advice kept;
//   - any other error gets the class classOf gives it, and classOf's detail, when it has one, before the
//     SDK's message, which is kept whole.
//
// advice, when not nil, then completes the result with the backend's own words on a class (what to do
// about a Quota error where the backend has no quota system). nil stays nil.
func Classify(object string, err error, classOf func(error) (Class, string), advice func(*Error)) error {
	if err == nil {
		return nil
	}
	var e *Error
	var classified *Error
	switch {
	case errors.As(err, &classified) && classified == err && classified.Object == "": //nolint:errorlint // identity: only the bare classification itself is named, not one wrapped in more context
		e = &Error{Class: classified.Class, Object: object, Err: classified.Err, Advice: classified.Advice}
	case classified != nil:
		return err
	default:
		class, detail := classOf(err)
		if detail != "" {
			err = fmt.Errorf("%s: %w", detail, err)
		}
		e = &Error{Class: class, Object: object, Err: err}
	}
	if advice != nil {
		advice(e)
	}
	return e
}
