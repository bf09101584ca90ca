package gcp

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
)

// startupScript and startupUserData are the same for every proxy: the settings are in other metadata keys.
// The user-data, for images that run cloud-init and not the guest environment, only runs the startup script.
var (
	startupScript   = mustRender(gcpguest.RenderStartupScript(gcpguest.StartupScriptOptions{}))
	startupUserData = mustRender(gcpguest.RenderStartupUserData(gcpguest.StartupScriptOptions{}))
)

func mustRender(b []byte, err error) []byte {
	if err != nil {
		panic(err) // constant input: a failure is a bug caught by every test
	}
	return b
}

// Compute Engine's names of regions and zones: a region is a geography, a direction and a number
// (europe-west1, northamerica-northeast2, u-france-east1), a zone its region and a suffix (europe-west1-b).
// Service accounts are named by their email, or "default" for the project's default compute account.
var (
	regionRE         = regexp.MustCompile(`^[a-z]+(?:-[a-z]+)+[0-9]+$`)
	zoneRE           = regexp.MustCompile(`^[a-z]+(?:-[a-z]+)+[0-9]+-[a-z][a-z0-9]*$`)
	serviceAccountRE = regexp.MustCompile(`^[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+$`)
)

// DefaultServiceAccount names the project's default compute service account where an email is expected.
const DefaultServiceAccount = "default"

// ValidateZone accepts a zone name of Compute Engine's form; whether the zone exists only the API knows.
func ValidateZone(zone string) error {
	if len(zone) <= maxResourceName && zoneRE.MatchString(zone) {
		return nil
	}
	if regionRE.MatchString(zone) {
		return fmt.Errorf("zone %q is a region: a zone is a region and a suffix, such as %s-b", zone, zone)
	}
	return fmt.Errorf("zone %q is not a Compute Engine zone: lowercase, a region and a suffix, such as europe-west1-b", zone)
}

// ValidateRegion accepts a region name of Compute Engine's form.
func ValidateRegion(region string) error {
	if len(region) <= maxResourceName && regionRE.MatchString(region) {
		return nil
	}
	if zoneRE.MatchString(region) {
		return fmt.Errorf("region %q is a zone: its region is %s", region, regionOf(region))
	}
	return fmt.Errorf("region %q is not a Compute Engine region: lowercase, such as europe-west1", region)
}

// ValidateServiceAccount accepts a service account's email, or DefaultServiceAccount.
func ValidateServiceAccount(email string) error {
	if email == DefaultServiceAccount || serviceAccountRE.MatchString(email) {
		return nil
	}
	return fmt.Errorf("service account %q must be an email such as proxy@PROJECT.iam.gserviceaccount.com, or %q for the project's default compute service account",
		email, DefaultServiceAccount)
}

// resolve fills the placement's empty fields with the backend's defaults, and refuses names no API call
// could accept. It returns the options it filled in, which the placement carries too.
func (b *Backend) resolve(pl backend.Placement) (backend.Placement, *Options, error) {
	if pl.Target == "" {
		pl.Target = b.DefaultProject()
	}
	p, ok := b.projects[pl.Target]
	if !ok {
		return pl, nil, backend.Permanent("gcp project "+pl.Target, "project %q is not configured on this provider (configured: %v)", pl.Target, b.Projects())
	}
	if pl.Scope == "" {
		pl.Scope = p.settings.DefaultZone
	}
	if err := ValidateZone(pl.Scope); err != nil {
		return pl, nil, backend.NewError(backend.ClassPermanent, "gcp project "+pl.Target, err)
	}
	opts, err := backend.OptionsOf[Options](pl)
	if err != nil {
		return pl, nil, err
	}
	if opts != nil && opts.ServiceAccount != "" {
		if err := ValidateServiceAccount(opts.ServiceAccount); err != nil {
			return pl, nil, backend.NewError(backend.ClassPermanent, "gcp project "+pl.Target, err)
		}
	}
	g := Options{}
	if opts != nil {
		g = *opts
	}
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&g.MachineType, DefaultMachineType)
	def(&g.Image, DefaultImage)
	if g.Network == "" && g.Subnetwork == "" {
		g.Network = DefaultNetwork
	}
	if g.ServiceAccount != "" && len(g.Scopes) == 0 {
		g.Scopes = DefaultScopes
	}
	if g.StaticEgressIP && g.EgressAddressName != "" {
		return pl, nil, backend.Permanent("", "static_egress_ip reserves an address; it cannot be combined with a named address")
	}
	if err := ValidateCloudLogging(g); err != nil {
		return pl, nil, backend.NewError(backend.ClassPermanent, "gcp project "+pl.Target, err)
	}
	if err := ValidateInstances(g); err != nil {
		return pl, nil, backend.NewError(backend.ClassPermanent, "gcp project "+pl.Target, err)
	}
	pl.Options = &g
	return pl, &g, nil
}

