package kubernetes

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// TestDeleteNeedsNoListOfSecrets: a Role without list on Secrets (which would let its holder read every
// Secret in the namespace) is enough. The proxy's Secret is deleted by its name, also when a crashed Create
// left it without the owner reference the garbage collector follows (the fake clientset collects nothing).
func TestDeleteNeedsNoListOfSecrets(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		secretUID string
		wantGone  bool
	}{
		"the proxy's own Secret":            {secretUID: "uid-p1", wantGone: true},
		"another proxy's Secret, same name": {secretUID: "uid-other", wantGone: false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			labels := map[string]string{backend.LabelManagedBy: backend.ManagedByValue, backend.LabelUID: "uid-p1", backend.LabelName: "p1"}
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: testNS, Labels: labels, UID: "d-uid"}}
			secretLabels := copyMap(labels)
			secretLabels[backend.LabelUID] = tt.secretUID
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: testNS, Labels: secretLabels}}
			b, cs := newFake(t, d, s)
			cs.ClearActions()
			if err := b.Delete(ctx, testID()); err != nil {
				t.Fatal(err)
			}
			for _, a := range cs.Actions() {
				if a.GetResource().Resource == "secrets" && (a.GetVerb() == "list" || a.GetVerb() == "watch" || a.GetVerb() == "delete-collection") {
					t.Errorf("Delete sent %s secrets", a.GetVerb())
				}
				if del, ok := a.(k8stesting.DeleteAction); ok && a.GetResource().Resource == "secrets" && del.GetName() != "p1" {
					t.Errorf("Delete removed Secret %s", del.GetName())
				}
			}
			_, err := cs.CoreV1().Secrets(testNS).Get(ctx, "p1", metav1.GetOptions{})
			if gone := apierrors.IsNotFound(err); gone != tt.wantGone {
				t.Errorf("Secret gone: %v, want %v (%v)", gone, tt.wantGone, err)
			}
		})
	}
}

func TestCheckAsksNoListOfSecrets(t *testing.T) {
	t.Parallel()
	for _, p := range permissions {
		if p.resource != "secrets" {
			continue
		}
		for _, v := range p.verbs {
			if v == "list" || v == "watch" || v == "deletecollection" {
				t.Errorf("Check asks for %s on secrets, which Delete no longer needs", v)
			}
		}
	}
}

// TestDeleteWaitsForAServiceWithFinalizers: a LoadBalancer Service keeps the cloud's finalizer until its load
// balancer is released, so its delete only marks it. Delete returns once it is gone, not before: a replacement
// of the same name must not meet it. (The fake knows no finalizers: a reactor marks the Service instead of
// removing it, and the test plays the cloud's controller.)
func TestDeleteWaitsForAServiceWithFinalizers(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	d := readyDeployment("p1")
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: testNS, Labels: d.Labels,
		Finalizers: []string{"service.kubernetes.io/load-balancer-cleanup"}}}
	b, cs := newFake(t, d, svc)
	services := corev1.SchemeGroupVersion.WithResource("services")
	cs.PrependReactor("delete", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		marked := svc.DeepCopy()
		marked.DeletionTimestamp = ptr.To(metav1.Now())
		return true, nil, cs.Tracker().Update(services, marked, testNS)
	})
	done := deleteWaitingOn(ctx, t, b, cs, "services", "the Service still exists")
	if err := cs.Tracker().Delete(services, testNS, "p1"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestDeleteRemovesTheReplicaSets: Delete scales the Deployment to zero, deletes it, and deletes its
// ReplicaSets itself rather than wait on the garbage collector. Credentials that may not list or delete them
// fail the destroy with the verb they lack and the Role that grants it: Delete would otherwise return with a
// ReplicaSet of the proxy left.
func TestDeleteRemovesTheReplicaSets(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		forbid string // the verb on replicasets the credentials lack
	}{
		"deleted by Delete":    {},
		"without delete, fail": {forbid: "delete"},
		"without list, fail":   {forbid: "list"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			d := readyDeployment("p1")
			rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "p1-abc", Namespace: testNS, Labels: selectorLabelsOf(d), UID: "rs-uid"}}
			b, cs := newFake(t, d, rs)
			if tt.forbid != "" {
				cs.PrependReactor(tt.forbid, "replicasets", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, rbacForbidden(tt.forbid, "apps", "replicasets", testNS)
				})
			}
			err := b.Delete(ctx, testID())
			if tt.forbid != "" {
				want := tt.forbid + " replicasets.apps in namespace " + testNS
				if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), RoleDocument) ||
					!strings.Contains(backend.AdviceOf(err), RoleDocument) {
					t.Fatalf("Delete returned %v (advice %q), want the refusal of %s and %s", err, backend.AdviceOf(err), want, RoleDocument)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})
			if err == nil {
				t.Errorf("the Deployment remains, %d replicas", *got.Spec.Replicas)
			}
			scaled := false
			for _, a := range cs.Actions() {
				if u, ok := a.(k8stesting.UpdateAction); ok {
					if d, ok := u.GetObject().(*appsv1.Deployment); ok {
						scaled = *d.Spec.Replicas == 0
					}
				}
			}
			if !scaled {
				t.Error("the Deployment was not scaled to zero before its deletion")
			}
			if _, err = cs.AppsV1().ReplicaSets(testNS).Get(ctx, rs.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the ReplicaSet remains (%v)", err)
			}
		})
	}
}

// rbacForbidden is the API server's answer to a request RBAC refuses, as its authorizer words it.
func rbacForbidden(verb, group, resource, namespace string) error {
	scope := fmt.Sprintf("in the namespace %q", namespace)
	if namespace == "" {
		scope = "at the cluster scope"
	}
	return apierrors.NewForbidden(schema.GroupResource{Group: group, Resource: resource}, "",
		fmt.Errorf(`User "system:serviceaccount:%s:p" cannot %s resource %q in API group %q %s`, testNS, verb, resource, group, scope))
}
