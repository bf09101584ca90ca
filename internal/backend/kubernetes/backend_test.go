package kubernetes

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// testCtx bounds a test that would otherwise hang on a broken wait; generous, as the machine may be loaded.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestCreateMakesLabelledOwnedObjects(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b, cs := newFake(t)
	controller(ctx, t, cs, nil)
	spec := testSpec("p1")
	spec.Proxy.Users = []proxyconf.BasicAuth{{Username: "u", Password: "secret-password"}}
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != backend.StateRunning || inst.UID != spec.UID || !inst.Reconfigurable || inst.Port != 3128 {
		t.Errorf("instance %+v", inst)
	}
	if inst.Proxy == nil || len(inst.Proxy.Users) != 1 || inst.Proxy.Users[0].Password != "" || inst.Proxy.AllowedDestinations[0] != "example.com" {
		t.Errorf("settings read back %+v: want them without the password", inst.Proxy)
	}
	d, err := cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := d.Spec.Template.Spec
	if c := pod.Containers[0]; c.Image != DefaultImage || c.ImagePullPolicy != corev1.PullIfNotPresent ||
		c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != proxyconf.HealthPath {
		t.Errorf("container %+v", c)
	}
	if d.Spec.Template.Annotations[annotationChecksum] == "" {
		t.Error("no config checksum on the pod template")
	}
	metas := map[string]metav1.Object{"Deployment": d}
	cm, _ := cs.CoreV1().ConfigMaps(testNS).Get(ctx, "p1", metav1.GetOptions{})
	secret, _ := cs.CoreV1().Secrets(testNS).Get(ctx, "p1", metav1.GetOptions{})
	svc, _ := cs.CoreV1().Services(testNS).Get(ctx, "p1", metav1.GetOptions{})
	np, _ := cs.NetworkingV1().NetworkPolicies(testNS).Get(ctx, "p1", metav1.GetOptions{})
	metas["ConfigMap"], metas["Secret"], metas["Service"], metas["NetworkPolicy"] = cm, secret, svc, np
	for kind, m := range metas {
		if m.GetLabels()[backend.LabelUID] != spec.UID || m.GetLabels()["team"] != "net" || m.GetLabels()[backend.LabelManagedBy] != backend.ManagedByValue {
			t.Errorf("%s labels %v", kind, m.GetLabels())
		}
		if kind != "Deployment" && (len(m.GetOwnerReferences()) != 1 || m.GetOwnerReferences()[0].UID != d.UID) {
			t.Errorf("%s owner references %v, want the Deployment", kind, m.GetOwnerReferences())
		}
	}
	if !strings.Contains(cm.Data[guest.ConfigKey], "example.com") {
		t.Errorf("squid.conf lacks the destination:\n%s", cm.Data[guest.ConfigKey])
	}
	if strings.Contains(string(secret.Data[guest.SecretKey]), "secret-password") {
		t.Error("the Secret holds the password in clear")
	}
	if got := np.Spec.Ingress[0].From[0].IPBlock.CIDR; got != "10.0.0.0/8" {
		t.Errorf("network policy admits %s", got)
	}
}

func TestCreateAdoptsOnlyItsOwnObjects(t *testing.T) {
	t.Parallel()
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: testNS, Labels: map[string]string{backend.LabelUID: "someone-else"}}}
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p2", Namespace: testNS}}
	mine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p3", Namespace: testNS, UID: "crashed-try-configmap", Labels: map[string]string{backend.LabelUID: "uid-p3", backend.LabelOwner: "owner-1"}}}
	tests := map[string]struct {
		name    string
		wantErr string
	}{
		"another proxy's": {"p1", "belongs to owner"},
		"not ours at all": {"p2", "not made by this provider"},
		"a crashed try's": {"p3", ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			b, cs := newFake(t, other.DeepCopy(), foreign.DeepCopy(), mine.DeepCopy())
			controller(ctx, t, cs, nil)
			inst, err := b.Create(ctx, testSpec(tt.name))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				// Adopted: the crashed try's ConfigMap is the one in place (not replaced), now owned by the
				// Deployment this try made, beside the rest of the proxy's objects.
				cm, err := cs.CoreV1().ConfigMaps(testNS).Get(ctx, tt.name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				d, err := cs.AppsV1().Deployments(testNS).Get(ctx, tt.name, metav1.GetOptions{})
				if err != nil {
					t.Fatalf("no Deployment beside the adopted ConfigMap: %v", err)
				}
				if cm.UID != mine.UID || !ownedByDeployment(cm.ObjectMeta, d) || cm.OwnerReferences[0].Name != d.Name {
					t.Errorf("ConfigMap uid %q owners %v, want the crashed try's (%q) owned by Deployment %q", cm.UID, cm.OwnerReferences, mine.UID, d.UID)
				}
				if _, err := cs.CoreV1().Services(testNS).Get(ctx, tt.name, metav1.GetOptions{}); err != nil {
					t.Errorf("no Service: %v", err)
				}
				if inst.ID.Name != tt.name || inst.State != backend.StateRunning {
					t.Errorf("Create returned %s in state %v, want %s running", inst.ID, inst.State, tt.name)
				}
				return
			}
			if !errors.Is(err, backend.ErrPermanent) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want Permanent %q", err, tt.wantErr)
			}
			if _, err := cs.AppsV1().Deployments(testNS).Get(ctx, tt.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("a Deployment was made beside a foreign ConfigMap: %v", err)
			}
		})
	}
}

