package kubernetes

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// TestCreateMakesADisruptionBudgetAndSpreadsPods: a new proxy's pods are spread over nodes and zones, and a
// budget owned by its Deployment lets voluntary evictions take one of them at a time.
func TestCreateMakesADisruptionBudgetAndSpreadsPods(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b, cs := newFake(t)
	controller(ctx, t, cs, nil)
	spec := testSpec("p1")
	if _, err := b.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	d, err := cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb, err := cs.PolicyV1().PodDisruptionBudgets(testNS).Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no PodDisruptionBudget: %v", err)
	}
	if got := pdb.Spec.MaxUnavailable; got == nil || *got != intstr.FromInt32(1) || pdb.Spec.MinAvailable != nil {
		t.Errorf("budget maxUnavailable %v minAvailable %v, want 1 and none", got, pdb.Spec.MinAvailable)
	}
	if diff := cmp.Diff(d.Spec.Selector, pdb.Spec.Selector); diff != "" {
		t.Errorf("the budget selects other pods than the Deployment (-deployment +budget):\n%s", diff)
	}
	if len(pdb.OwnerReferences) != 1 || pdb.OwnerReferences[0].UID != d.UID {
		t.Errorf("budget owner references %v, want the Deployment", pdb.OwnerReferences)
	}
	if pdb.Labels[backend.LabelUID] != spec.UID || pdb.Labels["team"] != "net" {
		t.Errorf("budget labels %v", pdb.Labels)
	}
	keys := map[string]corev1.UnsatisfiableConstraintAction{}
	for _, c := range d.Spec.Template.Spec.TopologySpreadConstraints {
		keys[c.TopologyKey] = c.WhenUnsatisfiable
		if diff := cmp.Diff(d.Spec.Selector, c.LabelSelector); diff != "" {
			t.Errorf("spread over %s counts other pods (-deployment +constraint):\n%s", c.TopologyKey, diff)
		}
	}
	want := map[string]corev1.UnsatisfiableConstraintAction{corev1.LabelHostname: corev1.ScheduleAnyway, corev1.LabelTopologyZone: corev1.ScheduleAnyway}
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Errorf("spread constraints (-want +got):\n%s", diff)
	}
	if s := d.Spec.Strategy.RollingUpdate; s == nil || *s.MaxUnavailable != intstr.FromInt32(0) {
		t.Errorf("rollout %+v may take a serving pod away", d.Spec.Strategy)
	}
}

// TestAnOlderProxyGetsItsBudgetOnlyWhenChanged: a proxy made before budgets and spread constraints gets both
// with the first change its user applies (labels through Update, rules through Reconfigure), never from a
// read, so that upgrading the provider alone writes nothing.
func TestAnOlderProxyGetsItsBudgetOnlyWhenChanged(t *testing.T) {
	t.Parallel()
	for name, change := range map[string]func(b *Backend, spec backend.Spec) error{
		"update": func(b *Backend, spec backend.Spec) error {
			spec.Labels = map[string]string{"team": "edge"}
			_, err := b.Update(testCtx(t), testID(), spec)
			return err
		},
		"reconfigure": func(b *Backend, spec backend.Spec) error {
			_, err := b.Reconfigure(testCtx(t), testID(), reconfigured(spec.Proxy))
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			b, cs := newFake(t)
			controller(ctx, t, cs, nil)
			spec := testSpec("p1")
			if _, err := b.Create(ctx, spec); err != nil {
				t.Fatal(err)
			}
			// Make it what an earlier provider made: no budget, no spread.
			if err := cs.PolicyV1().PodDisruptionBudgets(testNS).Delete(ctx, "p1", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			d, err := cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			d.Spec.Template.Spec.TopologySpreadConstraints = nil
			if _, err := cs.AppsV1().Deployments(testNS).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}

			if _, err := b.Get(ctx, testID()); err != nil {
				t.Fatal(err)
			}
			if _, err := cs.PolicyV1().PodDisruptionBudgets(testNS).Get(ctx, "p1", metav1.GetOptions{}); err == nil {
				t.Fatal("Get made a PodDisruptionBudget: a read must write nothing")
			}

			if err := change(b, spec); err != nil {
				t.Fatal(err)
			}
			pdb, err := cs.PolicyV1().PodDisruptionBudgets(testNS).Get(ctx, "p1", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("no PodDisruptionBudget after the %s: %v", name, err)
			}
			if len(pdb.OwnerReferences) != 1 || pdb.OwnerReferences[0].Name != "p1" {
				t.Errorf("budget owner references %v, want the Deployment", pdb.OwnerReferences)
			}
			if name == "update" && pdb.Labels["team"] != "edge" {
				t.Errorf("budget labels %v, want the new team=edge", pdb.Labels)
			}
			if name == "reconfigure" {
				d, err := cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if len(d.Spec.Template.Spec.TopologySpreadConstraints) != 2 {
					t.Errorf("the pods rolled onto new rules without spread constraints: %v", d.Spec.Template.Spec.TopologySpreadConstraints)
				}
			}
		})
	}
}

// TestABudgetOfAnotherIsLeftAlone: a PodDisruptionBudget of the proxy's name that is not the proxy's fails the
// update with what to do, and is not changed.
func TestABudgetOfAnotherIsLeftAlone(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b, cs := newFake(t)
	controller(ctx, t, cs, nil)
	spec := testSpec("p1")
	if _, err := b.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	pdb, err := cs.PolicyV1().PodDisruptionBudgets(testNS).Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb.Labels = map[string]string{"app": "someone-else"}
	pdb.OwnerReferences = nil
	if _, err := cs.PolicyV1().PodDisruptionBudgets(testNS).Update(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	spec.Labels = map[string]string{"team": "edge"}
	_, err = b.Update(ctx, testID(), spec)
	if backend.ClassOf(err) != backend.ClassPermanent {
		t.Fatalf("Update over another's budget: %v, want a Permanent error", err)
	}
	after, _ := cs.PolicyV1().PodDisruptionBudgets(testNS).Get(ctx, "p1", metav1.GetOptions{})
	if after.Labels["app"] != "someone-else" || len(after.Labels) != 1 {
		t.Errorf("another's budget was changed: labels %v", after.Labels)
	}
}
