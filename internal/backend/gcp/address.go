package gcp

import (
	"context"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// reserveAddress reserves the regional static address name for the proxy and returns its IP. It adopts the
// address when a retry finds it already reserved with the proxy's UID label, or when a predecessor of the
// same name and owner left it RESERVED for its successor (DeleteForReplacement); then its labels still name
// the proxy that reserved it first, and inherited is true: that address must outlive a failed create too.
func (b *Backend) reserveAddress(ctx context.Context, p *project, region, name string, spec backend.Spec) (ip string, inherited bool, err error) {
	obj := addressObject(p.id, region, name)
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		op, err := p.addresses.Insert(ctx, &computepb.InsertAddressRequest{Project: p.id, Region: region, AddressResource: &computepb.Address{
			Name: proto.String(name), AddressType: proto.String("EXTERNAL"), Labels: backend.ManagedLabels(spec),
			Description: proto.String("egress address of proxy " + spec.UID),
		}})
		if err != nil && !isConflict(err) {
			return classify(obj, err)
		}
		if err == nil {
			if err := b.wait(ctx, op, obj); err != nil {
				return err
			}
		}
		a, err := p.addresses.Get(ctx, &computepb.GetAddressRequest{Project: p.id, Region: region, Address: name})
		if err != nil {
			return classify(obj, err)
		}
		if !keptFor(a, spec) {
			// Neither kept for this proxy by a predecessor of its owner, nor reserved by this proxy: whoever's
			// it is, it is not taken (an address a partner allow-lists is worth more than a failed apply).
			if err := ownedBy(backend.OwnershipOfSpec(spec), obj, a.GetLabels()); err != nil {
				return err
			}
		}
		ip, inherited = a.GetAddress(), a.GetLabels()[backend.LabelUID] != spec.UID
		return nil
	})
	return ip, inherited, err
}

// namedAddress checks that the user's address exists and is free (or already used by this instance).
func (b *Backend) namedAddress(ctx context.Context, p *project, region, name, instance string) (string, error) {
	obj := addressObject(p.id, region, name)
	var ip string
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		a, err := p.addresses.Get(ctx, &computepb.GetAddressRequest{Project: p.id, Region: region, Address: name})
		if err != nil {
			err = classify(obj, err)
			if backend.IsNotFound(err) {
				// The user must reserve it: an address named here is never made by the provider.
				return backend.Permanent(obj, "does not exist: reserve it first (google_compute_address) or set static_egress_ip instead")
			}
			return err
		}
		for _, u := range a.GetUsers() {
			if lastSegment(u) != instance {
				return backend.Permanent(obj, "is in use by %s", u)
			}
		}
		ip = a.GetAddress()
		return nil
	})
	return ip, err
}

// releaseAddress deletes the address the backend reserved; a missing one is fine. An address still attached
// to an instance being deleted answers resourceInUseByAnotherResource, which is Transient: retried.
func (b *Backend) releaseAddress(ctx context.Context, p *project, region, name string) error {
	obj := addressObject(p.id, region, name)
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		op, err := p.addresses.Delete(ctx, &computepb.DeleteAddressRequest{Project: p.id, Region: region, Address: name})
		if err != nil {
			if err = classify(obj, err); backend.IsNotFound(err) {
				return nil
			}
			return err
		}
		return b.wait(ctx, op, obj)
	})
}

// keptFor says whether a is a static address a predecessor of spec's proxy kept for it: reserved by this
// provider for a proxy of the same owner and name, and attached to nothing.
func keptFor(a *computepb.Address, spec backend.Spec) bool {
	l := a.GetLabels()
	return l[backend.LabelManagedBy] == backend.ManagedByValue && l[backend.LabelOwner] == spec.Owner &&
		l[backend.LabelName] == spec.Name && a.GetStatus() == "RESERVED" && len(a.GetUsers()) == 0
}
