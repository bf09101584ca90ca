package gcp

import (
	"context"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Reconfigure writes the new config into the instance metadata (setMetadata with the fingerprint, so a
// concurrent change is never overwritten) and waits until the guest's watcher reports, in the guest attribute
// egress/applied, that Squid runs it. Settings equal to the stored ones (the password checked against the
// stored hash) change nothing. A config the guest's Squid refuses is reported from egress/error, and the
// proxy keeps its last good config.
func (b *Backend) Reconfigure(ctx context.Context, id backend.ProviderID, settings proxyconf.Settings) (backend.Instance, error) {
	if err := checkID(id); err != nil {
		return backend.Instance{}, err
	}
	obj := instanceObject(id.Target, id.Scope, id.Name)
	if err := settings.Validate(); err != nil {
		return backend.Instance{}, backend.NewError(backend.ClassPermanent, obj, err)
	}
	p, err := b.clients(ctx, id.Target)
	if err != nil {
		return backend.Instance{}, err
	}
	if _, err := b.getInstance(ctx, p, id.Scope, id.Name); backend.IsNotFound(err) {
		return b.reconfigureHA(ctx, p, id, settings)
	}
	if err := b.reconfigureVM(ctx, p, id, settings); err != nil {
		return backend.Instance{}, err
	}
	return b.Get(ctx, id)
}

// reconfigureVM is Reconfigure of one VM, the proxy's own or a member of a proxy of several: it returns once
// the VM's guest reports the new config applied.
func (b *Backend) reconfigureVM(ctx context.Context, p *project, id backend.ProviderID, settings proxyconf.Settings) error {
	obj := instanceObject(id.Target, id.Scope, id.Name)
	var configID string
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		in, err := b.getInstance(ctx, p, id.Scope, id.Name)
		if err != nil {
			return err
		}
		if err := ownedBy(backend.OwnershipOf(ctx), obj, in.GetLabels()); err != nil {
			return err
		}
		stored, ok := readStoredSpec(in)
		if !ok || in.GetLabels()[backend.LabelManagedBy] != backend.ManagedByValue {
			return backend.Permanent(obj, "cannot be reconfigured: it carries no %s metadata", metadataSpec)
		}
		hash, err := b.currentHtpasswd(ctx, p, id, stored, in)
		if err != nil {
			return err
		}
		if same(stored, settings, hash) {
			configID, _ = metadataValue(in, gcpguest.MetadataConfigID)
			return nil
		}
		r, err := renderProxy(settings, stored, secretName(p.id, id.Scope, id.Name))
		if err != nil {
			return backend.NewError(backend.ClassPermanent, obj, err)
		}
		configID = r.configID
		if r.secret != "" {
			// The new secrets first: the metadata written below names the config that needs them.
			l := in.GetLabels()
			owner := backend.Spec{Name: id.Name, UID: l[backend.LabelUID], Owner: l[backend.LabelOwner], Labels: backend.UserLabels(l)}
			if err := b.putSecret(ctx, p, id.Scope, owner, secretPayload(r)); err != nil {
				return err
			}
			if sas := in.GetServiceAccounts(); len(sas) > 0 {
				if err := b.grantSecret(ctx, p, id.Scope, id.Name, sas[0].GetEmail()); err != nil {
					return err
				}
			}
		}
		md := &computepb.Metadata{Fingerprint: in.GetMetadata().Fingerprint, Items: r.items(in.GetMetadata().GetItems())}
		if err := checkMetadataItems(md.Items, r); err != nil {
			return backend.NewError(backend.ClassPermanent, obj, err) // the VM keeps its metadata and its config
		}
		op, err := p.instances.SetMetadata(ctx, &computepb.SetMetadataInstanceRequest{
			Project: p.id, Zone: id.Scope, Instance: id.Name, MetadataResource: md,
		})
		if err != nil {
			return classify(obj, err) // 412: the metadata changed meanwhile; read again and retry
		}
		return b.wait(ctx, op, obj)
	})
	if err != nil {
		return err
	}
	return b.waitApplied(ctx, p, id.Scope, id.Name, configID)
}

// currentHtpasswd reads the password file the proxy has now: from its secret, or from metadata for a VM
// without one. nil when it has none.
func (b *Backend) currentHtpasswd(ctx context.Context, p *project, id backend.ProviderID, stored storedSpec, in *computepb.Instance) ([]byte, error) {
	if !stored.SecretManager {
		if line, ok := metadataValue(in, gcpguest.MetadataHtpasswd); ok {
			return []byte(line), nil
		}
		return nil, nil
	}
	if _, named := metadataValue(in, metadataSecret); !named {
		return nil, nil
	}
	payload, err := b.latestPayload(ctx, p, secretName(p.id, id.Scope, id.Name), secretObject(p.id, id.Scope, id.Name))
	if backend.IsNotFound(err) {
		return nil, nil
	}
	return payloadFile(payload, gcpguest.SecretLineHtpasswd), err
}

// same reports whether want is what the instance already holds: equal settings without the secrets, the same
// TLS certificate and key (by their fingerprint), and every user's password matching its line in htpasswd,
// with no other line: htpasswd is the proxy's password file now (nil: none).
func same(stored storedSpec, want proxyconf.Settings, htpasswd []byte) bool {
	if !equalSettings(stored.Settings, want.WithoutSecrets()) || !stored.sameTLS(want.TLS) {
		return false
	}
	if len(want.Users) == 0 || htpasswd == nil {
		return len(want.Users) == 0 && htpasswd == nil
	}
	return proxyconf.HtpasswdMatches(htpasswd, want.Users)
}

func equalSettings(a, b proxyconf.Settings) bool {
	ja, errA := jsonOf(a)
	jb, errB := jsonOf(b)
	// Settings that cannot be written as JSON are never "the same": the change goes ahead, and the write that
	// needs the JSON reports the error, instead of two failures comparing equal as empty strings.
	return errA == nil && errB == nil && ja == jb
}