func reservedAddressName(instance string) string { return instance + reservedAddressSuffix }

const (
	reservedAddressSuffix = "-ip"
	// maxResourceName is the longest name Compute Engine accepts for an instance or an address.
	maxResourceName = 63
)

// ValidateStaticAddressOwner accepts the name of a proxy that reserves its own static address: the address is
// named after it, with a suffix, and must fit Compute Engine's limit too.
func ValidateStaticAddressOwner(name string) error {
	if n := len(reservedAddressName(name)); n > maxResourceName {
		return fmt.Errorf("the static address would be named %q, %d characters, and Compute Engine accepts at most %d: use a name of at most %d characters",
			reservedAddressName(name), n, maxResourceName, maxResourceName-len(reservedAddressSuffix))
	}
	return nil
}

// Create inserts the VM (after reserving its static address, when asked) and waits until it runs. A 409 on
// the insert is adopted when the instance carries spec.UID, so a retry after a lost answer never duplicates.
// With Options.Instances above one, it makes the proxy's VMs and their load balancer instead (ha.go).
func (b *Backend) Create(ctx context.Context, spec backend.Spec) (backend.Instance, error) {
	pl, g, err := b.resolve(spec.Placement)
	if err != nil {
		return backend.Instance{}, err
	}
	if g.Instances > 1 {
		return b.createHA(ctx, spec, pl, g)
	}
	return b.createVM(ctx, spec, pl, g, haMember{})
}

