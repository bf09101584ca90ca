package gcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"slices"
	"strings"

	"cloud.google.com/go/compute/apiv1/computepb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"cloud.google.com/go/secretmanager/apiv1/secretmanagerpb"
	"github.com/googleapis/gax-go/v2/apierror"
	"google.golang.org/api/googleapi"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
)

// A proxy's secrets, the password file's hash and the TLS listener's key, are kept out of instance metadata,
// which every principal with compute.instances.get (a project Viewer) reads. A VM with a service account
// keeps them in a Secret Manager secret of its own, which its service account alone is granted to read
// (roles/secretmanager.secretAccessor on that secret, never on the project): the startup script reads it with
// the token the metadata server hands the VM. Metadata names the secret (egress-secret), never its content.
// A VM without a service account has no token to read a secret with: its secrets stay in metadata, the
// documented fallback (gcpguest.MetadataHtpasswd, gcpguest.MetadataTLSKey).
const (
	// metadataSecret names the proxy's secret, "projects/PROJECT/secrets/ID", for the startup script.
	metadataSecret = gcpguest.MetadataSecret
	// accessorRole lets a principal read a secret's versions ("Access control with IAM").
	accessorRole = "roles/secretmanager.secretAccessor"
)

// secretID is the proxy's secret: instance names are zonal and secrets are the project's, so the zone is in it.
func secretID(zone, name string) string { return secretIDPrefix + zone + "-" + name }

const (
	secretIDPrefix = "egress-proxy-"
	// secretScope is the scope of an orphan secret's id, gcp/<project>/secrets/<secret id> (list.go#orphanSecret):
	// no zone or region has that name.
	secretScope = "secrets"
)

func secretName(project, zone, name string) string {
	return "projects/" + project + "/secrets/" + secretID(zone, name)
}

func secretObject(project, zone, name string) string {
	return fmt.Sprintf("gcp secret %s in project %s", secretID(zone, name), project)
}

// usesSecretManager says whether a VM placed with g reads its secrets from Secret Manager: it needs a service
// account, and a token whose scopes let it call Secret Manager at all (only cloud-platform does).
func usesSecretManager(g *Options) bool {
	return g.ServiceAccount != "" && slices.Contains(g.Scopes, cloudPlatformScope)
}

// secretPayload is what the secret holds, one line per file the guest installs, its content in base64:
// "htpasswd B64" and "tls-key B64". The startup script reads it with sed, awk and base64 alone.
func secretPayload(r rendered) []byte {
	var b bytes.Buffer
	if r.htpasswd != nil {
		fmt.Fprintf(&b, "%s %s\n", gcpguest.SecretLineHtpasswd, base64.StdEncoding.EncodeToString(r.htpasswd))
	}
	if r.tlsKey != nil {
		fmt.Fprintf(&b, "%s %s\n", gcpguest.SecretLineTLSKey, base64.StdEncoding.EncodeToString(r.tlsKey))
	}
	return b.Bytes()
}

// payloadFile reads one file back from a payload; nil when it has none.
func payloadFile(payload []byte, line string) []byte {
	for _, l := range strings.Split(string(payload), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok && k == line {
			b, err := base64.StdEncoding.DecodeString(v)
			if err == nil {
				return b
			}
		}
	}
	return nil
}

// putSecret makes the proxy's secret, or adopts it when an earlier attempt of this proxy made it, and adds
// payload as its latest version unless the latest already holds it (a retried create or change adds none).
func (b *Backend) putSecret(ctx context.Context, p *project, zone string, spec backend.Spec, payload []byte) error {
	obj := secretObject(p.id, zone, spec.Name)
	name := secretName(p.id, zone, spec.Name)
	return withSecretAdvice(backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		_, err := p.secrets.CreateSecret(ctx, &secretmanagerpb.CreateSecretRequest{
			Parent: "projects/" + p.id, SecretId: secretID(zone, spec.Name),
			Secret: &secretmanagerpb.Secret{
				Labels:      backend.ManagedLabels(spec),
				Replication: &secretmanagerpb.Replication{Replication: &secretmanagerpb.Replication_Automatic_{Automatic: &secretmanagerpb.Replication_Automatic{}}},
			},
		})
		if isConflict(err) {
			sec, err := p.secrets.GetSecret(ctx, &secretmanagerpb.GetSecretRequest{Name: name})
			if err != nil {
				return classify(obj, err)
			}
			// Another owner's secret of this name is never written to: it would hand it this proxy's key.
			if err := ownedBy(backend.OwnershipOfSpec(spec), obj, sec.GetLabels()); err != nil {
				return err
			}
		} else if err != nil {
			return classify(obj, err)
		}
		if current, err := b.latestPayload(ctx, p, name, obj); err == nil && bytes.Equal(current, payload) {
			return nil
		} else if err != nil && !backend.IsNotFound(err) {
			return err
		}
		sum := int64(crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli)))
		_, err = p.secrets.AddSecretVersion(ctx, &secretmanagerpb.AddSecretVersionRequest{
			Parent: name, Payload: &secretmanagerpb.SecretPayload{Data: payload, DataCrc32C: &sum},
		})
		return classify(obj, err)
	}))
}

// withSecretAdvice says what to do when Secret Manager refuses the provider's own account: the refusal is the
// project's IAM (or the API not enabled), and the proxy's VM has a service account, which is what asks for it.
func withSecretAdvice(err error) error {
	var ge *googleapi.Error
	var be *backend.Error
	if !errors.As(err, &ge) || ge.Code != http.StatusForbidden || !errors.As(err, &be) || be.Advice != "" {
		return err
	}
	be.Advice = "A VM with a service_account keeps its secrets in Secret Manager, which the provider's account may not use here: " +
		"enable the Secret Manager API on the project and grant the provider's account roles/secretmanager.admin there, then apply again."
	return err
}

