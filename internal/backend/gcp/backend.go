package gcp

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	secretmanager "cloud.google.com/go/secretmanager/apiv1"
	cloudresourcemanager "google.golang.org/api/cloudresourcemanager/v3"
	"google.golang.org/api/option"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Backend is the gcp implementation of backend.Backend, backend.Checker and backend.Reconfigurer.
type Backend struct {
	cfg      Config
	projects map[string]*project
	// pollInitial and pollMax space operation and state polls: short first, growing to pollMax.
	pollInitial, pollMax time.Duration
	// retry spaces the retries of calls that failed transiently.
	retry backend.Backoff
	// Guest attribute polls have their own spacing, on their own clock, and share the ration of queries
	// Compute Engine allows per VM (guestpoll.go).
	guestPollInitial, guestPollMax time.Duration
	clock                          clock
	guestRation                    *guestRation
}

var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.Checker      = (*Backend)(nil)
	_ backend.Reconfigurer = (*Backend)(nil)
)

// project holds one project's settings and its clients, built once on first use.
type project struct {
	id       string
	settings ProjectConfig

	once      sync.Once
	err       error
	instances *compute.InstancesClient
	addresses *compute.AddressesClient
	zones     *compute.ZonesClient
	regions   *compute.RegionsClient
	// The load balancer of a proxy of several VMs (ha.go).
	healthChecks    *compute.RegionHealthChecksClient
	groups          *compute.InstanceGroupsClient
	backendServices *compute.RegionBackendServicesClient
	forwardingRules *compute.ForwardingRulesClient
	// secrets is Secret Manager's REST client: the proxies' secrets, for VMs with a service account.
	secrets *secretmanager.Client
	// resources is Cloud Resource Manager's client, for the health check's testIamPermissions (permissions.go).
	resources *cloudresourcemanager.Service
}

// New validates cfg and returns a backend. It reads no credentials and calls nothing.
func New(cfg Config) (*Backend, error) {
	projects, err := cfg.projects()
	if err != nil {
		return nil, backend.NewError(backend.ClassPermanent, "gcp backend configuration", err)
	}
	b := &Backend{
		cfg: cfg, projects: map[string]*project{},
		pollInitial: 250 * time.Millisecond, pollMax: 5 * time.Second, retry: backend.DefaultBackoff,
		guestPollInitial: defaultGuestPollInitial, guestPollMax: defaultGuestPollMax, clock: wallClock{}, guestRation: &guestRation{},
	}
	for id, p := range projects {
		b.projects[id] = &project{id: id, settings: p}
	}
	return b, nil
}

// Projects lists the configured project IDs.
func (b *Backend) Projects() []string { return sortedKeys(b.projects) }

// DefaultProject is the project a proxy that names none goes to.
func (b *Backend) DefaultProject() string {
	if b.cfg.DefaultProject != "" {
		return b.cfg.DefaultProject
	}
	if ids := b.Projects(); len(ids) == 1 {
		return ids[0]
	}
	return ""
}

// Close releases every client built.
func (b *Backend) Close() error {
	for _, p := range b.projects {
		if p.instances != nil {
			_ = p.instances.Close()
			_ = p.addresses.Close()
			_ = p.zones.Close()
			_ = p.regions.Close()
			_ = p.healthChecks.Close()
			_ = p.groups.Close()
			_ = p.backendServices.Close()
			_ = p.forwardingRules.Close()
			_ = p.secrets.Close()
		}
	}
	return nil
}

