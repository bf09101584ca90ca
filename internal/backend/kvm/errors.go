package kvm

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"
)

// classify gives err a class and the object it is about, keeping libvirt's message whole. An error already
// classified keeps its class: the innermost code that knew best decided it.
func classify(object string, err error) error {
	return backend.Classify(object, err, func(err error) (backend.Class, string) { return classOf(err), "" },
		withAdvice)
}

// missingOnHost is the error of a pool, base volume or network a proxy refers to and the host lacks. Those
// are the host's to provide, never the provider's: Permanent, not NotFound (which would read as a proxy
// deleted outside Terraform, and make a create's advice "create it again"), with advice on what to do.
func missingOnHost(advice string, err error) error {
	return &backend.Error{Class: backend.ClassPermanent, Err: err, Advice: advice}
}

// withAdvice gives a Quota error this backend's advice (a libvirt host has no quota system to raise), and a
// refused connection what the user needs on the host.
func withAdvice(e *backend.Error) {
	switch {
	case e.Advice != "":
	case e.Class == backend.ClassQuota:
		e.Advice = QuotaAdvice
	case e.Class == backend.ClassPermanent && accessDenied(e.Err):
		e.Advice = AccessAdvice
	}
}

// PermissionsDocument says what the user Terraform runs as, or logs in as over ssh, needs on a libvirt host.
const PermissionsDocument = "examples/permissions/kvm/README.md"

// AccessAdvice is for a connection the host refused: the socket's permissions, or libvirt's own check of
// the connection (polkit), said no.
const AccessAdvice = "The libvirt daemon refused the user the provider connects as (the user Terraform runs as, or the " +
	"remote user of a qemu+ssh:// URI). Give that user the daemon's read-write socket: group libvirt on Debian and " +
	"Ubuntu, or a polkit rule allowing org.libvirt.unix.manage where libvirtd asks polkit; " + PermissionsDocument +
	" in the provider's repository, shown under KVM host access in its documentation, has the rule and what an ssh " +
	"login needs. `virsh -c URI list --all` as that user must work without a password prompt."

// accessDenied reports whether err is the host refusing the connection: the socket's file permissions
// (EACCES, EPERM on connect) or libvirt's authentication or access check.
func accessDenied(err error) bool {
	var le libvirt.Error
	if errors.As(err, &le) {
		switch libvirt.ErrorNumber(le.Code) {
		case libvirt.ErrAuthFailed, libvirt.ErrAuthCancelled, libvirt.ErrAuthUnavailable, libvirt.ErrAccessDenied:
			return true
		}
		return false
	}
	return errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)
}

// classOf decides the class of an unclassified error from libvirt or from the connection to it: libvirt's
// error code first, the transport's error types next, never the text of an error that has neither.
func classOf(err error) backend.Class {
	// A host that stayed unreachable is Permanent whatever its last attempt's error was: the bounded dial
	// retry has been spent, and retrying the whole operation for its timeout would only hide the cause.
	var unreachable *libvirtconn.UnreachableError
	if errors.As(err, &unreachable) {
		return backend.ClassPermanent
	}
	var le libvirt.Error
	if errors.As(err, &le) {
		return classOfCode(libvirt.ErrorNumber(le.Code), le.Message)
	}
	var ce *libvirtconn.ConfigError
	switch {
	case errors.As(err, &ce):
		return backend.ClassPermanent
	case errors.Is(err, libvirt.ErrUnsupported):
		return backend.ClassPermanent // the daemon is too old for a call: retrying will not upgrade it
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return backend.ClassTransient
	}
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
		// The socket's permissions refused the user: no retry changes them.
		return backend.ClassPermanent
	}
	if isTransportError(err) {
		return backend.ClassTransient
	}
	return backend.ClassUnclassified
}

