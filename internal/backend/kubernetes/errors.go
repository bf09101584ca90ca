package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// classify gives err a class and the object it is about, keeping the API server's message whole. An error
// that is already classified keeps its class.
func classify(object string, err error) error {
	if err == nil {
		return nil
	}
	var be *backend.Error
	if errors.As(err, &be) {
		return err
	}
	class, detail := classOf(err)
	if detail != "" {
		err = fmt.Errorf("%s: %w", detail, err)
	}
	return backend.NewError(class, object, err)
}

// quotaRE finds the ResourceQuota named in the API server's admission message:
// `... is forbidden: exceeded quota: NAME, requested: ...`.
var quotaRE = regexp.MustCompile(`exceeded quota: ([a-z0-9]([-.a-z0-9]*[a-z0-9])?)`)

// classOf decides the class of an error from client-go, and what to add to its message.
func classOf(err error) (backend.Class, string) {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return backend.ClassTransient, ""
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) || apierrors.ReasonForError(err) != "" {
		return classOfStatus(err)
	}
	if isTransportError(err) {
		return backend.ClassTransient, ""
	}
	// Neither an answer nor a failed connection: nothing says whether it may pass, so it is retried like
	// Transient and shown as it is, as the contract asks of what a backend cannot classify.
	return backend.ClassUnclassified, ""
}

// isTransportError reports whether the request never got an answer: a connection refused or reset, DNS, a TLS
// handshake timeout, a proxy in between. All of them may pass.
func isTransportError(err error) bool {
	var ne net.Error
	var errno syscall.Errno
	return errors.As(err, &ne) || errors.As(err, &errno) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func classOfStatus(err error) (backend.Class, string) {
	switch {
	case apierrors.IsNotFound(err):
		return backend.ClassNotFound, ""
	case apierrors.IsForbidden(err):
		if m := quotaRE.FindStringSubmatch(err.Error()); m != nil {
			return backend.ClassQuota, fmt.Sprintf("ResourceQuota %q forbids it", m[1])
		}
		return backend.ClassPermanent, "the cluster's RBAC or an admission policy refused the request"
	case apierrors.IsUnauthorized(err):
		return backend.ClassPermanent, "the cluster did not accept the credentials"
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsMethodNotSupported(err),
		apierrors.IsNotAcceptable(err), apierrors.IsUnsupportedMediaType(err), apierrors.IsRequestEntityTooLargeError(err):
		return backend.ClassPermanent, ""
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsUnexpectedServerError(err),
		apierrors.IsConflict(err), apierrors.IsResourceExpired(err):
		// client-go already waited as long as Retry-After asked before handing a 429 or 503 back; say how
		// long the server wanted, so the diagnostic shows it if the retries run out.
		if seconds, ok := apierrors.SuggestsClientDelay(err); ok {
			return backend.ClassTransient, fmt.Sprintf("the API server asked to retry after %ds", seconds)
		}
		return backend.ClassTransient, ""
	}
	if code := statusCode(err); code >= http.StatusInternalServerError {
		return backend.ClassTransient, ""
	}
	return backend.ClassPermanent, ""
}

func statusCode(err error) int32 {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Code
	}
	return 0
}
