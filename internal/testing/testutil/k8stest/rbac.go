package k8stest

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NamespaceAdminToken is ServiceAccountToken for a ServiceAccount bound, in ns alone, to the cluster's
// built-in "admin" ClusterRole: every right inside the namespace, none on cluster-scoped objects such as
// Nodes. It is how a platform team usually hands a namespace to a user.
func (c *Cluster) NamespaceAdminToken(t *testing.T, ns, name string) Credentials {
	t.Helper()
	creds := c.ServiceAccountToken(t, ns, name)
	_, err := c.cs.RbacV1().RoleBindings(ns).Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("binding ServiceAccount %s/%s to the admin ClusterRole in its namespace: %v", ns, name, err)
	}
	return creds
}
