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
	return backend.Classify(object, err, classOf, forbiddenAdvice)
}

// RoleDocument is the Role that grants every verb the backend uses, which a refusal by RBAC points at; the
// tests apply it as it is (NodesDocument is the optional ClusterRole for egress_address).
const (
	RoleDocument  = "examples/permissions/kubernetes/role.yaml"
	NodesDocument = "examples/permissions/kubernetes/nodes.yaml"
)

// rbacRE reads what the API server's RBAC authorizer refused out of its message: `User "u" cannot VERB
// resource "RESOURCE" in API group "GROUP" in the namespace "NS"` (`at the cluster scope` for what has no
// namespace). The status carries the resource and group but not the verb or the namespace.
var rbacRE = regexp.MustCompile(`cannot (\S+) resource "([^"]+)" in API group "([^"]*)"(?: in the namespace "([^"]+)")?`)

// refusal is one permission the API server refused.
type refusal struct{ verb, resource, group, namespace string }

func (r refusal) String() string {
	s := r.verb + " " + r.resource
	if r.group != "" {
		s += "." + r.group
	}
	if r.namespace != "" {
		return s + " in namespace " + r.namespace
	}
	return s + " (cluster-scoped)"
}

// rbacRefusal reports the permission a Forbidden error says the credentials lack, when RBAC refused it (not
// a ResourceQuota, not an admission policy).
func rbacRefusal(err error) (refusal, bool) {
	if !apierrors.IsForbidden(err) {
		return refusal{}, false
	}
	m := rbacRE.FindStringSubmatch(err.Error())
	if m == nil {
		return refusal{}, false
	}
	return refusal{verb: m[1], resource: m[2], group: m[3], namespace: m[4]}, true
}

// forbiddenAdvice says, for an RBAC refusal, which document grants what was refused.
func forbiddenAdvice(e *backend.Error) {
	r, ok := rbacRefusal(e.Err)
	if !ok || e.Advice != "" {
		return
	}
	e.Advice = fmt.Sprintf("Grant the credentials %s: %s in the provider's repository, shown under Kubernetes permissions in its "+
		"documentation, has every verb the backend uses (apply the Role in each namespace of proxies, with rolebinding.yaml beside it). "+
		"`data \"egress_backends\"` lists what else they lack.", r, r.document())
}

// document is the file that grants r.
func (r refusal) document() string {
	if r.namespace == "" && r.resource == "nodes" {
		return NodesDocument
	}
	return RoleDocument
}

// classifyCreate is classify for the answer to a create. NotFound there never means the object is gone, for
// it is being made: the API server says that where it was to go is missing. In practice that is the
// namespace (the NamespaceLifecycle admission plugin answers `namespaces "x" not found`), which no retry
// brings: Permanent, naming the namespace and what to do. NotFound stays for lookups, where it means deleted.
func classifyCreate(object string, id backend.ProviderID, err error) error {
	if !apierrors.IsNotFound(err) {
		return classify(object, err)
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if d := status.Status().Details; d != nil && d.Kind == "namespaces" && d.Group == "" {
			ns := namespaceObject(d.Name, id.Target)
			return &backend.Error{Class: backend.ClassPermanent, Object: ns,
				Err: fmt.Errorf("does not exist, so %s cannot be made in it: %w", object, err),
				Advice: fmt.Sprintf("Create namespace %s on cluster %s first (kubectl create namespace %s, or a kubernetes_namespace resource "+
					"this proxy depends on), or set kubernetes.namespace to a namespace that exists, then apply again.", d.Name, id.Target, d.Name)}
		}
	}
	return &backend.Error{Class: backend.ClassPermanent, Object: object,
		Err: fmt.Errorf("the API server has nothing to make it in: %w", err),
		Advice: fmt.Sprintf("Check that namespace %s exists on cluster %s and that the cluster serves the kinds the proxy is made of "+
			"(apps/v1 Deployment, v1 ConfigMap, Secret and Service, networking.k8s.io/v1 NetworkPolicy, policy/v1 PodDisruptionBudget), then apply again.", id.Scope, id.Target)}
}

func namespaceObject(namespace, cluster string) string {
	return fmt.Sprintf("namespace %s on cluster %s", namespace, cluster)
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
		if r, ok := rbacRefusal(err); ok {
			return backend.ClassPermanent, fmt.Sprintf("the credentials lack %s, which %s grants", r, r.document())
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
