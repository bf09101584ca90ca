package gcp

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
)

// documentedPermissions is what the role users are told to grant (RoleFile), read from the repository: every
// test of this package that builds a fake gives the provider's account exactly these.
func documentedPermissions(tb testing.TB) []string {
	tb.Helper()
	role, err := computefake.DocumentedRole()
	if err != nil {
		tb.Fatal(err)
	}
	return role.IncludedPermissions
}

// The role file and the backend's own list agree: a permission the code maps a call to is in the file, and the
// file grants nothing the code does not map. The computefake constant and RoleFile name the same file.
func TestRoleFileListsWhatTheBackendNeeds(t *testing.T) {
	t.Parallel()
	if computefake.RoleFile != RoleFile {
		t.Fatalf("computefake reads %s, the advice names %s", computefake.RoleFile, RoleFile)
	}
	got := slices.Sorted(slices.Values(documentedPermissions(t)))
	if want := Permissions(); !slices.Equal(got, want) {
		t.Fatalf("%s lists\n%v\nthe backend maps its calls to\n%v", RoleFile, got, want)
	}
}

// permissionScenario does everything the backend does to a project, each step named: a proxy with a service
// account (its secrets in Secret Manager), a static address, network tags and an image of the project,
// waited for until its guest applies the config, with operations that take a while, as they do; read, relabelled, reconfigured, listed and deleted; then the
// health check. It returns the first step's error.
func permissionScenario(t *testing.T, permissions []string) error {
	t.Helper()
	g := &guest{}
	fake, _, b := newTestWithSecrets(t, computefake.Options{Permissions: permissions, OperationLatency: 20 * time.Millisecond, OnOperationDone: func(op, target string) { g.onDone(op, target) }})
	g.url = fake.URL
	ctx := ctxT(t)
	spec := testSpec("uid-perm", "us-central1-a")
	spec.Placement.Options = &Options{
		ServiceAccount: "proxy@" + testProject + ".iam.gserviceaccount.com", StaticEgressIP: true,
		NetworkTags: []string{"egress-proxy"}, Image: "projects/" + testProject + "/global/images/proxy-image", WaitForProxy: true,
	}
	fake.MetadataInstance(testProject, "us-central1-a", spec.Name)
	var inst backend.Instance
	next := spec.Proxy
	next.AllowedDestinations = []string{".example.org"}
	next.Users = []proxyconf.BasicAuth{{Username: "u", Password: "another-horse-battery"}}
	steps := []struct {
		name string
		do   func() error
	}{
		{"create", func() (err error) { inst, err = b.Create(ctx, spec); return err }},
		{"get", func() error { _, err := b.Get(ctx, inst.ID); return err }},
		{"update labels", func() error {
			spec.Labels = map[string]string{"team": "sec"}
			_, err := b.Update(ctx, inst.ID, spec)
			return err
		}},
		{"reconfigure", func() error { _, err := b.Reconfigure(ctx, inst.ID, next); return err }},
		{"list", func() error { _, err := b.ListByTag(ctx, backend.Selector{Owner: spec.Owner}); return err }},
		{"delete", func() error { return b.Delete(ctx, inst.ID) }},
		{"check", func() error {
			for _, h := range b.Check(ctx) {
				if !h.Healthy {
					return fmt.Errorf("%s: %s (missing: %s)", h.Reason, h.Details[backend.DetailMessage], h.Details["missing_permissions"])
				}
			}
			return nil
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

// Everything the backend does succeeds with the documented role, and fails without any one of its permissions,
// with an error that names the permission and the role file: the role is no larger than the backend needs,
// and a permission the code needs but the file lacks fails the first half.
func TestDocumentedRoleIsExactlyEnough(t *testing.T) {
	t.Parallel()
	role := documentedPermissions(t)
	t.Run("the whole role", func(t *testing.T) {
		t.Parallel()
		if err := permissionScenario(t, role); err != nil {
			t.Fatalf("with %s: %v", RoleFile, err)
		}
	})
	for _, missing := range role {
		t.Run("without "+missing, func(t *testing.T) {
			t.Parallel()
			err := permissionScenario(t, slices.DeleteFunc(slices.Clone(role), func(p string) bool { return p == missing }))
			if err == nil {
				t.Fatalf("everything succeeded without %s: the role grants more than the backend needs", missing)
			}
			said := err.Error() + " " + adviceIn(err)
			if !strings.Contains(said, "'"+missing+"'") && !strings.Contains(said, " "+missing) {
				t.Errorf("the error does not name %s: %v", missing, err)
			}
			if !strings.Contains(said, RoleFile) {
				t.Errorf("the error does not point at %s: %s", RoleFile, said)
			}
			t.Logf("without %s: %v", missing, err)
		})
	}
}

// adviceIn gathers the advice of err and, for a list's error, of each scope that failed.
func adviceIn(err error) string {
	out := backend.AdviceOf(err)
	var le *backend.ListError
	if errors.As(err, &le) {
		for _, f := range le.Failed {
			out += " " + backend.AdviceOf(f.Err)
		}
	}
	return out
}

// A refusal for a missing permission is Permanent (no retry grants it) and says what to grant, from Compute
// Engine's and Secret Manager's words alike; other 403s keep their class and get no such advice.
func TestPermissionAdvice(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		message, permission string
	}{
		"compute":        {"Required 'compute.instances.create' permission for 'projects/p/zones/z/instances/x'", "compute.instances.create"},
		"act as":         {"Required 'iam.serviceAccounts.actAs' permission for 'projects/p/serviceAccounts/sa@p.iam.gserviceaccount.com'", "iam.serviceAccounts.actAs"},
		"secret manager": {"Permission 'secretmanager.secrets.create' denied for resource 'projects/p' (or it may not exist).", "secretmanager.secrets.create"},
		"other":          {"The caller does not have permission", ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := classify("obj", errors.New(tc.message))
			advice := backend.AdviceOf(err)
			if tc.permission == "" {
				if advice != "" {
					t.Fatalf("advice %q for a refusal naming no permission", advice)
				}
				return
			}
			if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(advice, tc.permission) || !strings.Contains(advice, RoleFile) {
				t.Fatalf("classify(%q) = %v, advice %q; want Permanent naming %s and %s", tc.message, err, advice, tc.permission, RoleFile)
			}
		})
	}
}

// egress_backends names what the account lacks, by testIamPermissions, as Degraded; when the question cannot be
// asked, the check goes on and says so, and a refused token stays Unauthorized.
func TestCheckNamesMissingPermissions(t *testing.T) {
	t.Parallel()
	role := documentedPermissions(t)
	lacking := slices.DeleteFunc(slices.Clone(role), func(p string) bool {
		return p == "compute.instances.create" || p == "secretmanager.secrets.create"
	})
	_, b := newTest(t, computefake.Options{Permissions: lacking})
	h := b.Check(ctxT(t))
	if len(h) != 1 || h[0].Healthy || h[0].Reason != backend.HealthDegraded ||
		h[0].Details[DetailMissingPermissions] != "compute.instances.create, secretmanager.secrets.create" ||
		!strings.Contains(h[0].Details[backend.DetailMessage], RoleFile) {
		t.Fatalf("Check lacking two permissions = %+v, want Degraded naming both and %s", h, RoleFile)
	}

	fake, b := newTest(t, computefake.Options{})
	if h := b.Check(ctxT(t)); !h[0].Healthy || h[0].Details["permissions"] != "all held" {
		t.Fatalf("Check with the role = %+v, want healthy, every permission held", h)
	}
	fake.AddFault(computefake.Fault{PathRE: regexp.MustCompile(`:testIamPermissions$`), Status: http.StatusForbidden, Reason: "forbidden"})
	if h := b.Check(ctxT(t)); !h[0].Healthy || !strings.HasPrefix(h[0].Details["permissions"], "not checked: ") {
		t.Fatalf("Check with Resource Manager refusing = %+v, want healthy, the permissions not checked", h)
	}

	_, wrong := newTest(t, computefake.Options{Token: "right"})
	wrong.projects[testProject].settings.AccessToken = "wrong"
	if h := wrong.Check(ctxT(t)); h[0].Reason != backend.HealthUnauthorized || !strings.Contains(h[0].Details[backend.DetailMessage], "testIamPermissions") {
		t.Fatalf("Check with a wrong token = %+v, want Unauthorized at the first request", h)
	}
}