// createVM makes one VM: the proxy's own, or, with member set, one member of a proxy of several (ha.go).
func (b *Backend) createVM(ctx context.Context, spec backend.Spec, pl backend.Placement, g *Options, member haMember) (backend.Instance, error) {
	var err error
	project, zone, region := pl.Target, pl.Scope, regionOf(pl.Scope)
	obj := instanceObject(project, zone, spec.Name)
	stored := storedSpec{Image: g.Image, StaticEgressIP: g.StaticEgressIP, EgressAddressName: g.EgressAddressName, SecretManager: usesSecretManager(g)}
	r, err := renderProxy(spec.Proxy, stored, secretName(project, zone, spec.Name))
	if err != nil {
		return backend.Instance{}, backend.NewError(backend.ClassPermanent, obj, err)
	}
	// Refused before anything is made (an address reserved for a VM the API then refuses would be given back).
	if err := checkMetadataItems(slices.Concat(r.items(nil), hardeningItems(g), cloudLoggingItems(g, spec.Name)), r); err != nil {
		return backend.Instance{}, backend.NewError(backend.ClassPermanent, obj, err)
	}
	p, err := b.clients(ctx, project)
	if err != nil {
		return backend.Instance{}, err
	}
	natIP, inherited := "", false
	switch {
	case g.StaticEgressIP:
		if natIP, inherited, err = b.reserveAddress(ctx, p, region, reservedAddressName(spec.Name), spec); err != nil {
			return backend.Instance{}, missingOnCreate(project, err)
		}
	case g.EgressAddressName != "":
		if natIP, err = b.namedAddress(ctx, p, region, g.EgressAddressName, spec.Name); err != nil {
			return backend.Instance{}, err
		}
	}
	// The secret before the VM: the VM's first boot reads it. It carries the proxy's labels, so that what a
	// crash leaves here is attributable.
	if r.secret != "" {
		if err := b.putSecret(ctx, p, zone, spec, secretPayload(r)); err != nil {
			b.giveBack(ctx, p, region, zone, spec, g.StaticEgressIP && !inherited, false)
			return backend.Instance{}, err
		}
	}
	in := instanceResource(spec, pl, g, r, natIP)
	member.apply(in)
	configID := r.configID
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		op, err := p.instances.Insert(ctx, &computepb.InsertInstanceRequest{Project: project, Zone: zone, InstanceResource: in})
		if isConflict(err) {
			// The VM an earlier attempt made runs the config it was given then (a password's hash is salted
			// anew at each rendering): that is the one its guest reports.
			cur, err := b.adopted(ctx, p, zone, spec)
			if id, ok := metadataValue(cur, gcpguest.MetadataConfigID); ok {
				configID = id
			}
			return err
		}
		if err != nil {
			return missingOnCreate(project, classify(obj, err))
		}
		return b.wait(ctx, op, obj)
	})
	if err != nil {
		if backend.ClassOf(err) == backend.ClassQuota || backend.ClassOf(err) == backend.ClassPermanent {
			// The VM was refused: give back the address reserved for it, so nothing is left behind; one a
			// predecessor kept stays, for the next attempt.
			b.giveBack(ctx, p, region, zone, spec, g.StaticEgressIP && !inherited, r.secret != "")
			return backend.Instance{}, err
		}
		return b.partial(ctx, p, zone, spec.Name, err)
	}
	if r.secret != "" {
		// The VM's service account is granted its own secret, once the VM says which account it runs as
		// ("default" is the project's default compute account, which the instance names by its email).
		if err := b.grantVM(ctx, p, zone, spec.Name); err != nil {
			return b.partial(ctx, p, zone, spec.Name, err)
		}
	}
	id := backend.ProviderID{Backend: Kind, Target: project, Scope: zone, Name: spec.Name}
	inst, err := b.waitRunning(ctx, p, zone, spec.Name, g.WaitForProxy, configID)
	if err != nil {
		inst.ID = id
		return inst, err
	}
	return inst, nil
}

// giveBack releases what a refused create made for its VM (the address reserved for it, the secret), under
// the bounded clean-up context: the create's own error stands, and a step that fails is logged as a warning
// (what it leaves carries the proxy's labels; egress_proxy_orphans lists an address).
func (b *Backend) giveBack(ctx context.Context, p *project, region, zone string, spec backend.Spec, address, secret bool) {
	ctx, cancel := backend.CleanupContext(backend.WithOwnership(ctx, backend.OwnershipOfSpec(spec)))
	defer cancel()
	if address {
		name := reservedAddressName(spec.Name)
		backend.BestEffort(ctx, Kind, "release "+addressObject(p.id, region, name), b.releaseAddress(ctx, p, region, name))
	}
	if secret {
		backend.BestEffort(ctx, Kind, "delete the secret of "+instanceObject(p.id, zone, spec.Name), b.deleteSecret(ctx, p, zone, spec.Name))
	}
}

// partial returns, with err, the instance when it exists after all, so the caller can record it.
func (b *Backend) partial(ctx context.Context, p *project, zone, name string, err error) (backend.Instance, error) {
	cctx, cancel := backend.CleanupContext(ctx) // the create's own context may be what ended it
	defer cancel()
	in, gerr := p.instances.Get(cctx, &computepb.GetInstanceRequest{Project: p.id, Zone: zone, Instance: name})
	if gerr != nil {
		return backend.Instance{}, err
	}
	inst, terr := toInstance(p.id, in)
	if terr != nil {
		return backend.Instance{}, err
	}
	return inst, err
}

// adopted takes an existing instance of the same name when it is this proxy's, and refuses it otherwise.
func (b *Backend) adopted(ctx context.Context, p *project, zone string, spec backend.Spec) (*computepb.Instance, error) {
	in, err := b.getInstance(ctx, p, zone, spec.Name)
	if err != nil {
		return nil, err
	}
	// The owner too, not the UID alone: a UID is no secret (it is on every label), and an instance another
	// owner made under this proxy's UID is still not this configuration's to adopt.
	return in, ownedBy(backend.OwnershipOfSpec(spec), instanceObject(p.id, zone, spec.Name), in.GetLabels())
}