func TestCreateFailsFast(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		mark      func(*appsv1.Deployment)
		pod       *corev1.Pod
		wantClass error
		wantMsg   string
	}{
		"image pull back-off": {
			pod: waitingPod("ImagePullBackOff", `Back-off pulling image "nope:1"`), wantClass: backend.ErrPermanent, wantMsg: `Back-off pulling image "nope:1"`,
		},
		"never pull": {
			pod: waitingPod("ErrImageNeverPull", "image not present"), wantClass: backend.ErrPermanent, wantMsg: "ErrImageNeverPull",
		},
		"crash loop": {
			pod: waitingPod("CrashLoopBackOff", "back-off 10s restarting"), wantClass: backend.ErrPermanent, wantMsg: "CrashLoopBackOff",
		},
		"crash loop quotes the end of the log": {
			pod:       crashedPod("back-off 10s restarting", 1, strings.Repeat("startup noise\n", 20)+"FATAL: No valid signing certificate\nSquid Cache (Version 5.7): Terminated abnormally.\n"),
			wantClass: backend.ErrPermanent, wantMsg: "back-off 10s restarting; last exit code 1 (Error), its log ends:\n" + strings.Repeat("startup noise\n", 4) +
				"FATAL: No valid signing certificate\nSquid Cache (Version 5.7): Terminated abnormally.",
		},
		"progress deadline": {
			mark: func(d *appsv1.Deployment) {
				d.Status.AvailableReplicas = 0
				d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", Message: "ReplicaSet has timed out progressing."}}
			},
			wantClass: backend.ErrPermanent, wantMsg: "timed out progressing",
		},
		"quota": {
			mark: func(d *appsv1.Deployment) {
				d.Status.AvailableReplicas = 0
				d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate",
					Message: `pods "p1-abc" is forbidden: exceeded quota: tiny, requested: pods=1, used: pods=1, limited: pods=1`}}
			},
			wantClass: backend.ErrQuota, wantMsg: `ResourceQuota "tiny"`,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			var objs []runtime.Object
			mark := tt.mark
			if tt.pod != nil {
				objs = append(objs, tt.pod)
				mark = func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 0; d.Status.Conditions = nil }
			}
			b, cs := newFake(t, objs...)
			controller(ctx, t, cs, mark)
			inst, err := b.Create(ctx, testSpec("p1"))
			if !errors.Is(err, tt.wantClass) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("error %v, want %v with %q", err, tt.wantClass, tt.wantMsg)
			}
			if inst.ID != testID() {
				t.Errorf("the made proxy's id is not returned with the error: %+v", inst.ID)
			}
			if ctx.Err() != nil {
				t.Error("the wait ran into the test's deadline instead of failing fast")
			}
		})
	}
}

func waitingPod(reason, msg string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p1-abc", Namespace: testNS, Labels: map[string]string{backend.LabelName: "p1"}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			Name: containerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}},
		}}},
	}
}

// crashedPod is a container in CrashLoopBackOff whose last run exited with code and whose log ended with log.
func crashedPod(msg string, code int32, log string) *corev1.Pod {
	p := waitingPod("CrashLoopBackOff", msg)
	p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error", Message: log}
	return p
}

func TestGetStates(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		mutate func(*appsv1.Deployment)
		want   backend.State
	}{
		"available": {func(*appsv1.Deployment) {}, backend.StateRunning},
		"rolling out": {func(d *appsv1.Deployment) {
			d.Status.AvailableReplicas, d.Status.Conditions = 0, nil
		}, backend.StatePending},
		"scaled to zero": {func(d *appsv1.Deployment) { d.Spec.Replicas = new(int32) }, backend.StateStopped},
		"deleting": {func(d *appsv1.Deployment) {
			now := metav1.Now()
			d.DeletionTimestamp = &now
		}, backend.StateDeleting},
		"failed": {func(d *appsv1.Deployment) {
			d.Status.Conditions = append(d.Status.Conditions, appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Reason: "ProgressDeadlineExceeded"})
		}, backend.StateFailed},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := readyDeployment("p1")
			tt.mutate(d)
			b, _ := newFake(t, d)
			inst, err := b.Get(testCtx(t), testID())
			if err != nil {
				t.Fatal(err)
			}
			if inst.State != tt.want || inst.UID != "uid-p1" || inst.CreatedAt.IsZero() {
				t.Errorf("got %s uid %q created %v, want %s", inst.State, inst.UID, inst.CreatedAt, tt.want)
			}
		})
	}
	t.Run("gone", func(t *testing.T) {
		t.Parallel()
		b, _ := newFake(t)
		if _, err := b.Get(testCtx(t), testID()); !backend.IsNotFound(err) {
			t.Fatalf("error %v, want NotFound", err)
		}
	})
}

