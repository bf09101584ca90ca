package gcp

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
)

// haPermissionScenario does everything the backend does to a proxy of several VMs, each step named: create,
// read, relabel, grow to a zone it did not use and shrink again, reconfigure, list and delete, with operations
// that take a while. It returns the first step's error.
func haPermissionScenario(t *testing.T, permissions []string) error {
	t.Helper()
	// The guests answer each metadata change of their VM, one VM at a time, as the metadata server plays one.
	var (
		fake    *computefake.Server
		guestMu sync.Mutex
	)
	fake, b := newTest(t, computefake.Options{Permissions: permissions, OperationLatency: 5 * time.Millisecond, OnOperationDone: func(op, target string) {
		if project, zone, name, ok := instanceOfLink(target); ok {
			guestMu.Lock()
			defer guestMu.Unlock()
			fake.MetadataInstance(project, zone, name)
			guest{url: fake.URL}.onDone(op, target)
		}
	}})
	ctx := ctxT(t)
	spec := haSpec("uid-ha-perm", 2) // two of the region's three zones: growing to three reaches the third
	id := backend.ProviderID{Backend: Kind, Target: testProject, Scope: "us-central1-b", Name: "web"}
	next := spec.Proxy
	next.AllowedDestinations = []string{".example.org"}
	steps := []struct {
		name string
		do   func() error
	}{
		{"create", func() error { _, err := b.Create(ctx, spec); return err }},
		{"get", func() error { _, err := b.Get(ctx, id); return err }},
		{"update labels", func() error {
			spec.Labels = map[string]string{"team": "sec"}
			_, err := b.Update(ctx, id, spec)
			return err
		}},
		{"grow to 3", func() error {
			optionsOf(spec.Placement).Instances = 3
			_, err := b.Update(ctx, id, spec)
			return err
		}},
		{"shrink to 2", func() error {
			optionsOf(spec.Placement).Instances = 2
			_, err := b.Update(ctx, id, spec)
			return err
		}},
		{"reconfigure", func() error { _, err := b.Reconfigure(ctx, id, next); return err }},
		{"list", func() error { _, err := b.ListByTag(ctx, backend.Selector{Owner: spec.Owner}); return err }},
		{"delete", func() error { return b.Delete(ctx, id) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

// The permissions the load balancer of a proxy of several VMs needs are each needed by one of its operations,
// and the role is enough for all of them: without any one, a step fails naming it and the role file.
func TestDocumentedRoleIsExactlyEnoughForSeveralInstances(t *testing.T) {
	t.Parallel()
	role := documentedPermissions(t)
	t.Run("the whole role", func(t *testing.T) {
		t.Parallel()
		if err := haPermissionScenario(t, role); err != nil {
			t.Fatalf("with %s: %v", RoleFile, err)
		}
	})
	for _, missing := range role {
		if !strings.HasPrefix(missing, "compute.regionHealthChecks.") && !strings.HasPrefix(missing, "compute.instanceGroups.") &&
			!strings.HasPrefix(missing, "compute.regionBackendServices.") && !strings.HasPrefix(missing, "compute.forwardingRules.") &&
			missing != "compute.instances.use" {
			continue // the single VM's permissions: TestDocumentedRoleIsExactlyEnough
		}
		t.Run("without "+missing, func(t *testing.T) {
			t.Parallel()
			err := haPermissionScenario(t, slices.DeleteFunc(slices.Clone(role), func(p string) bool { return p == missing }))
			if err == nil {
				t.Fatalf("everything succeeded without %s: the role grants more than a proxy of several instances needs", missing)
			}
			said := err.Error() + " " + adviceIn(err)
			if !strings.Contains(said, "'"+missing+"'") || !strings.Contains(said, RoleFile) {
				t.Errorf("the error does not name %s and %s: %s", missing, RoleFile, said)
			}
		})
	}
}
