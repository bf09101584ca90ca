package kubernetes

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/proxyconftest"
)

// What the API server holds a ConfigMap to (k8s.io/apimachinery's TotalAnnotationSizeLimitB, and a
// ConfigMap's data: "The data stored in a ConfigMap cannot exceed 1 MiB"). The fake clientset enforces
// neither, so the largest settings are measured here.
const (
	maxAnnotationBytes    = 256 * 1024
	maxConfigMapDataBytes = 1024 * 1024
)

// The largest lists and the largest policy (rule sets, the deny list, users and a client CA at their limits)
// fit the proxy's ConfigMap: its data (squid.conf and the CA files) and its settings annotation.
func TestLargestSettingsFitConfigMap(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]proxyconf.Settings{"largest lists": proxyconftest.LargestSettings(t), "largest policy": proxyconftest.LargestPolicySettings(t)} {
		spec := testSpec("largest")
		spec.Proxy = s
		k, err := guest.RenderPod(s, proxyconf.RenderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm := buildConfigMap(metav1.ObjectMeta{Name: spec.Name, Namespace: testNS}, spec, k)
		annotations, data := 0, 0
		for key, v := range cm.Annotations {
			annotations += len(key) + len(v)
		}
		for key, v := range cm.Data {
			data += len(key) + len(v)
		}
		t.Logf("%s: annotations %d bytes of %d, data %d bytes of %d", name, annotations, maxAnnotationBytes, data, maxConfigMapDataBytes)
		if annotations > maxAnnotationBytes || data > maxConfigMapDataBytes {
			t.Errorf("%s: the ConfigMap would be refused by the API server", name)
		}
	}
}
