package kubernetes

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Two owners share a namespace and choose one name. Nothing owner b does under that name, Create (with its
// own UID or with a's, which is on every label and no secret), Get, Update, Reconfigure or Delete, touches
// owner a's proxy: each is refused with a Permanent error naming both owners, and a's objects keep their
// labels.
func TestTwoOwnersOneName(t *testing.T) {
	t.Parallel()
	specOf := func(owner, uid string) backend.Spec {
		s := testSpec("p1")
		s.Owner, s.UID = owner, uid
		return s
	}
	asB := func(ctx context.Context) context.Context {
		return backend.WithOwnership(ctx, backend.Ownership{Owner: "owner-b", UID: "uid-b"})
	}
	tests := map[string]func(ctx context.Context, b *Backend) error{
		"create": func(ctx context.Context, b *Backend) error {
			_, err := b.Create(ctx, specOf("owner-b", "uid-b"))
			return err
		},
		"create with a's UID": func(ctx context.Context, b *Backend) error {
			_, err := b.Create(ctx, specOf("owner-b", "uid-a"))
			return err
		},
		"get": func(ctx context.Context, b *Backend) error {
			_, err := b.Get(asB(ctx), testID())
			return err
		},
		"update": func(ctx context.Context, b *Backend) error {
			_, err := b.Update(ctx, testID(), specOf("owner-b", "uid-b"))
			return err
		},
		"update with a's UID": func(ctx context.Context, b *Backend) error {
			_, err := b.Update(ctx, testID(), specOf("owner-b", "uid-a"))
			return err
		},
		"reconfigure": func(ctx context.Context, b *Backend) error {
			_, err := b.Reconfigure(asB(ctx), testID(), specOf("owner-b", "uid-b").Proxy)
			return err
		},
		"delete": func(ctx context.Context, b *Backend) error {
			return b.Delete(asB(ctx), testID())
		},
	}
	for desc, act := range tests {
		t.Run(desc, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			b, cs := newFake(t)
			controller(ctx, t, cs, nil)
			if _, err := b.Create(ctx, specOf("owner-a", "uid-a")); err != nil {
				t.Fatal(err)
			}

			err := act(ctx, b)
			if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), `"owner-a"`) || !strings.Contains(err.Error(), `"owner-b"`) {
				t.Fatalf("owner b's call = %v, want Permanent naming both owners", err)
			}

			d, err := cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})
			if err != nil || d.DeletionTimestamp != nil || *d.Spec.Replicas == 0 {
				t.Fatalf("owner a's Deployment after owner b's call: %v", err)
			}
			cm, err := cs.CoreV1().ConfigMaps(testNS).Get(ctx, "p1", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("owner a's ConfigMap after owner b's call: %v", err)
			}
			for kind, l := range map[string]map[string]string{"Deployment": d.Labels, "ConfigMap": cm.Labels} {
				if l[backend.LabelOwner] != "owner-a" || l[backend.LabelUID] != "uid-a" {
					t.Errorf("owner a's %s is labelled %v after owner b's call", kind, l)
				}
			}
		})
	}
}
