package provider

import (
	"errors"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// NotFound means "deleted outside Terraform" only for an object that existed: on Read, Update and Delete. A
// create that meets NotFound is missing where the proxy goes, and its advice must say so, whatever backend
// classified it.
func TestBackendErrorDiagnosticFitsTheOperation(t *testing.T) {
	t.Parallel()
	const deletedOutside = "deleted outside Terraform"
	notFound := backend.NotFound("kubernetes ConfigMap team-a/p1 on cluster main", `namespaces "team-a" not found`)
	tests := map[string]struct {
		operation   string
		err         error
		want, never []string
	}{
		"create": {"create", notFound,
			[]string{"Egress proxy placement not found", "Error class: NotFound", `namespaces "team-a" not found`, "does not exist", "Create it first"},
			[]string{deletedOutside, "create it again"}},
		"read":   {"read", notFound, []string{"Egress proxy not found", deletedOutside}, nil},
		"update": {"update", notFound, []string{"Egress proxy not found", deletedOutside}, nil},
		"delete": {"delete", notFound, []string{"Egress proxy not found", deletedOutside}, nil},
		// The backend's own advice wins over the class's, on create as elsewhere.
		"create with the backend's advice": {"create", &backend.Error{Class: backend.ClassPermanent, Object: "namespace team-a on cluster main",
			Err: errors.New("does not exist"), Advice: "Create namespace team-a first."}, []string{"Create namespace team-a first."}, []string{deletedOutside}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := backendErrorDiagnostic(tc.operation, "egress_proxy p1", tc.err)
			text := d.Summary() + "\n" + d.Detail()
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("diagnostic lacks %q:\n%s", w, text)
				}
			}
			for _, n := range tc.never {
				if strings.Contains(text, n) {
					t.Errorf("diagnostic says %q, which does not fit a %s:\n%s", n, tc.operation, text)
				}
			}
		})
	}
}
