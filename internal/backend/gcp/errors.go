package gcp

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// classify gives err a class and names the object, keeping the API's message whole. An error already
// classified keeps its class, and gets the object only when it had none.
func classify(object string, err error) error {
	if err == nil {
		return nil
	}
	var be *backend.Error
	if errors.As(err, &be) {
		if be == err && be.Object == "" { //nolint:errorlint // an identity check: only the bare classification is renamed
			return &backend.Error{Class: be.Class, Object: object, Err: be.Err}
		}
		return err
	}
	return backend.NewError(classOf(err), object, err)
}

// Reasons Compute Engine puts in an error body's errors[].reason.
var (
	quotaReasons     = map[string]bool{"quotaExceeded": true, "QUOTA_EXCEEDED": true, "ZONE_RESOURCE_POOL_EXHAUSTED": true, "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": true}
	transientReasons = map[string]bool{
		"rateLimitExceeded": true, "userRateLimitExceeded": true, "resourceNotReady": true, "backendError": true,
		"internalError": true, "resourceInUseByAnotherResource": true, "conditionNotMet": true,
	}
)

// classOf reads the HTTP code and reasons with errors.As into *googleapi.Error: the apierror wrapper the client
// adds loses the reason of Compute Engine's bodies, the googleapi error inside it keeps them.
func classOf(err error) backend.Class {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		for _, item := range ge.Errors {
			switch {
			case quotaReasons[item.Reason]:
				return backend.ClassQuota
			case transientReasons[item.Reason]:
				return backend.ClassTransient
			}
		}
		switch {
		case ge.Code == http.StatusNotFound:
			return backend.ClassNotFound
		case ge.Code == http.StatusTooManyRequests, ge.Code >= 500, ge.Code == http.StatusPreconditionFailed:
			return backend.ClassTransient
		default:
			return backend.ClassPermanent
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return backend.ClassTransient
	}
	// The transport: a refused, reset or dropped connection, an answer cut short.
	var ne net.Error
	var errno syscall.Errno
	if errors.As(err, &ne) || errors.As(err, &errno) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return backend.ClassTransient
	}
	return backend.ClassUnclassified
}

// operationError turns an operation's own error (DONE with error: QUOTA_EXCEEDED and the like) into a
// classified error. The client's error for it has an empty Errors list, so the operation is the only place
// that says what went wrong.
func operationError(object string, e *computepb.Error) error {
	if e == nil || len(e.GetErrors()) == 0 {
		return nil
	}
	class := backend.ClassPermanent
	var msgs []string
	for _, item := range e.GetErrors() {
		code := item.GetCode()
		msg := code + ": " + item.GetMessage()
		switch {
		case code == "QUOTA_EXCEEDED":
			class = backend.ClassQuota
			for _, d := range item.GetErrorDetails() {
				if q := d.GetQuotaInfo(); q != nil {
					msg += " (metric " + q.GetMetricName() + ", limit " + q.GetLimitName() + ")"
				}
			}
		case strings.HasPrefix(code, "ZONE_RESOURCE_POOL_EXHAUSTED"):
			class = backend.ClassQuota
		case code == "RESOURCE_NOT_READY", code == "INTERNAL_ERROR", code == "RESOURCE_OPERATION_RATE_EXCEEDED", code == "OPERATION_CANCELED_BY_USER":
			if class == backend.ClassPermanent {
				class = backend.ClassTransient
			}
		}
		msgs = append(msgs, msg)
	}
	return backend.NewError(class, object, errors.New("operation failed: "+strings.Join(msgs, "; ")))
}

// isConflict reports whether err is the API's 409 alreadyExists.
func isConflict(err error) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == http.StatusConflict
}