// isTransportError reports errors of the connection itself: a refused or reset connection, a missing socket
// while the daemon restarts, a timeout, a drop mid-call (go-libvirt's ErrInterrupted, EINVAL on a closed
// socket). They are worth another try; the pool's bounded dial retry (libvirtconn) decides when a host is unreachable.
func isTransportError(err error) bool {
	var ne net.Error
	var errno syscall.Errno
	var lost *libvirtconn.ConnLostError
	return errors.As(err, &ne) || errors.As(err, &errno) || errors.Is(err, io.EOF) ||
		errors.Is(err, libvirt.ErrInterrupted) || errors.Is(err, io.ErrClosedPipe) || errors.As(err, &lost)
}

// codeClasses is the class of each libvirt error code (virErrorNumber) the backend can meet, where the code
// alone decides it. Codes missing here are Unclassified, or decided by codeByText.
var codeClasses = map[libvirt.ErrorNumber]backend.Class{
	// The objects the backend makes and looks up by name: gone means gone.
	libvirt.ErrNoDomain:     backend.ClassNotFound,
	libvirt.ErrNoStorageVol: backend.ClassNotFound,
	// Networks and pools are the host's, never the provider's: one that is missing is a configuration to
	// correct, not a proxy deleted outside Terraform.
	libvirt.ErrNoNetwork:         backend.ClassPermanent,
	libvirt.ErrNoStoragePool:     backend.ClassPermanent,
	libvirt.ErrNoNetworkPort:     backend.ClassPermanent,
	libvirt.ErrNoInterface:       backend.ClassPermanent,
	libvirt.ErrNoNwfilter:        backend.ClassPermanent,
	libvirt.ErrNoSecret:          backend.ClassPermanent,
	libvirt.ErrNoNodeDevice:      backend.ClassPermanent,
	libvirt.ErrNoDomainMetadata:  backend.ClassPermanent,
	libvirt.ErrNoNetworkMetadata: backend.ClassPermanent,

	libvirt.ErrNoMemory: backend.ClassQuota,

	// Who may do what: no retry logs in as someone else.
	libvirt.ErrAccessDenied:         backend.ClassPermanent,
	libvirt.ErrAuthFailed:           backend.ClassPermanent,
	libvirt.ErrAuthCancelled:        backend.ClassPermanent,
	libvirt.ErrAuthUnavailable:      backend.ClassPermanent,
	libvirt.ErrOperationDenied:      backend.ClassPermanent,
	libvirt.ErrGnutlsError:          backend.ClassPermanent,
	libvirt.ErrSSH:                  backend.ClassPermanent,
	libvirt.ErrLibssh:               backend.ClassPermanent,
	libvirt.ErrNoSecurityModel:      backend.ClassPermanent,
	libvirt.ErrNoConnect:            backend.ClassPermanent, // no driver for the URI on that daemon
	libvirt.ErrUnknownHost:          backend.ClassPermanent,
	libvirt.ErrNoSupport:            backend.ClassPermanent,
	libvirt.ErrConfigUnsupported:    backend.ClassPermanent,
	libvirt.ErrOperationUnsupported: backend.ClassPermanent,
	libvirt.ErrArgumentUnsupported:  backend.ClassPermanent,
	libvirt.ErrCPUIncompatible:      backend.ClassPermanent,

	// What was asked is wrong as asked.
	libvirt.ErrXMLError:           backend.ClassPermanent,
	libvirt.ErrXMLDetail:          backend.ClassPermanent,
	libvirt.ErrXMLInvalidSchema:   backend.ClassPermanent,
	libvirt.ErrInvalidArg:         backend.ClassPermanent,
	libvirt.ErrInvalidMac:         backend.ClassPermanent,
	libvirt.ErrOperationInvalid:   backend.ClassPermanent,
	libvirt.ErrDomExist:           backend.ClassPermanent,
	libvirt.ErrStorageVolExist:    backend.ClassPermanent,
	libvirt.ErrNetworkExist:       backend.ClassPermanent,
	libvirt.ErrMultipleDomains:    backend.ClassPermanent,
	libvirt.ErrOsType:             backend.ClassPermanent,
	libvirt.ErrNoSource:           backend.ClassPermanent,
	libvirt.ErrNoTarget:           backend.ClassPermanent,
	libvirt.ErrNoName:             backend.ClassPermanent,
	libvirt.ErrNoOs:               backend.ClassPermanent,
	libvirt.ErrNoDevice:           backend.ClassPermanent,
	libvirt.ErrDeviceMissing:      backend.ClassPermanent,
	libvirt.ErrInvalidDomain:      backend.ClassPermanent,
	libvirt.ErrInvalidNetwork:     backend.ClassPermanent,
	libvirt.ErrInvalidStoragePool: backend.ClassPermanent,
	libvirt.ErrInvalidStorageVol:  backend.ClassPermanent,
	libvirt.ErrOverflow:           backend.ClassPermanent,

	// The daemon or the connection is busy or went away: another try may pass.
	libvirt.ErrRPC:                 backend.ClassTransient,
	libvirt.ErrInvalidConn:         backend.ClassTransient,
	libvirt.ErrOperationTimeout:    backend.ClassTransient,
	libvirt.ErrAgentUnresponsive:   backend.ClassTransient,
	libvirt.ErrAgentUnsynced:       backend.ClassTransient,
	libvirt.ErrAgentCommandTimeout: backend.ClassTransient,
	libvirt.ErrResourceBusy:        backend.ClassTransient,
	libvirt.ErrOperationAborted:    backend.ClassTransient,
	libvirt.ErrNoServer:            backend.ClassTransient,
	libvirt.ErrNoClient:            backend.ClassTransient,
}

