package kubernetes

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

func ready(p *corev1.Pod) {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
}

func waiting(reason string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: containerName,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}})
	}
}

func podIP(ip string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Status.PodIP = ip } }

// Get reports a proxy of several replicas as its members, one per serving pod by name, and its state by
// them: Degraded while a wanted pod does not serve (one waiting on its image, one not yet made), Running when
// every wanted pod serves, even beside a rollout's surge pod not ready yet. A proxy of one has no members.
func TestGetMembers(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		replicas, available int32
		pods                []corev1.Pod
		wantState           backend.State
		wantMembers         string // name scope address egress healthy reason gone, per member
	}{
		"three serving": {3, 3, []corev1.Pod{
			proxyPod("p1-c", "n2", ready, podIP("10.244.0.12")), proxyPod("p1-a", "n1", ready, podIP("10.244.0.10")),
			proxyPod("p1-b", "n1", ready, podIP("10.244.0.11"))},
			backend.StateRunning,
			"[{p1-a n1 10.244.0.10 203.0.113.5 true  false} {p1-b n1 10.244.0.11 203.0.113.5 true  false} {p1-c n2 10.244.0.12 198.51.100.7 true  false}]"},
		"one waiting on its image": {3, 2, []corev1.Pod{
			proxyPod("p1-a", "n1", ready, podIP("10.244.0.10")), proxyPod("p1-b", "n1", ready, podIP("10.244.0.11")),
			proxyPod("p1-c", "n2", waiting("ImagePullBackOff"), podIP("10.244.0.12"))},
			backend.StateDegraded,
			"[{p1-a n1 10.244.0.10 203.0.113.5 true  false} {p1-b n1 10.244.0.11 203.0.113.5 true  false} {p1-c n2 10.244.0.12 198.51.100.7 false container squid: ImagePullBackOff false}]"},
		"one not yet made, one unscheduled": {3, 1, []corev1.Pod{
			proxyPod("p1-a", "n1", ready, podIP("10.244.0.10")), proxyPod("p1-b", "")},
			backend.StateDegraded,
			"[{p1-a n1 10.244.0.10 203.0.113.5 true  false} {p1-b    false not scheduled on a node yet false}]"},
		"a rollout's surge pod not ready, the old ones gone or going": {2, 2, []corev1.Pod{
			proxyPod("p1-a", "n1", ready, podIP("10.244.0.10")), proxyPod("p1-b", "n2", ready, podIP("10.244.0.11")),
			proxyPod("p1-c", "n2", podIP("10.244.0.12")), proxyPod("p1-old", "n2", ready, terminating)},
			backend.StateRunning,
			"[{p1-a n1 10.244.0.10 203.0.113.5 true  false} {p1-b n2 10.244.0.11 198.51.100.7 true  false} {p1-c n2 10.244.0.12 198.51.100.7 false not ready false}]"},
		"one replica": {1, 1, []corev1.Pod{proxyPod("p1-a", "n1", ready, podIP("10.244.0.10"))},
			backend.StateRunning, "[]"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := readyDeployment("p1")
			d.Spec.Replicas, d.Status.AvailableReplicas = &tt.replicas, tt.available
			objs := []runtime.Object{d, service(nil), node("n1", cloudPublic), node("n2", []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "198.51.100.7"}})}
			for i := range tt.pods {
				objs = append(objs, &tt.pods[i])
			}
			b, _ := newFake(t, objs...)
			inst, err := b.Get(testCtx(t), testID())
			if err != nil {
				t.Fatal(err)
			}
			members := fmt.Sprint(inst.Members)
			if inst.Members == nil {
				members = "[]"
			}
			if inst.State != tt.wantState || members != tt.wantMembers {
				t.Errorf("state %s, members\n%s\nwant state %s, members\n%s", inst.State, members, tt.wantState, tt.wantMembers)
			}
		})
	}
}
