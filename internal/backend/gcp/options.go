package gcp

import "github.com/egress-proxies/terraform-provider-egress/internal/backend"

// Kind is this backend's kind: the first part of its ids and the name of its provider and resource blocks.
const Kind backend.Kind = "gcp"

// IDForm is how this backend's ids look.
var IDForm = backend.IDForm{Kind: Kind, Parts: []string{"project", "zone", "name"}}

// Options holds the settings of a proxy VM on Compute Engine. Empty strings take the gcp backend's
// defaults (see create.go).
type Options struct {
	MachineType string
	// Image is an image or image family URL (projects/P/global/images/family/F).
	Image      string
	Network    string
	Subnetwork string
	// NetworkTags go on the VM for the user's firewall rules.
	NetworkTags    []string
	ServiceAccount string
	Scopes         []string
	Preemptible    bool
	Spot           bool
	// StaticEgressIP reserves a regional static external address named after the instance, released on
	// delete. EgressAddressName instead attaches an address the user reserved, which is never released, so
	// the egress address survives any replacement of the proxy.
	StaticEgressIP    bool
	EgressAddressName string
	// CloudLogging ships the access log to Cloud Logging, into the log CloudLogID names, as the VM's service
	// account, which needs LogWriterRole (ValidateCloudLogging). Changed in place: the guest starts or stops
	// its shipper when the metadata key comes or goes.
	CloudLogging bool
	// WaitForProxy makes Create wait (within its ctx) until the guest reports the proxy configured.
	WaitForProxy bool
	// DisableShieldedVM, AllowProjectSSHKeys and DisableOSLogin opt out of the hardening every VM gets by
	// default, so that the zero value is the hardened VM (see create.go).
	DisableShieldedVM   bool
	AllowProjectSSHKeys bool
	DisableOSLogin      bool
	// Instances is how many VMs serve the proxy; 0 and 1 are one VM, as before there was a choice. More are
	// spread over the zones of the placement's region behind an internal passthrough Network Load Balancer
	// whose address is the proxy's (ha.go); each VM keeps its own egress address.
	Instances int
}

// DefaultInstances and MaxInstances bound Options.Instances. The maximum keeps every member's name (the
// proxy's and "-N") and the members' metadata writes of one change within what a plan can wait for.
const (
	DefaultInstances = 1
	MaxInstances     = 9
)
