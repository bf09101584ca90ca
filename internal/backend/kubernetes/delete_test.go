package kubernetes

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"

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
