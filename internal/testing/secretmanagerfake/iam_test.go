package secretmanagerfake

import (
	"context"
	"slices"
	"testing"

	"cloud.google.com/go/iam/apiv1/iampb"
	"cloud.google.com/go/secretmanager/apiv1/secretmanagerpb"
)

// S13: the provider's principal holds only the permissions it is given; each method needs its own.
func TestProviderPermissions(t *testing.T) {
	t.Parallel()
	all := []string{
		"secretmanager.secrets.create", "secretmanager.secrets.get", "secretmanager.secrets.delete",
		"secretmanager.secrets.setIamPolicy", "secretmanager.versions.add", "secretmanager.versions.access",
		"secretmanager.secrets.list",
	}
	ctx := context.Background()
	for _, missing := range all {
		t.Run("without "+missing, func(t *testing.T) {
			t.Parallel()
			held := slices.DeleteFunc(slices.Clone(all), func(p string) bool { return p == missing })
			s := New(Options{AdminToken: admin, AdminPermissions: held})
			t.Cleanup(s.Close)
			c := client(t, s, admin)
			const name = "projects/p/secrets/x"
			calls := map[string]func() error{
				"secretmanager.secrets.create": func() error { _, err := create(ctx, c, "x", nil); return err },
				"secretmanager.secrets.get": func() error {
					_, err := c.GetSecret(ctx, &secretmanagerpb.GetSecretRequest{Name: name})
					return err
				},
				"secretmanager.versions.add": func() error {
					_, err := c.AddSecretVersion(ctx, &secretmanagerpb.AddSecretVersionRequest{Parent: name, Payload: &secretmanagerpb.SecretPayload{Data: []byte("d")}})
					return err
				},
				"secretmanager.versions.access": func() error {
					_, err := c.AccessSecretVersion(ctx, &secretmanagerpb.AccessSecretVersionRequest{Name: name + "/versions/latest"})
					return err
				},
				"secretmanager.secrets.setIamPolicy": func() error {
					_, err := c.SetIamPolicy(ctx, &iampb.SetIamPolicyRequest{Resource: name, Policy: &iampb.Policy{}})
					return err
				},
				"secretmanager.secrets.delete": func() error {
					return c.DeleteSecret(ctx, &secretmanagerpb.DeleteSecretRequest{Name: name})
				},
				"secretmanager.secrets.list": func() error {
					_, err := c.ListSecrets(ctx, &secretmanagerpb.ListSecretsRequest{Parent: "projects/p"}).Next()
					return err
				},
			}
			// In this order every call but the one refused finds what it needs.
			for _, p := range []string{"secretmanager.secrets.create", "secretmanager.secrets.get", "secretmanager.versions.add",
				"secretmanager.versions.access", "secretmanager.secrets.setIamPolicy", "secretmanager.secrets.list", "secretmanager.secrets.delete"} {
				err := calls[p]()
				if p == missing {
					wantStatus(t, p, err, 403, "Permission '"+p+"' denied for resource")
					if p == "secretmanager.secrets.create" {
						return // nothing to go on with
					}
					continue
				}
				if p == "secretmanager.versions.access" && missing == "secretmanager.versions.add" {
					wantStatus(t, p+" of no version", err, 404, "not found") // the version was never added
					continue
				}
				if err != nil {
					t.Errorf("%s while holding it: %v", p, err)
				}
			}
		})
	}
}
