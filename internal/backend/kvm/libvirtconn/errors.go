package libvirtconn

import (
	"errors"
	"fmt"
	"time"
)

// ConfigError is a dial failure that no retry can fix: a missing key, an unreadable certificate, a host key
// that does not match, a login refused.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// dialError is a host that could not be reached or refused the connection.
type dialError struct {
	host, uri string
	err       error
}

func (e *dialError) Error() string {
	return fmt.Sprintf("connecting to kvm host %q (%s): %v", e.host, e.uri, e.err)
}
func (e *dialError) Unwrap() error { return e.err }

// UnreachableError is a host that no dial reached within its DialTimeout.
type UnreachableError struct {
	Host, URI string
	After     time.Duration
	// Last is the last attempt's error.
	Last error
}

var errNoAnswer = errors.New("no answer: the connection or libvirt's handshake did not complete")

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("kvm host %q (%s) could not be reached within %v: is libvirtd running there, and does the URI point at it? Last error: %v",
		e.Host, e.URI, e.After, e.Last)
}
func (e *UnreachableError) Unwrap() error { return e.Last }

// errLostUnderCall is the error of a run whose calls all answered, or whose failures were ignored, while the
// connection broke.
var errLostUnderCall = errors.New("the connection broke while the calls ran")

// ConnLostError is a call that failed because the connection broke under it.
type ConnLostError struct {
	Host string
	Call string // the API method whose answer was lost
	Err  error
}

func (e *ConnLostError) Error() string {
	if e.Call == "" {
		return fmt.Sprintf("connection to kvm host %q lost: %v", e.Host, e.Err)
	}
	return fmt.Sprintf("connection to kvm host %q lost during %s: %v", e.Host, e.Call, e.Err)
}
func (e *ConnLostError) Unwrap() error { return e.Err }