// clients returns the project's clients, building them on first use. A failure to build them (credentials
// missing or unreadable) is Permanent and named after the project, so the user sees it at the first use.
func (b *Backend) clients(ctx context.Context, id string) (*project, error) {
	p, ok := b.projects[id]
	if !ok {
		return nil, backend.Permanent("gcp project "+id, "project %q is not configured on this provider (configured: %v)", id, b.Projects())
	}
	p.once.Do(func() {
		// Clients outlive the call that built them: not bound to ctx's cancellation.
		bctx := context.WithoutCancel(ctx)
		auth, err := b.cfg.clientOptions(bctx, p.settings)
		opts := withEndpoint(auth, p.settings.ComputeEndpoint)
		if err == nil {
			p.instances, err = compute.NewInstancesRESTClient(bctx, opts...)
		}
		if err == nil {
			p.addresses, err = compute.NewAddressesRESTClient(bctx, opts...)
		}
		if err == nil {
			p.zones, err = compute.NewZonesRESTClient(bctx, opts...)
		}
		if err == nil {
			p.regions, err = compute.NewRegionsRESTClient(bctx, opts...)
		}
		if err == nil {
			p.healthChecks, err = compute.NewRegionHealthChecksRESTClient(bctx, opts...)
		}
		if err == nil {
			p.groups, err = compute.NewInstanceGroupsRESTClient(bctx, opts...)
		}
		if err == nil {
			p.backendServices, err = compute.NewRegionBackendServicesRESTClient(bctx, opts...)
		}
		if err == nil {
			p.forwardingRules, err = compute.NewForwardingRulesRESTClient(bctx, opts...)
		}
		if err == nil {
			p.secrets, err = secretmanager.NewRESTClient(bctx, withEndpoint(auth, p.settings.SecretManagerEndpoint)...)
		}
		if err == nil {
			p.resources, err = newResourceManager(bctx, auth, p.settings.ResourceManagerEndpoint)
		}
		if err != nil {
			p.err = backend.Permanent("gcp project "+id, "building the Compute Engine client (credentials): %v", err)
		}
	})
	return p, p.err
}

// withEndpoint is opts for a client of the endpoint, or of its default one when endpoint is empty.
func withEndpoint(opts []option.ClientOption, endpoint string) []option.ClientOption {
	if endpoint == "" {
		return opts
	}
	return append(append([]option.ClientOption(nil), opts...), option.WithEndpoint(strings.TrimSuffix(endpoint, "/")))
}

func instanceObject(project, zone, name string) string {
	return fmt.Sprintf("gcp instance %s in project %s, zone %s", name, project, zone)
}

func addressObject(project, region, name string) string {
	return fmt.Sprintf("gcp address %s in project %s, region %s", name, project, region)
}

func checkID(id backend.ProviderID) error {
	if id.Backend != Kind {
		return backend.Permanent(id.String(), "not a gcp id (%s)", IDForm)
	}
	return nil
}

// getInstance reads one instance, retrying transient failures within ctx.
func (b *Backend) getInstance(ctx context.Context, p *project, zone, name string) (*computepb.Instance, error) {
	var in *computepb.Instance
	obj := instanceObject(p.id, zone, name)
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		var err error
		in, err = p.instances.Get(ctx, &computepb.GetInstanceRequest{Project: p.id, Zone: zone, Instance: name})
		return classify(obj, err)
	})
	return in, err
}

// Get reads the proxy back from its instance: state, addresses, labels and the settings in its metadata.
func (b *Backend) Get(ctx context.Context, id backend.ProviderID) (backend.Instance, error) {
	if err := checkID(id); err != nil {
		return backend.Instance{}, err
	}
	p, err := b.clients(ctx, id.Target)
	if err != nil {
		return backend.Instance{}, err
	}
	in, err := b.getInstance(ctx, p, id.Scope, id.Name)
	if backend.IsNotFound(err) {
		// No VM bears the name of a proxy of several (ha.go): read it from its members and load balancer.
		if inst, herr := b.getHA(ctx, p, id); !backend.IsNotFound(herr) {
			return inst, herr
		}
		// The VM was deleted behind the provider's back. Terraform will forget the proxy and make a new one:
		// under the same name when the user chose it, and that one adopts the address; under a new name when
		// it was derived from the UID, and then the address reserved for this one is left to nobody. A read
		// changes nothing, though: ListByTag lists such an address as a kept one (egress_proxy_orphans), and
		// the egress_proxy_gc action or a Delete of its id releases it.
		return backend.Instance{}, err
	}
	if err != nil {
		return backend.Instance{}, err
	}
	if err := ownedBy(backend.OwnershipOf(ctx).Reading(), instanceObject(p.id, id.Scope, id.Name), in.GetLabels()); err != nil {
		return backend.Instance{}, err
	}
	return toInstance(p.id, in)
}

