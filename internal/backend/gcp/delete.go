package gcp

import (
	"context"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Delete deletes the VM, waits for it to be gone, then releases the address the backend reserved for it
// (never one the user named). Both steps treat NotFound as done, so a retried Delete finishes the work.
func (b *Backend) Delete(ctx context.Context, id backend.ProviderID) error {
	return b.delete(ctx, id, false)
}

// DeleteForReplacement deletes the VM but keeps the address reserved for it, RESERVED and labelled with the
// proxy's owner and name, for the successor of the same name to adopt (see reserveAddress). An address
// named after a name derived from the UID is released: no successor can have that name.
func (b *Backend) DeleteForReplacement(ctx context.Context, id backend.ProviderID) error {
	return b.delete(ctx, id, true)
}

func (b *Backend) delete(ctx context.Context, id backend.ProviderID, forSuccessor bool) error {
	if err := checkID(id); err != nil {
		return err
	}
	p, err := b.clients(ctx, id.Target)
	if err != nil {
		return err
	}
	if id.Scope == secretScope {
		// A secret listed as an orphan (see listOrphanSecrets): deleting that orphan deletes the secret.
		return b.deleteOrphanSecret(ctx, p, id.Name)
	}
	if isRegion(id.Scope) {
		// A kept address listed as an orphan (see listKeptAddresses) carries its region as scope: deleting
		// that orphan must release the address, or garbage collection would report success and leave the bill.
		return b.releaseKeptAddress(ctx, p, id.Scope, id.Name)
	}
	obj := instanceObject(id.Target, id.Scope, id.Name)
	reserved, secret := false, false
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		in, err := p.instances.Get(ctx, &computepb.GetInstanceRequest{Project: p.id, Zone: id.Scope, Instance: id.Name})
		if err != nil {
			return classify(obj, err)
		}
		if in.GetLabels()[backend.LabelManagedBy] != backend.ManagedByValue {
			return backend.Permanent(obj, "was not made by this provider: not deleting it")
		}
		if err := ownedBy(backend.OwnershipOf(ctx), obj, in.GetLabels()); err != nil {
			return err
		}
		if st, ok := readStoredSpec(in); ok {
			reserved, secret = st.StaticEgressIP, st.SecretManager
		}
		op, err := p.instances.Delete(ctx, &computepb.DeleteInstanceRequest{Project: p.id, Zone: id.Scope, Instance: id.Name})
		if err != nil {
			return classify(obj, err)
		}
		return b.wait(ctx, op, obj)
	})
	if err != nil && !backend.IsNotFound(err) {
		return err
	}
	if backend.IsNotFound(err) {
		// No VM bears the name of a proxy of several: delete its load balancer and members (ha.go).
		if err := b.deleteHA(ctx, p, id); err != nil {
			return err
		}
		// Gone already, perhaps by an earlier attempt that did not release the address: look for it anyway.
		reserved = true
	}
	if secret {
		// A successor of the same name gets a secret of its own (the same one, rewritten, when it comes).
		if err := b.deleteSecret(ctx, p, id.Scope, id.Name); err != nil {
			return err
		}
	}
	if !reserved {
		return nil
	}
	return b.releaseOwnAddress(ctx, p, regionOf(id.Scope), reservedAddressName(id.Name), id.Name, forSuccessor)
}

// releaseOwnAddress releases the reserved address when it carries the provider's labels for this instance,
// unless it is kept for a successor that can adopt it.
func (b *Backend) releaseOwnAddress(ctx context.Context, p *project, region, name, instance string, forSuccessor bool) error {
	a, err := p.addresses.Get(ctx, &computepb.GetAddressRequest{Project: p.id, Region: region, Address: name})
	if err != nil {
		if err = classify(addressObject(p.id, region, name), err); backend.IsNotFound(err) {
			return nil
		}
		return err
	}
	if a.GetLabels()[backend.LabelManagedBy] != backend.ManagedByValue || a.GetLabels()[backend.LabelName] != instance || a.GetStatus() == "IN_USE" {
		return nil
	}
	// Only the owner is checked: an address a predecessor kept for this proxy still carries the predecessor's
	// UID. Another owner's address of this name is no part of this proxy, so there is nothing of it to release.
	if !(backend.Ownership{Owner: backend.OwnershipOf(ctx).Owner}).Allows(a.GetLabels()[backend.LabelOwner], "") {
		return nil
	}
	if forSuccessor && instance != backend.NameFromUID(a.GetLabels()[backend.LabelUID]) {
		tflog.SubsystemInfo(ctx, string(Kind), "static address kept for the proxy replacing this one",
			map[string]any{"address": addressObject(p.id, region, name), "ip": a.GetAddress()})
		return nil
	}
	return b.releaseAddress(ctx, p, region, name)
}

// releaseKeptAddress releases an address kept for a successor that never came. It must carry the provider's
// labels and be attached to nothing: an address in use belongs to a running proxy, whatever its labels say.
func (b *Backend) releaseKeptAddress(ctx context.Context, p *project, region, name string) error {
	obj := addressObject(p.id, region, name)
	a, err := p.addresses.Get(ctx, &computepb.GetAddressRequest{Project: p.id, Region: region, Address: name})
	if err != nil {
		if err = classify(obj, err); backend.IsNotFound(err) {
			return nil
		}
		return err
	}
	if a.GetLabels()[backend.LabelManagedBy] != backend.ManagedByValue {
		return backend.Permanent(obj, "was not reserved by this provider: not releasing it")
	}
	if err := ownedBy(backend.OwnershipOf(ctx), obj, a.GetLabels()); err != nil {
		return err
	}
	if a.GetStatus() == "IN_USE" || len(a.GetUsers()) > 0 {
		return backend.Permanent(obj, "is in use by %v: not releasing it", a.GetUsers())
	}
	return b.releaseAddress(ctx, p, region, name)
}

// isRegion tells a region ("us-central1") from a zone ("us-central1-a"): every zone name is its region's
// name with one more dash-separated part.
func isRegion(scope string) bool { return strings.Count(scope, "-") == 1 }
