package kubernetes

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// TestReconfigureLogFormat: the log format changes in place both ways: the ConfigMap's squid.conf logs as
// asked, the pods roll out, and Reconfigure and Get read the format back from the settings annotation (text as
// the zero value, which a proxy made before the format existed has).
func TestReconfigureLogFormat(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b, cs := newFake(t)
	controller(ctx, t, cs, nil)
	spec := testSpec("p1")
	if _, err := b.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		format proxyconf.LogFormat
		line   string // what the logformat directive starts with
	}{
		{proxyconf.LogFormatJSON, `logformat egress {"time":`},
		{"", "logformat egress %ts.%03tu client="},
	} {
		before, _ := cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})
		s := spec.Proxy
		s.LogFormat = step.format
		after, err := b.Reconfigure(ctx, testID(), s)
		if err != nil {
			t.Fatalf("to %q: %v", step.format, err)
		}
		got, err := b.Get(ctx, testID())
		if err != nil {
			t.Fatal(err)
		}
		for when, inst := range map[string]backend.Instance{"Reconfigure": after, "Get": got} {
			if inst.Proxy == nil || inst.Proxy.LogFormat != step.format {
				t.Errorf("to %q: %s reads back %+v", step.format, when, inst.Proxy)
			}
		}
		cm, _ := cs.CoreV1().ConfigMaps(testNS).Get(ctx, "p1", metav1.GetOptions{})
		if !strings.Contains(cm.Data[guest.ConfigKey], "\n"+step.line) {
			t.Errorf("to %q: the ConfigMap's squid.conf has no line starting %q", step.format, step.line)
		}
		d, _ := cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})
		if d.Spec.Template.Annotations[annotationChecksum] == before.Spec.Template.Annotations[annotationChecksum] {
			t.Errorf("to %q: the pod template's checksum did not change: no rollout", step.format)
		}
	}
}