func readyDeployment(name string) *appsv1.Deployment {
	one := int32(1)
	labels := backend.ManagedLabels(backend.Spec{Name: name, UID: "uid-" + name, Owner: "owner-1"})
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Labels: labels, CreationTimestamp: metav1.Now(), Generation: 1},
		Spec:       appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{backend.LabelName: name}}},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}}},
	}
}

// TestDeleteWaitsForThePodsAndIsIdempotent: Delete removes the Deployment without waiting on the garbage
// collector's foreground chain, sweeps the rest, and returns only once no pod of the proxy serves: one that
// still runs keeps it waiting until the pod is marked for deletion (what the collector does on a cluster; the
// fake collects nothing, so the test marks it).
func TestDeleteWaitsForThePodsAndIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b, cs := newFake(t)
	controller(ctx, t, cs, nil)
	if _, err := b.Create(ctx, testSpec("p1")); err != nil {
		t.Fatal(err)
	}
	d, err := cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1-abc", Namespace: testNS, Labels: selectorLabelsOf(d)}}
	if err := cs.Tracker().Add(pod); err != nil {
		t.Fatal(err)
	}
	cs.ClearActions()
	done := deleteWaitingOn(ctx, t, b, cs, "pods", "a pod of the proxy still serves")
	// The collector's doing: the pod is marked, and Delete sees it on its watch.
	marked := pod.DeepCopy()
	marked.DeletionTimestamp = ptr.To(metav1.Now())
	if err := cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), marked, testNS); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	background := false
	for _, a := range cs.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && d.GetResource().Resource == "deployments" {
			background = *d.GetDeleteOptions().PropagationPolicy == metav1.DeletePropagationBackground
		}
	}
	if !background {
		t.Error("the Deployment was not deleted with background propagation")
	}
	// The fake has no garbage collector: the sweep by UID label must have removed the rest.
	cms, _ := cs.CoreV1().ConfigMaps(testNS).List(ctx, metav1.ListOptions{})
	svcs, _ := cs.CoreV1().Services(testNS).List(ctx, metav1.ListOptions{})
	nps, _ := cs.NetworkingV1().NetworkPolicies(testNS).List(ctx, metav1.ListOptions{})
	if n := len(cms.Items) + len(svcs.Items) + len(nps.Items); n != 0 {
		t.Errorf("left behind: %d ConfigMaps, %d Services, %d NetworkPolicies", len(cms.Items), len(svcs.Items), len(nps.Items))
	}
	if err := b.Delete(ctx, testID()); err != nil {
		t.Errorf("a second Delete: %v", err)
	}
}

func TestListByTag(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		forbidAll  bool
		forbidNS   bool
		wantCount  int
		wantCalls  int
		wantFailed bool
	}{
		// 200 proxies: one list of Deployments and one of Services, not one call per proxy.
		"cluster-wide":                 {wantCount: 200, wantCalls: 2},
		"namespaces when RBAC forbids": {forbidAll: true, wantCount: 200, wantCalls: 3},
		"a scope that fails":           {forbidAll: true, forbidNS: true, wantCount: 0, wantCalls: 2, wantFailed: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var objs []runtime.Object
			for i := range 200 {
				d := readyDeployment("p" + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + itoa(i))
				objs = append(objs, d)
			}
			objs = append(objs, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "unmanaged", Namespace: testNS}})
			b, cs := newFake(t, objs...)
			cs.PrependReactor("list", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if (tt.forbidAll && a.GetNamespace() == "") || (tt.forbidNS && a.GetNamespace() == testNS) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: a.GetResource().Resource}, "", errors.New("no"))
				}
				return false, nil, nil
			})
			cs.ClearActions()
			got, err := b.ListByTag(testCtx(t), backend.Selector{Owner: "owner-1"})
			var le *backend.ListError
			if errors.As(err, &le) != tt.wantFailed {
				t.Fatalf("error %v, want failed scopes: %v", err, tt.wantFailed)
			}
			if len(got) != tt.wantCount {
				t.Errorf("%d instances, want %d", len(got), tt.wantCount)
			}
			if n := len(cs.Actions()); n != tt.wantCalls {
				t.Errorf("%d API calls, want %d", n, tt.wantCalls)
			}
		})
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

