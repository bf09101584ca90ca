package gcp

import (
	"context"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// reserveAddress reserves the regional static address name for the proxy, or adopts it when a retry finds it
// already reserved with the proxy's UID label, and returns its IP.
func (b *Backend) reserveAddress(ctx context.Context, p *project, region, name string, spec backend.Spec) (string, error) {
	obj := addressObject(p.id, region, name)
	var ip string
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
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
		if uid := a.GetLabels()[backend.LabelUID]; uid != spec.UID {
			return backend.Permanent(obj, "already exists and belongs to %s, not to this proxy (%s)", ownerOf(uid), spec.UID)
		}
		ip = a.GetAddress()
		return nil
	})
	return ip, err
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
