package provider

import (
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
)

// gcpDocumentedRole is the custom role the docs tell users to grant the provider's account for the gcp
// backend, read from examples/: the gcp acceptance tests give the fakes exactly these permissions, so a call
// the role does not cover fails them.
func gcpDocumentedRole(t *testing.T) []string {
	t.Helper()
	role, err := computefake.DocumentedRole()
	if err != nil {
		t.Fatal(err)
	}
	return role.IncludedPermissions
}