// textCodes carry the message of a failure elsewhere (QEMU, the kernel, a helper): only there does the text
// say what ran out or who was refused. In a message of any other code, words like "insufficient" or "too
// many" describe that code's own failure and decide nothing.
var textCodes = map[libvirt.ErrorNumber]bool{
	libvirt.ErrInternalError:      true,
	libvirt.ErrSystemError:        true,
	libvirt.ErrOperationFailed:    true,
	libvirt.ErrStorageProbeFailed: true,
	libvirt.ErrHookScriptFailed:   true,
	libvirt.ErrAgentCommandFailed: true,
}

// quotaPhrases are how QEMU and the kernel say a host ran out of memory or disk space.
var quotaPhrases = []string{
	"cannot allocate memory",
	"cannot set up guest memory",
	"out of memory",
	"no space left on device",
	"not enough space",
	"disk quota exceeded",
}

// deniedPhrases are the kernel's and QEMU's refusals: a file or device the daemon may not open.
var deniedPhrases = []string{"permission denied", "operation not permitted", "access denied"}

// transientPhrases are the system errors of a connection or a lock in flight.
var transientPhrases = []string{"connection reset", "connection refused", "broken pipe", "timed out", "resource temporarily unavailable"}

// classOfCode maps one libvirt error code and, for the codes that carry another component's failure, its
// message to a class. Anything else is Unclassified: retried like Transient, and reported as such.
func classOfCode(code libvirt.ErrorNumber, msg string) backend.Class {
	if c, ok := codeClasses[code]; ok {
		return c
	}
	if !textCodes[code] {
		return backend.ClassUnclassified
	}
	lower := strings.ToLower(msg)
	has := func(phrases []string) bool {
		for _, p := range phrases {
			if strings.Contains(lower, p) {
				return true
			}
		}
		return false
	}
	switch {
	case has(quotaPhrases):
		return backend.ClassQuota
	case has(deniedPhrases):
		return backend.ClassPermanent
	case has(transientPhrases):
		return backend.ClassTransient
	}
	return backend.ClassUnclassified
}

// isCode reports whether err is the libvirt error code.
func isCode(err error, code libvirt.ErrorNumber) bool {
	var le libvirt.Error
	return errors.As(err, &le) && libvirt.ErrorNumber(le.Code) == code
}
