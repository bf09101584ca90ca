package memory_test

import (
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/backendtest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/memory"
)

// The provider's tests stand memory in for the real backends, so it must keep the contract they keep.
func TestConformance(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, backendtest.Harness{
		New: func(*testing.T) backendtest.World {
			b := memory.New(kubernetes.Kind)
			b.SetTargets("cluster-1", "cluster-down")
			return backendtest.World{
				Backend: b,
				// Memory has no transport whose answer could be lost, and no object that is not its own
				// (Put stores a proxy): LoseNextAnswer and Foreign stay nil.
				FailScope: func(*testing.T) {
					b.SetFaults(memory.Faults{ListFailures: map[string]error{
						"cluster-down": memory.ClassError(backend.ClassTransient, "cluster cluster-down", "connection refused"),
					}})
				},
				NeverReady: func(*testing.T) { b.SetFaults(memory.Faults{NeverReady: true}) },
			}
		},
		IDForm: kubernetes.IDForm,
		Spec: func(name string) backend.Spec {
			return backend.Spec{
				Name:      name,
				Placement: backend.Placement{Backend: kubernetes.Kind, Target: "cluster-1", Scope: "proxies"},
				Proxy:     proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"example.com"}},
			}
		},
	})
}