func TestReconfigureRollsOutNewRulesAndKeepsTheService(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b, cs := newFake(t)
	controller(ctx, t, cs, nil)
	spec := testSpec("p1")
	before, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	d0, _ := cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})
	svc0, _ := cs.CoreV1().Services(testNS).Get(ctx, "p1", metav1.GetOptions{})

	next := spec.Proxy
	next.AllowedDestinations = []string{"example.org"}
	next.AllowedClientCIDRs = []string{"192.168.0.0/16"}
	after, err := b.Reconfigure(ctx, testID(), next)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})
	svc1, _ := cs.CoreV1().Services(testNS).Get(ctx, "p1", metav1.GetOptions{})
	cm, _ := cs.CoreV1().ConfigMaps(testNS).Get(ctx, "p1", metav1.GetOptions{})
	np, _ := cs.NetworkingV1().NetworkPolicies(testNS).Get(ctx, "p1", metav1.GetOptions{})
	if d1.Spec.Template.Annotations[annotationChecksum] == d0.Spec.Template.Annotations[annotationChecksum] {
		t.Error("the pod template's checksum did not change: no rollout")
	}
	if svc1.UID != svc0.UID || after.InternalAddress != before.InternalAddress {
		t.Error("the Service was replaced")
	}
	if !strings.Contains(cm.Data[guest.ConfigKey], "example.org") || strings.Contains(cm.Data[guest.ConfigKey], "example.com") {
		t.Errorf("squid.conf not updated:\n%s", cm.Data[guest.ConfigKey])
	}
	if np.Spec.Ingress[0].From[0].IPBlock.CIDR != "192.168.0.0/16" {
		t.Errorf("network policy still admits %s", np.Spec.Ingress[0].From[0].IPBlock.CIDR)
	}
	if after.Proxy == nil || after.Proxy.AllowedDestinations[0] != "example.org" {
		t.Errorf("settings read back %+v", after.Proxy)
	}

	// The same settings again: no new rollout.
	cs.ClearActions()
	if _, err := b.Reconfigure(ctx, testID(), next); err != nil {
		t.Fatal(err)
	}
	for _, a := range cs.Actions() {
		if a.GetVerb() == "update" && a.GetResource().Resource == "deployments" {
			t.Error("the same settings updated the Deployment again")
		}
	}
}

// Check reviews the credentials where proxies run: in each listed namespace, or cluster-wide when the cluster
// lists none; so credentials bound by namespace Roles are reported healthy where they are bound.
func TestCheckNamesMissingPermissions(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		namespaces []string
		denied     func(*authorizationv1.ResourceAttributes) bool
		want       string // missing_permissions; healthy when empty
	}{
		"cluster-wide, two verbs missing": {
			denied: func(a *authorizationv1.ResourceAttributes) bool {
				return a.Namespace == "" && ((a.Resource == "networkpolicies" && a.Verb == "create") || (a.Resource == "pods" && a.Verb == "watch"))
			},
			want: "watch pods, create networkpolicies.networking.k8s.io",
		},
		"a Role in each listed namespace, nothing cluster-wide": {
			namespaces: []string{"team-a", "team-b"},
			denied:     func(a *authorizationv1.ResourceAttributes) bool { return a.Namespace == "" },
		},
		"a Role in one listed namespace of two": {
			namespaces: []string{"team-a", "team-b"},
			denied: func(a *authorizationv1.ResourceAttributes) bool {
				return a.Namespace != "team-a" && a.Resource == "deployments" && a.Verb == "create"
			},
			want: "create deployments.apps in team-b",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, cs := newFakeCluster(t, ClusterConfig{Namespaces: tc.namespaces})
			cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
				create, _ := a.(k8stesting.CreateAction)
				r, ok := create.GetObject().(*authorizationv1.SelfSubjectAccessReview)
				if !ok {
					return false, nil, nil
				}
				r.Status.Allowed = !tc.denied(r.Spec.ResourceAttributes)
				return true, r, nil
			})
			h := b.Check(testCtx(t))
			if len(h) != 1 {
				t.Fatalf("health %+v, want one cluster", h)
			}
			if got := h[0].Details["missing_permissions"]; got != tc.want || h[0].Healthy != (tc.want == "") {
				t.Errorf("healthy %v (%s), missing permissions %q; want %q", h[0].Healthy, h[0].Reason, got, tc.want)
			}
			if tc.want != "" && h[0].Reason != backend.HealthUnauthorized {
				t.Errorf("reason %s, want %s", h[0].Reason, backend.HealthUnauthorized)
			}
		})
	}
}
