package kubernetes

import (
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
)

// A Service that clients outside the cluster reach keeps their addresses (externalTrafficPolicy Local), so
// Squid's client check sees them rather than a node's; a LoadBalancer also filters them by the client ranges
// before they reach a pod. A ClusterIP Service takes neither field.
func TestServiceAdmitsOnlyAllowedClients(t *testing.T) {
	t.Parallel()
	clients := []string{"198.51.100.0/24", "2001:db8::/32"}
	tests := map[string]struct {
		serviceType  string
		wantPolicy   corev1.ServiceExternalTrafficPolicy
		wantRangesOf []string
	}{
		"ClusterIP":    {serviceType: "ClusterIP"},
		"NodePort":     {serviceType: "NodePort", wantPolicy: corev1.ServiceExternalTrafficPolicyLocal},
		"LoadBalancer": {serviceType: "LoadBalancer", wantPolicy: corev1.ServiceExternalTrafficPolicyLocal, wantRangesOf: clients},
		"default":      {serviceType: "", wantPolicy: ""}, // DefaultServiceType, ClusterIP
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			spec := testSpec("p1")
			spec.Proxy.AllowedClientCIDRs = clients
			spec.Placement.Options = &Options{ServiceType: tc.serviceType}
			b, _ := newFake(t)
			o, err := b.render(spec, testID())
			if err != nil {
				t.Fatal(err)
			}
			svc := o.service.Spec
			if svc.ExternalTrafficPolicy != tc.wantPolicy {
				t.Errorf("externalTrafficPolicy %q, want %q", svc.ExternalTrafficPolicy, tc.wantPolicy)
			}
			if diff := cmp.Diff(tc.wantRangesOf, svc.LoadBalancerSourceRanges); diff != "" {
				t.Errorf("loadBalancerSourceRanges (-want +got):\n%s", diff)
			}
		})
	}
}

// The Squid container gets the pod's own addresses from the downward API, in the variables the start command
// reads, and the file it lists them in is on a writable volume (the root filesystem is read-only).
func TestPodKnowsItsOwnAddresses(t *testing.T) {
	t.Parallel()
	b, _ := newFake(t)
	o, err := b.render(testSpec("p1"), testID())
	if err != nil {
		t.Fatal(err)
	}
	c := o.deployment.Spec.Template.Spec.Containers[0]
	fields := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			t.Errorf("env %s is not from the downward API", e.Name)
			continue
		}
		fields[e.Name] = e.ValueFrom.FieldRef.FieldPath
	}
	want := map[string]string{guest.PodIPsEnv: "status.podIPs", guest.PodIPEnv: "status.podIP"}
	if diff := cmp.Diff(want, fields); diff != "" {
		t.Errorf("downward API env (-want +got):\n%s", diff)
	}
	dir := path.Dir(guest.OwnAddressesPath)
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir && !m.ReadOnly }) {
		t.Errorf("%s, where the own addresses are listed, is not a writable mount: %+v", dir, c.VolumeMounts)
	}
	ownACL := `acl own_addresses dst "` + guest.OwnAddressesPath + `"`
	if conf := o.configMap.Data[guest.ConfigKey]; !slices.Contains(strings.Split(conf, "\n"), ownACL) {
		t.Errorf("squid.conf does not refuse the listed own addresses:\n%s", conf)
	}
}

// New client ranges reach a LoadBalancer's source ranges in place, with the rules: the Service, and so the
// proxy's address, stays. A Service made before these fields (externalTrafficPolicy Cluster, no source
// ranges) gets them with the next change of rules; a change of labels alone keeps them.
func TestReconfigureKeepsTheServiceFiltering(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	spec := testSpec("p1")
	spec.Placement.Options = &Options{ServiceType: "LoadBalancer"}
	b, cs := newFake(t)
	// The fake has no load balancer controller: the Service a crashed earlier Create made, as an older
	// provider made it and with its address already given, is adopted.
	o, err := b.render(spec, testID())
	if err != nil {
		t.Fatal(err)
	}
	older := o.service.DeepCopy()
	older.Spec.ExternalTrafficPolicy, older.Spec.LoadBalancerSourceRanges = corev1.ServiceExternalTrafficPolicyCluster, nil
	older.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	if _, err := cs.CoreV1().Services(testNS).Create(ctx, older, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	controller(ctx, t, cs, nil)
	if _, err := b.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	service := func() *corev1.Service {
		t.Helper()
		svc, err := cs.CoreV1().Services(testNS).Get(ctx, "p1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	svc0 := service()

	next := spec.Proxy
	next.AllowedClientCIDRs = []string{"192.168.0.0/16", "fd00::/8"}
	if _, err := b.Reconfigure(ctx, testID(), next); err != nil {
		t.Fatal(err)
	}
	svc1 := service()
	if svc1.UID != svc0.UID {
		t.Error("the Service was replaced")
	}
	if svc1.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		t.Errorf("externalTrafficPolicy %q after Reconfigure, want Local", svc1.Spec.ExternalTrafficPolicy)
	}
	if diff := cmp.Diff(next.AllowedClientCIDRs, svc1.Spec.LoadBalancerSourceRanges); diff != "" {
		t.Errorf("loadBalancerSourceRanges after Reconfigure (-want +got):\n%s", diff)
	}

	// The same settings again write no Service.
	cs.ClearActions()
	if _, err := b.Reconfigure(ctx, testID(), next); err != nil {
		t.Fatal(err)
	}
	for _, a := range cs.Actions() {
		if a.GetVerb() == "update" && a.GetResource().Resource == "services" {
			t.Error("the same settings updated the Service again")
		}
	}

	// New labels: the Service is relabelled and keeps its filtering.
	relabelled := spec
	relabelled.Proxy = next
	relabelled.Labels = map[string]string{"team": "edge"}
	if _, err := b.Update(ctx, testID(), relabelled); err != nil {
		t.Fatal(err)
	}
	svc2 := service()
	if svc2.Labels["team"] != "edge" || svc2.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal ||
		!slices.Equal(svc2.Spec.LoadBalancerSourceRanges, next.AllowedClientCIDRs) {
		t.Errorf("after a label change the Service has labels %v, policy %q, source ranges %v",
			svc2.Labels, svc2.Spec.ExternalTrafficPolicy, svc2.Spec.LoadBalancerSourceRanges)
	}
}

// A pod template made before the downward API variables gets them with the next rollout: its new squid.conf
// lists the own addresses the start command writes from them, and without them the pod would not start.
func TestReconfigureGivesAnOlderPodItsAddresses(t *testing.T) {
	t.Parallel()
	got, want := reconfigureAnOlderPod(t, func(old *corev1.PodSpec) { old.Containers[0].Env = nil })
	if diff := cmp.Diff(want.Containers[0].Env, got.Containers[0].Env); diff != "" {
		t.Errorf("env after Reconfigure (-want +got):\n%s", diff)
	}
}
