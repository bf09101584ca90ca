package kubernetes

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// ListByTag lists the owner's proxies on every configured cluster at once: one label-selector list of Deployments and
// one of Services across all namespaces per cluster, however many proxies there are. Where RBAC forbids the
// cluster-wide list, the cluster's configured namespaces are listed one by one; a cluster or namespace that
// cannot be listed is a failed scope and does not hide the others.
func (b *Backend) ListByTag(ctx context.Context, sel backend.Selector) ([]backend.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, classify("kubernetes proxies of owner "+sel.Owner, err)
	}
	opts := metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{
		backend.LabelManagedBy: backend.ManagedByValue, backend.LabelOwner: sel.Owner,
	}).String()}
	return backend.ListEach(ctx, b.clusterNames(), func(ctx context.Context, name string) backend.Listed {
		fail := func(scope string, err error) []backend.ScopeError {
			return []backend.ScopeError{{Backend: Kind, Scope: scope, Err: err}}
		}
		c, err := b.client(name)
		if err != nil {
			return backend.Listed{Failed: fail(name, err)}
		}
		insts, err := listNamespace(ctx, c, name, metav1.NamespaceAll, opts)
		if err == nil {
			return backend.Listed{Found: insts}
		}
		namespaces := b.clusters[name].Namespaces
		if !apierrors.IsForbidden(err) || len(namespaces) == 0 {
			return backend.Listed{Failed: fail(name, err)}
		}
		var l backend.Listed
		for _, ns := range namespaces {
			insts, err := listNamespace(ctx, c, name, ns, opts)
			if err != nil {
				l.Failed = append(l.Failed, fail(name+"/"+ns, err)...)
				continue
			}
			l.Found = append(l.Found, insts...)
		}
		return l
	})
}

func listNamespace(ctx context.Context, c *client, cluster, ns string, opts metav1.ListOptions) ([]backend.Instance, error) {
	object := clusterObject(cluster)
	if ns != "" {
		object += " namespace " + ns
	}
	ds, err := c.cs.AppsV1().Deployments(ns).List(ctx, opts)
	if err != nil {
		return nil, classify(object, err)
	}
	svcs, err := c.cs.CoreV1().Services(ns).List(ctx, opts)
	if err != nil {
		return nil, classify(object, err)
	}
	byKey := map[string]*corev1.Service{}
	for i := range svcs.Items {
		s := &svcs.Items[i]
		byKey[s.Namespace+"/"+s.Name] = s
	}
	out := make([]backend.Instance, 0, len(ds.Items))
	for i := range ds.Items {
		d := &ds.Items[i]
		out = append(out, instanceOf(cluster, d, byKey[d.Namespace+"/"+d.Name]))
	}
	return out, nil
}
