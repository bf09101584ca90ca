package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// permission is one verb on one resource the backend uses.
type permission struct {
	group, resource string
	verbs           []string
}

// permissions are what Create, Get, Update, Reconfigure, Delete and ListByTag send, per namespace: the rules of
// RoleDocument, one per resource, in its order (TestPermissionsAreTheRole compares them; TestEveryVerbSentIsGranted
// records what the backend sends).
var permissions = []permission{
	{"apps", "deployments", []string{"create", "get", "list", "watch", "update", "delete"}},
	// Delete removes the Deployment's ReplicaSets itself, rather than wait for the garbage collector.
	{"apps", "replicasets", []string{"list", "watch", "delete"}},
	// watch: Delete waits for one that carries a finalizer to be gone.
	{"", "configmaps", []string{"create", "get", "list", "watch", "update", "delete"}},
	// No list or watch: they would read every Secret in the namespace; Delete takes the proxy's by name.
	{"", "secrets", []string{"create", "get", "update", "delete"}},
	{"", "services", []string{"create", "get", "list", "watch", "update", "delete"}},
	{"", "pods", []string{"list", "watch"}},
	{"networking.k8s.io", "networkpolicies", []string{"create", "get", "list", "watch", "update", "delete"}},
	{"policy", "poddisruptionbudgets", []string{"create", "get", "list", "watch", "update", "delete"}},
	{"discovery.k8s.io", "endpointslices", []string{"list", "watch"}},
}

// Check reports each configured cluster: whether its API server is ready (/readyz), its version, and whether
// the credentials may do everything the backend needs (a SelfSubjectAccessReview per verb) in each of the
// cluster's listed namespaces, or cluster-wide when none are listed.
// Missing permissions are named; they make the cluster unhealthy only for the verbs proxies cannot do without.
func (b *Backend) Check(ctx context.Context) []backend.Health {
	names := b.clusterNames()
	out := make([]backend.Health, 0, len(names))
	for _, name := range names {
		out = append(out, b.checkCluster(ctx, name))
	}
	return out
}

func (b *Backend) checkCluster(ctx context.Context, name string) backend.Health {
	h := backend.Health{Target: name, Details: map[string]string{}}
	unhealthy := func(reason string, err error) backend.Health {
		h.Reason, h.Details[backend.DetailMessage] = reason, err.Error()
		return h
	}
	c, err := b.client(name)
	if err != nil {
		// The client could not be built from its settings (a kubeconfig missing or unreadable, a context that
		// is not there): a login that cannot work as configured, as kvm reports a key it cannot use.
		return unhealthy(backend.HealthUnauthorized, err)
	}
	if err := c.readyz(ctx); err != nil {
		return unhealthy(healthReason(err), classify(clusterObject(name)+" /readyz", err))
	}
	v, err := c.cs.Discovery().ServerVersion()
	if err != nil {
		return unhealthy(healthReason(err), classify(clusterObject(name)+" version", err))
	}
	h.Details["version"] = v.GitVersion
	// Credentials bound by namespace Roles can run proxies in those namespaces: where the cluster's
	// namespaces are listed, the review asks there, and names the namespace of each verb missing.
	namespaces := b.clusters[name].Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var missing []string
	for _, ns := range namespaces {
		m, err := missingPermissions(ctx, c, ns)
		if err != nil {
			return unhealthy(healthReason(err), classify(clusterObject(name)+" SelfSubjectAccessReview", err))
		}
		for _, verb := range m {
			if ns != metav1.NamespaceAll {
				verb += " in " + ns
			}
			missing = append(missing, verb)
		}
	}
	if len(missing) > 0 {
		h.Details["missing_permissions"] = strings.Join(missing, ", ")
		return unhealthy(backend.HealthUnauthorized,
			fmt.Errorf("the credentials lack permissions the backend needs: %s", strings.Join(missing, ", ")))
	}
	h.Healthy, h.Reason = true, backend.HealthHealthy
	return h
}

// healthReason names what a failed check request found, as one of backend.HealthReasons.
func healthReason(err error) string {
	switch {
	case apierrors.IsUnauthorized(err), apierrors.IsForbidden(err):
		return backend.HealthUnauthorized
	case apierrors.IsNotFound(err):
		return backend.HealthNotFound
	case isTransportError(err):
		return backend.HealthUnreachable
	}
	return backend.HealthError
}

// missingPermissions asks the API server, verb by verb, what the credentials may not do in namespace (every
// namespace when it is empty).
func missingPermissions(ctx context.Context, c *client, namespace string) ([]string, error) {
	var missing []string
	reviews := c.cs.AuthorizationV1().SelfSubjectAccessReviews()
	for _, p := range permissions {
		for _, verb := range p.verbs {
			r, err := reviews.Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: namespace, Group: p.group, Resource: p.resource, Verb: verb,
				}},
			}, metav1.CreateOptions{})
			if err != nil {
				return nil, err
			}
			if !r.Status.Allowed {
				missing = append(missing, verb+" "+qualified(p))
			}
		}
	}
	return missing, nil
}

func qualified(p permission) string {
	if p.group == "" {
		return p.resource
	}
	return p.resource + "." + p.group
}

// explainForbidden completes an RBAC refusal with every verb the credentials lack in the namespace, so one
// failed apply names all the rules to grant instead of only the first the API server refused. Quota
// refusals, and errors the review itself cannot complete, are returned as they are.
func explainForbidden(ctx context.Context, c *client, namespace string, err error) error {
	var be *backend.Error
	if !apierrors.IsForbidden(err) || !errors.As(err, &be) || be.Class != backend.ClassPermanent {
		return err
	}
	missing, reviewErr := missingPermissions(ctx, c, namespace)
	if reviewErr != nil || len(missing) == 0 {
		return err
	}
	explained := *be
	explained.Err = fmt.Errorf("%w; in namespace %s the credentials also lack: %s", be.Err, namespace, strings.Join(missing, ", "))
	explained.Advice = fmt.Sprintf("Bind the credentials to a Role in namespace %s (or a ClusterRole) granting: %s. "+
		"%s in the provider's repository, shown under Kubernetes permissions in its documentation, is that Role (apply it in the namespace "+
		"with rolebinding.yaml beside it). `data \"egress_backends\"` lists what they lack in the cluster's `namespaces` (or across the "+
		"cluster when it lists none).", namespace, strings.Join(missing, ", "), RoleDocument)
	return &explained
}