// ownedBy checks the provider's labels of an object against the ownership expected of it.
func ownedBy(o backend.Ownership, object string, labels map[string]string) error {
	if labels[backend.LabelManagedBy] != backend.ManagedByValue {
		return o.Check(object, "", "")
	}
	return o.Check(object, labels[backend.LabelOwner], labels[backend.LabelUID])
}

// waitRunning polls the instance until RUNNING with its addresses and, with waitProxy, until the guest
// reports the config applied.
func (b *Backend) waitRunning(ctx context.Context, p *project, zone, name string, waitProxy bool, configID string) (backend.Instance, error) {
	var inst backend.Instance
	err := b.pollUntil(ctx, func(ctx context.Context) (bool, error) {
		in, err := p.instances.Get(ctx, &computepb.GetInstanceRequest{Project: p.id, Zone: zone, Instance: name})
		if err != nil {
			return false, classify(instanceObject(p.id, zone, name), err)
		}
		if inst, err = toInstance(p.id, in); err != nil {
			return false, err
		}
		switch inst.State {
		case backend.StateRunning:
			return inst.InternalAddress != "", nil
		case backend.StatePending:
			return false, nil
		}
		return false, backend.Permanent(instanceObject(p.id, zone, name), "is %s instead of starting", in.GetStatus())
	})
	if err != nil || !waitProxy {
		return inst, err
	}
	return inst, b.waitApplied(ctx, p, zone, name, configID)
}

// instanceResource is the insert body: labels, metadata with the startup script and the rendered config,
// one NIC with an external access config (the egress address), a boot disk from the image, and the hardening
// the placement keeps (hardening.go).
func instanceResource(spec backend.Spec, pl backend.Placement, g *Options, r rendered, natIP string) *computepb.Instance {
	ac := &computepb.AccessConfig{Name: proto.String("External NAT"), Type: proto.String("ONE_TO_ONE_NAT")}
	if natIP != "" {
		ac.NatIP = proto.String(natIP)
	}
	nic := &computepb.NetworkInterface{AccessConfigs: []*computepb.AccessConfig{ac}}
	if g.Network != "" {
		nic.Network = proto.String(g.Network)
	}
	if g.Subnetwork != "" {
		nic.Subnetwork = proto.String(g.Subnetwork)
	}
	in := &computepb.Instance{
		Name:        proto.String(spec.Name),
		Description: proto.String(fmt.Sprintf("egress proxy %s, managed by %s", spec.UID, backend.ManagedByValue)),
		MachineType: proto.String(machineTypeLink(pl.Scope, g.MachineType)),
		Labels:      backend.ManagedLabels(spec),
		Metadata:    &computepb.Metadata{Items: slices.Concat(r.items(nil), hardeningItems(g), cloudLoggingItems(g, spec.Name))},
		Disks: []*computepb.AttachedDisk{{
			Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
			InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String(g.Image), Labels: backend.ManagedLabels(spec)},
		}},
		NetworkInterfaces:      []*computepb.NetworkInterface{nic},
		Scheduling:             &computepb.Scheduling{},
		ShieldedInstanceConfig: shieldedConfig(g),
	}
	if len(g.NetworkTags) > 0 {
		in.Tags = &computepb.Tags{Items: g.NetworkTags}
	}
	if g.ServiceAccount != "" {
		in.ServiceAccounts = []*computepb.ServiceAccount{{Email: proto.String(g.ServiceAccount), Scopes: g.Scopes}}
	}
	switch {
	case g.Spot:
		in.Scheduling.ProvisioningModel = proto.String("SPOT")
		in.Scheduling.InstanceTerminationAction = proto.String("STOP")
		in.Scheduling.AutomaticRestart = proto.Bool(false)
		in.Scheduling.OnHostMaintenance = proto.String("TERMINATE")
	case g.Preemptible:
		in.Scheduling.Preemptible = proto.Bool(true)
		in.Scheduling.AutomaticRestart = proto.Bool(false)
		in.Scheduling.OnHostMaintenance = proto.String("TERMINATE")
	}
	return in
}