// latestPayload reads the secret's latest version: NotFound when the secret or its versions are gone.
func (b *Backend) latestPayload(ctx context.Context, p *project, name, obj string) ([]byte, error) {
	resp, err := p.secrets.AccessSecretVersion(ctx, &secretmanagerpb.AccessSecretVersionRequest{Name: name + "/versions/latest"})
	if err != nil {
		return nil, classify(obj, err)
	}
	data := resp.GetPayload().GetData()
	if sum := resp.GetPayload().DataCrc32C; sum != nil && int64(crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))) != *sum {
		return nil, backend.Transient(obj, "the payload read does not match its checksum")
	}
	return data, nil
}

// grantSecret lets the VM's service account, and no one else through this policy, read the proxy's secret.
// The policy is the secret's own: the provider made the secret, and nothing else belongs in it.
func (b *Backend) grantSecret(ctx context.Context, p *project, zone, name, email string) error {
	obj := secretObject(p.id, zone, name)
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		_, err := p.secrets.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{
			Resource: secretName(p.id, zone, name),
			Policy:   &iampb.Policy{Bindings: []*iampb.Binding{{Role: accessorRole, Members: []string{"serviceAccount:" + email}}}},
		})
		return classify(obj, err)
	})
}

// grantVM grants the instance's service account its secret, as the instance names the account.
func (b *Backend) grantVM(ctx context.Context, p *project, zone, name string) error {
	in, err := b.getInstance(ctx, p, zone, name)
	if err != nil {
		return err
	}
	sas := in.GetServiceAccounts()
	if len(sas) == 0 || sas[0].GetEmail() == "" || sas[0].GetEmail() == DefaultServiceAccount {
		return backend.Permanent(instanceObject(p.id, zone, name), "runs as no service account by its email, so none can be granted its secret")
	}
	return b.grantSecret(ctx, p, zone, name, sas[0].GetEmail())
}

// deleteSecret deletes the proxy's secret when it is the proxy's: made by this provider, and of the owner
// (and proxy) the context expects. A missing one is deleted.
func (b *Backend) deleteSecret(ctx context.Context, p *project, zone, name string) error {
	obj := secretObject(p.id, zone, name)
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		sec, err := p.secrets.GetSecret(ctx, &secretmanagerpb.GetSecretRequest{Name: secretName(p.id, zone, name)})
		if err != nil {
			if err = classify(obj, err); backend.IsNotFound(err) {
				return nil
			}
			return err
		}
		l := sec.GetLabels()
		if l[backend.LabelManagedBy] != backend.ManagedByValue || l[backend.LabelName] != name {
			return nil // not this provider's, nor this proxy's: nothing of it to delete
		}
		if !(backend.Ownership{Owner: backend.OwnershipOf(ctx).Owner}).Allows(l[backend.LabelOwner], "") {
			return nil // another owner's secret of this name is none of this proxy's
		}
		err = p.secrets.DeleteSecret(ctx, &secretmanagerpb.DeleteSecretRequest{Name: secretName(p.id, zone, name), Etag: sec.GetEtag()})
		if err = classify(obj, err); backend.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// serviceDisabled says whether Secret Manager refused because it is not enabled on the project: an ErrorInfo
// of reason SERVICE_DISABLED ("google.api.ErrorReason").
func serviceDisabled(err error) bool {
	var ae *apierror.APIError
	return errors.As(err, &ae) && ae.Reason() == "SERVICE_DISABLED"
}

// deleteOrphanSecret deletes a secret ListByTag listed as an orphan (list.go#Backend.listOrphanSecrets), by its
// id: the provider's, the context's owner's and proxy's, and its VM still gone. A missing one is deleted.
func (b *Backend) deleteOrphanSecret(ctx context.Context, p *project, id string) error {
	obj := fmt.Sprintf("gcp secret %s in project %s", id, p.id)
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		sec, err := p.secrets.GetSecret(ctx, &secretmanagerpb.GetSecretRequest{Name: "projects/" + p.id + "/secrets/" + id})
		if err != nil {
			if err = classify(obj, err); backend.IsNotFound(err) {
				return nil
			}
			return withSecretAdvice(err)
		}
		l := sec.GetLabels()
		zone, ok := secretZone(id, l[backend.LabelName])
		if l[backend.LabelManagedBy] != backend.ManagedByValue || !ok {
			return backend.Permanent(obj, "was not made by this provider for a proxy: not deleting it")
		}
		if err := ownedBy(backend.OwnershipOf(ctx), obj, l); err != nil {
			return err
		}
		_, err = p.instances.Get(ctx, &computepb.GetInstanceRequest{Project: p.id, Zone: zone, Instance: l[backend.LabelName]})
		if err = classify(instanceObject(p.id, zone, l[backend.LabelName]), err); err == nil {
			return backend.Permanent(obj, "is the secret of %s, which exists again: not deleting it", instanceObject(p.id, zone, l[backend.LabelName]))
		} else if !backend.IsNotFound(err) {
			return err
		}
		err = p.secrets.DeleteSecret(ctx, &secretmanagerpb.DeleteSecretRequest{Name: "projects/" + p.id + "/secrets/" + id, Etag: sec.GetEtag()})
		if err = classify(obj, err); backend.IsNotFound(err) {
			return nil
		}
		return withSecretAdvice(err)
	})
}
