package kubernetes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

func TestRoutesOnlyTo(t *testing.T) {
	t.Parallel()
	endpoint := func(pod string, ready bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod}}
	}
	current := map[string]bool{"new-1": true, "new-2": true}
	tests := map[string]struct {
		endpoints []discoveryv1.Endpoint
		want      bool
	}{
		"only new pods ready":                  {[]discoveryv1.Endpoint{endpoint("new-1", true), endpoint("new-2", true)}, true},
		"an old pod terminating, not ready":    {[]discoveryv1.Endpoint{endpoint("new-1", true), endpoint("old-1", false)}, true},
		"an old pod still ready":               {[]discoveryv1.Endpoint{endpoint("new-1", true), endpoint("old-1", true)}, false},
		"the new pods not in the slice yet":    {[]discoveryv1.Endpoint{endpoint("old-1", true)}, false},
		"nothing ready: clients would get 503": {[]discoveryv1.Endpoint{endpoint("new-1", false)}, false},
		"no endpoints":                         {nil, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			slices := map[string]*discoveryv1.EndpointSlice{"s": {Endpoints: tt.endpoints}}
			if got := routesOnlyTo(slices, current); got != tt.want {
				t.Errorf("routesOnlyTo = %v, want %v", got, tt.want)
			}
		})
	}
}