// Update changes the labels in place, with the label fingerprint so a concurrent change is not overwritten,
// and turns Options.CloudLogging on or off through its metadata key, with the metadata fingerprint: the
// guest's watcher starts or stops the shipper. Nothing else of the placement changes in place. Of a proxy of
// several VMs, it then makes again each member whose VM no longer exists (Member.Gone), as a retried Create
// would, and nothing else (ha_ops.go#Backend.restoreGone).
func (b *Backend) Update(ctx context.Context, id backend.ProviderID, spec backend.Spec) (backend.Instance, error) {
	if err := checkID(id); err != nil {
		return backend.Instance{}, err
	}
	opts, err := backend.OptionsOf[Options](spec.Placement)
	if err != nil {
		return backend.Instance{}, err
	}
	p, err := b.clients(ctx, id.Target)
	if err != nil {
		return backend.Instance{}, err
	}
	if _, err := b.getInstance(ctx, p, id.Scope, id.Name); backend.IsNotFound(err) {
		return b.updateHA(ctx, p, id, spec, opts)
	}
	if err := b.updateVM(ctx, p, id, spec, opts); err != nil {
		return backend.Instance{}, err
	}
	return b.Get(ctx, id)
}

// updateVM is Update of one VM: the proxy's own or a member of a proxy of several.
func (b *Backend) updateVM(ctx context.Context, p *project, id backend.ProviderID, spec backend.Spec, opts *Options) error {
	obj := instanceObject(id.Target, id.Scope, id.Name)
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		in, err := b.getInstance(ctx, p, id.Scope, id.Name)
		if err != nil {
			return err
		}
		cur := in.GetLabels()
		// The labels written below carry spec's owner: they must be its already, or Update would hand another
		// owner's proxy to this one.
		want := backend.OwnershipOf(ctx)
		if spec.UID != "" {
			want.UID = spec.UID
		}
		if spec.Owner != "" {
			want.Owner = spec.Owner
		}
		if err := ownedBy(want, obj, cur); err != nil {
			return err
		}
		labels := backend.ManagedLabels(withIdentity(spec, cur))
		if !equalMaps(cur, labels) {
			op, err := p.instances.SetLabels(ctx, &computepb.SetLabelsInstanceRequest{
				Project: p.id, Zone: id.Scope, Instance: id.Name,
				InstancesSetLabelsRequestResource: &computepb.InstancesSetLabelsRequest{Labels: labels, LabelFingerprint: in.LabelFingerprint},
			})
			if err != nil {
				// 412 conditionNotMet (someone changed the labels meanwhile) is Transient: read again and retry.
				return classify(obj, err)
			}
			if err := b.wait(ctx, op, obj); err != nil {
				return err
			}
		}
		if opts == nil {
			return nil
		}
		items, changed := withCloudLogging(in.GetMetadata().GetItems(), opts, id.Name)
		if !changed {
			return nil
		}
		// Checked against the account the VM runs as, which no in-place change touches.
		actual := Options{CloudLogging: opts.CloudLogging}
		if sas := in.GetServiceAccounts(); len(sas) > 0 {
			actual.ServiceAccount, actual.Scopes = sas[0].GetEmail(), sas[0].GetScopes()
		}
		if err := ValidateCloudLogging(actual); err != nil {
			return backend.NewError(backend.ClassPermanent, obj, err)
		}
		op, err := p.instances.SetMetadata(ctx, &computepb.SetMetadataInstanceRequest{
			Project: p.id, Zone: id.Scope, Instance: id.Name,
			MetadataResource: &computepb.Metadata{Fingerprint: in.GetMetadata().Fingerprint, Items: items},
		})
		if err != nil {
			return classify(obj, err) // 412: the metadata changed meanwhile; read again and retry
		}
		return b.wait(ctx, op, obj)
	})
}

// withIdentity fills the bookkeeping fields Update's spec may leave empty from the labels the instance carries.
func withIdentity(spec backend.Spec, cur map[string]string) backend.Spec {
	if spec.UID == "" {
		spec.UID = cur[backend.LabelUID]
	}
	if spec.Owner == "" {
		spec.Owner = cur[backend.LabelOwner]
	}
	if spec.Name == "" {
		spec.Name = cur[backend.LabelName]
	}
	return spec
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
