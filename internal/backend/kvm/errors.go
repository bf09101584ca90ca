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
)

// classify gives err a class and the object it is about, keeping libvirt's message whole. An error already
// classified keeps its class: the innermost code that knew best decided it.
func classify(object string, err error) error {
	if err == nil {
		return nil
	}
	var be *backend.Error
	if errors.As(err, &be) {
		// Identity, not a match: only an error that is itself the classification is renamed; one wrapped in
		// more context is returned as it is.
		if be == err && be.Object == "" { //nolint:errorlint // deliberately an identity check, see above
			// Classified deep inside an operation that did not know the object's name: name it now.
			return &backend.Error{Class: be.Class, Object: object, Err: be.Err}
		}
		return err
	}
	return backend.NewError(classOf(err), object, err)
}

// classOf decides the class of an unclassified error from libvirt or from the connection to it.
func classOf(err error) backend.Class {
	var le libvirt.Error
	if errors.As(err, &le) {
		return classOfCode(libvirt.ErrorNumber(le.Code), le.Message)
	}
	var ce *configError
	switch {
	case errors.As(err, &ce):
		return backend.ClassPermanent
	case errors.Is(err, libvirt.ErrUnsupported):
		return backend.ClassPermanent // the daemon is too old for a call: retrying will not upgrade it
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return backend.ClassTransient
	}
	// Everything else comes from the transport: a refused or reset connection, a missing socket while the
	// daemon restarts, a timeout, a drop mid-call (go-libvirt's ErrInterrupted, EINVAL on a closed socket).
	var ne net.Error
	var errno syscall.Errno
	if errors.As(err, &ne) || errors.As(err, &errno) || errors.Is(err, io.EOF) ||
		errors.Is(err, libvirt.ErrInterrupted) || errors.Is(err, io.ErrClosedPipe) {
		return backend.ClassTransient
	}
	var lost *connLostError
	var dial *dialError
	if errors.As(err, &lost) || errors.As(err, &dial) {
		return backend.ClassTransient
	}
	return backend.ClassPermanent
}

// quotaPhrases are how libvirt and QEMU say a host ran out of something, whatever error code carries it.
var quotaPhrases = []string{
	"cannot allocate memory",
	"cannot set up guest memory",
	"out of memory",
	"no space left on device",
	"not enough space",
	"disk quota exceeded",
	"insufficient",
	"too many",
	"maximum number of",
}

// classOfCode maps one libvirt error code (virErrorNumber) and its message to a class.
func classOfCode(code libvirt.ErrorNumber, msg string) backend.Class {
	lower := strings.ToLower(msg)
	for _, p := range quotaPhrases {
		if strings.Contains(lower, p) {
			return backend.ClassQuota
		}
	}
	switch code {
	case libvirt.ErrNoDomain, libvirt.ErrNoStorageVol, libvirt.ErrNoNetwork, libvirt.ErrNoStoragePool:
		return backend.ClassNotFound
	case libvirt.ErrNoMemory:
		return backend.ClassQuota
	case libvirt.ErrRPC, libvirt.ErrOperationTimeout, libvirt.ErrAgentUnresponsive, libvirt.ErrResourceBusy,
		libvirt.ErrOperationAborted, libvirt.ErrNoServer, libvirt.ErrNoClient:
		return backend.ClassTransient
	case libvirt.ErrSystemError:
		// System errors are I/O failures; only those of the connection itself are worth another try.
		if strings.Contains(lower, "connection") || strings.Contains(lower, "timed out") {
			return backend.ClassTransient
		}
	}
	return backend.ClassPermanent
}

// isCode reports whether err is the libvirt error code.
func isCode(err error, code libvirt.ErrorNumber) bool {
	var le libvirt.Error
	return errors.As(err, &le) && libvirt.ErrorNumber(le.Code) == code
}
