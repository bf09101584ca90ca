package kubernetes

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
)

// TestTerminationMessageHoldsOnlyTheCacheLog: a crash's diagnostic quotes the container's termination
// message, which reaches Terraform's output and logs. Access-log lines (client addresses, users, hosts) must
// not get there: the message is Squid's cache log, and the kubelet's fallback to the container's log only
// applies when that is empty, which is before Squid opened its ports and access log.
func TestTerminationMessageHoldsOnlyTheCacheLog(t *testing.T) {
	t.Parallel()
	b, _ := newFake(t)
	o, err := b.render(testSpec("p1"), testID())
	if err != nil {
		t.Fatal(err)
	}
	c := o.deployment.Spec.Template.Spec.Containers[0]
	directive := func(name string) string {
		for _, line := range strings.Split(o.configMap.Data[guest.ConfigKey], "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == name {
				return strings.TrimPrefix(f[1], "stdio:")
			}
		}
		return ""
	}
	cacheLog, accessLog := directive("cache_log"), directive("access_log")
	tests := map[string]struct {
		ok   bool
		what string
	}{
		"the message file is the cache log": {
			c.TerminationMessagePath != "" && c.TerminationMessagePath == cacheLog,
			"terminationMessagePath " + c.TerminationMessagePath + ", cache_log " + cacheLog,
		},
		"the access log goes elsewhere": {
			accessLog != c.TerminationMessagePath && accessLog != "/dev/stderr",
			"access_log " + accessLog,
		},
		"the kubelet reads the file, falling back only to an empty one": {
			c.TerminationMessagePolicy == corev1.TerminationMessageReadFile || c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError,
			"policy " + string(c.TerminationMessagePolicy),
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if !tt.ok {
				t.Error(tt.what)
			}
		})
	}
}
