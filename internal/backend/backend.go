// Package backend is the contract every place that runs an egress proxy implements. It knows nothing of
// Terraform: the provider layer translates schemas into a Spec and diagnostics out of the error classes here.
package backend

import (
	"context"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Kind names a backend. It is the first segment of every ProviderID. Each backend package declares its own
// (kvm.Kind, ...); this package names none, so that adding a backend changes nothing here.
type Kind string

// Backend creates, reads, deletes and lists egress proxy instances in one place.
//
// Every method honours ctx: when it is cancelled or its deadline passes, waiting and polling stop promptly and
// the method returns an error wrapping ctx.Err().
type Backend interface {
	// Create makes the instance described by spec and returns it as soon as the backend object exists and is
	// running. It is idempotent by name: when an instance with spec.Name already exists and carries spec.UID,
	// it is adopted and returned, so a retry after a crash partway through never leaves a duplicate. An instance
	// with that name carrying another UID is refused with a Permanent error.
	//
	// When the object was made but did not become ready, Create returns the Instance (with its ID) together
	// with the error, so the caller can record it and nothing leaks.
	Create(ctx context.Context, spec Spec) (Instance, error)

	// Get reads the instance back from the backend, including UID and CreatedAt as the backend stores them.
	// It returns an error of class NotFound when, and only when, the instance no longer exists.
	Get(ctx context.Context, id ProviderID) (Instance, error)

	// Update changes what can change in place (today: labels). It returns NotFound when the instance is gone.
	Update(ctx context.Context, id ProviderID, spec Spec) (Instance, error)

	// Delete removes the instance and everything Create made for it (volumes, seed disks, config objects,
	// reserved addresses), and returns once they are gone. An instance that does not exist is not an error.
	Delete(ctx context.Context, id ProviderID) error

	// ListByTag returns every instance managed by this provider for sel.Owner across all configured scopes.
	// When some scopes fail, it returns what the others hold together with a *ListError naming the failures.
	ListByTag(ctx context.Context, sel Selector) ([]Instance, error)
}

// Reconfigurer is implemented by backends that can change a running proxy's rules in place: client ranges,
// destinations, destination ports and credentials. Everything else (placement, name, listening port) replaces
// the instance.
type Reconfigurer interface {
	// Reconfigure makes the running proxy id enforce settings, whose Port is the instance's own. It validates
	// the rendered configuration before sending it, is idempotent (the same settings twice is one change),
	// honours ctx, and returns only once the proxy enforces the new settings, or with a classified error. On
	// error the proxy keeps running its last good configuration. It returns NotFound when the instance is
	// gone, and a Permanent error when this instance cannot be reconfigured (Instance.Reconfigurable false).
	Reconfigure(ctx context.Context, id ProviderID, settings proxyconf.Settings) (Instance, error)
}

// Successor is implemented by backends that keep part of a proxy for the proxy that replaces it, as the gcp
// backend keeps the static address it reserved, named after the proxy's name, so that the egress address
// survives a replacement. Backends without such parts need nothing: a replacement deletes with Delete.
type Successor interface {
	// DeleteForReplacement removes the instance as Delete does but keeps what a successor of the same name
	// adopts. What is kept stays labelled as the provider's: ListByTag reports it while no successor took it,
	// so it is never lost. A part no successor could adopt (one named after a name derived from the UID) is
	// removed as Delete removes it.
	DeleteForReplacement(ctx context.Context, id ProviderID) error
}

// Checker is implemented by backends that can report their health per configured target.
// Check never fails as a whole: an unreachable target is a Health with Healthy false.
type Checker interface {
	Check(ctx context.Context) []Health
}

// Health is the state of one configured target of a backend (a cluster, a project and zone, a host).
type Health struct {
	Target  string
	Healthy bool
	Reason  string
	Details map[string]string
}

// Spec is everything a backend needs to create one proxy.
type Spec struct {
	// Name is the backend object's name; valid on every backend (see ValidateName).
	Name string
	// UID identifies this proxy for its whole life; it is written on every object and read back by Get.
	UID string
	// Owner scopes garbage collection: ListByTag finds instances by it.
	Owner string
	// Labels are the user's labels, already merged with the provider's default labels.
	Labels    map[string]string
	Placement Placement
	Proxy     proxyconf.Settings
}

// Placement says where an instance runs: the backend, the provider-configured target on it, the scope within
// that target, and the backend's own settings.
type Placement struct {
	Backend Kind
	// Target is the provider-configured target the instance lives on: a cluster, a project or a host name.
	Target string
	// Scope narrows Target where the backend's ids have a part for it (a namespace, a zone); empty where they
	// do not.
	Scope string
	// Options are the backend's own settings for this proxy: a pointer to the options type its package
	// declares (for example *kvm.Options), or nil for that backend's defaults. Read them with OptionsOf.
	Options any
}

// OptionsOf returns p's options as *T, the options type of p's backend: nil when p carries none, and a
// Permanent error when p carries another type, which would be a bug of the caller.
func OptionsOf[T any](p Placement) (*T, error) {
	if p.Options == nil {
		return nil, nil
	}
	if o, ok := p.Options.(*T); ok {
		return o, nil
	}
	return nil, Permanent(string(p.Backend)+" placement", "options of type %T given where %T was expected: this is a bug in the provider", p.Options, new(T))
}

// State is the lifecycle state of an instance, the same words on every backend.
type State string

const (
	StatePending  State = "Pending"
	StateRunning  State = "Running"
	StateStopped  State = "Stopped"
	StateFailed   State = "Failed"
	StateDeleting State = "Deleting"
	StateUnknown  State = "Unknown"
	// StateDegraded: a proxy of several members (Instance.Members) serves through its one address, but not
	// every member is healthy; the unhealthy members say why. A proxy with no healthy member is Failed.
	StateDegraded State = "Degraded"
)

// States lists every State once, for documentation and validation.
var States = []State{StatePending, StateRunning, StateStopped, StateFailed, StateDeleting, StateUnknown, StateDegraded}

// Instance is one proxy as the backend reports it.
type Instance struct {
	ID     ProviderID
	Name   string
	UID    string
	Owner  string
	Labels map[string]string
	State  State
	// InternalAddress is where clients inside the placement reach the proxy.
	InternalAddress string
	// EgressAddress is the source address destinations see on the proxy's outbound connections, and nothing
	// else: empty when the backend cannot know it (traffic leaves through a NAT or gateway it does not
	// manage), never an address clients connect to that only happens to be public.
	EgressAddress string
	// IngressAddress is where clients from outside the placement's network connect to the proxy (a load
	// balancer's address, a VM's external or forwarded address); empty when there is none. It may differ from
	// EgressAddress: a load balancer receives connections but sends none on the proxy's behalf.
	// Any of the three may be empty while the backend does not know it yet.
	IngressAddress string
	// InternalName, when the backend has one, is a DNS name clients inside the placement resolve to
	// InternalAddress (on Kubernetes the Service's); proxy_url names it instead of the address.
	InternalName string
	Port         int
	// CreatedAt is the backend's own timestamp of the instance's creation.
	CreatedAt time.Time
	// Placement is where the instance runs, read back from the backend so an import needs nothing else.
	Placement Placement
	// Proxy is the proxy's settings as the backend stores them, without the password; nil when the backend
	// cannot read them back.
	Proxy *proxyconf.Settings
	// Reconfigurable says whether Reconfigure can change this instance's proxy settings in place, as far as
	// the backend could tell when it read the instance (on KVM: the guest agent answered). The provider keeps
	// it in state and plans a replacement instead of an update when it is false.
	Reconfigurable bool
	// Drift, when not empty, says how the proxy's rules in force differ from those the backend last wrote
	// (a config changed behind the provider's back, a guest that refused or lost it), although Proxy reads
	// back as written. The provider plans the in-place update that writes them again (Reconfigure).
	Drift string
	// Members are the VMs or pods that serve the proxy behind InternalAddress, in a stable order, where the
	// proxy has several (a placement's instances or replicas); empty for a proxy of one. A backend that
	// reports members reports State Degraded while some of them are unhealthy, and Failed when none is healthy.
	Members []Member
	// Notes are what the user should know about an operation that succeeded, such as a readiness check the
	// backend could not make from where the provider runs. The provider shows each as a warning.
	Notes []string
}

// Member is one of the VMs or pods that together serve a proxy behind its one address.
type Member struct {
	// Name is the member's own object's name (a VM's, a pod's).
	Name string
	// Scope is where the member runs within the proxy's target: a zone, an availability zone, a host.
	Scope string
	// InternalAddress is the member's own address, which health checks and a scraping Prometheus reach; clients
	// use the proxy's.
	InternalAddress string
	// EgressAddress is the source address destinations see on this member's connections, as
	// Instance.EgressAddress means it: empty when the backend cannot know it.
	EgressAddress string
	// Healthy says whether the member serves: its health check passes where the backend has one.
	Healthy bool
	// Reason says why an unhealthy member does not serve, in the backend's words (a health check's state, a
	// VM's status); empty when Healthy.
	Reason string
	// Gone says that the member's own object no longer exists (a VM deleted behind Terraform's back), so that
	// only making it again brings it back: Update does, as a retried Create would. A member that exists but
	// does not serve (stopped, failing its health check) is not Gone.
	Gone bool
}

// DegradedState is the State of a proxy of several members, of which healthy serve: Running when all do,
// Degraded when some do, Failed when none does. Backends that report Members use it so that every backend
// draws the line at the same place.
func DegradedState(members []Member) State {
	healthy := 0
	for _, m := range members {
		if m.Healthy {
			healthy++
		}
	}
	switch {
	case healthy == len(members):
		return StateRunning
	case healthy == 0:
		return StateFailed
	default:
		return StateDegraded
	}
}

// Selector picks the instances ListByTag returns.
type Selector struct {
	Owner string
}
