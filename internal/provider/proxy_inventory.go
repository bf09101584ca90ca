package provider

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// The inventory of the owner's proxies, shared by everything that looks for leaks: the egress_proxy_orphans
// data source, the egress_proxy list resource (terraform query) and the egress_proxy_gc action. One listing,
// one definition of an orphan, one way to report the scopes that could not be listed.

// listOwned asks every selected backend (every configured one when kinds is empty) for the owner's instances.
// A backend that fails as a whole is one failed scope; a backend that fails in part reports its scopes.
func (d *providerData) listOwned(ctx context.Context, kinds []string) ([]backend.Instance, []backend.ScopeError) {
	selected := d.registry.Configured()
	if len(kinds) > 0 {
		selected = selected[:0:0]
		for _, k := range kinds {
			selected = append(selected, backend.Kind(k))
		}
	}
	var (
		all    []backend.Instance
		failed []backend.ScopeError
	)
	for _, kind := range selected {
		b, err := d.registry.Backend(ctx, kind)
		if err != nil {
			failed = append(failed, backend.ScopeError{Backend: kind, Scope: "*", Err: err})
			continue
		}
		var (
			list    []backend.Instance
			partial *backend.ListError
		)
		err = backend.Retry(ctx, backend.DefaultBackoff, func(ctx context.Context) (err error) {
			list, err = b.ListByTag(ctx, backend.Selector{Owner: d.owner})
			if errors.As(err, &partial) {
				return nil // what the other scopes hold is still worth having; partial.Failed is reported
			}
			partial = nil
			return err
		})
		if err != nil {
			failed = append(failed, backend.ScopeError{Backend: kind, Scope: "*", Err: err})
			continue
		}
		if partial != nil {
			failed = append(failed, partial.Failed...)
		}
		all = append(all, list...)
	}
	return all, failed
}

// elementsReader is a list or a set of the configuration, read into a Go slice.
type elementsReader interface {
	ElementsAs(ctx context.Context, target any, allowUnhandled bool) diag.Diagnostics
}

// knownIDSet reads the known_ids a configuration gives (a list or a set) as the set selectOrphans looks up.
func knownIDSet(ctx context.Context, ids elementsReader) (map[string]bool, diag.Diagnostics) {
	var list []string
	diags := ids.ElementsAs(ctx, &list, false)
	known := make(map[string]bool, len(list))
	for _, id := range list {
		known[id] = true
	}
	return known, diags
}

// minAgeOr is the configured min_age, or def when it is unset. The value was validated at plan time.
func minAgeOr(minAge types.String, def time.Duration) time.Duration {
	if minAge.IsNull() {
		return def
	}
	d, _ := time.ParseDuration(minAge.ValueString())
	return d
}

// selectOrphans keeps instances that no configuration knows and that are old enough not to be in flight.
// An instance whose creation time the backend could not tell is kept: it cannot be proved young.
func selectOrphans(all []backend.Instance, known map[string]bool, minAge time.Duration, now time.Time) []backend.Instance {
	var out []backend.Instance
	for _, inst := range all {
		if known[inst.ID.String()] {
			continue
		}
		if !oldEnough(inst, minAge, now) {
			continue
		}
		out = append(out, inst)
	}
	sortInstances(out)
	return out
}

func oldEnough(inst backend.Instance, minAge time.Duration, now time.Time) bool {
	return inst.CreatedAt.IsZero() || now.Sub(inst.CreatedAt) >= minAge
}

func sortInstances(list []backend.Instance) {
	sort.Slice(list, func(i, j int) bool { return list[i].ID.String() < list[j].ID.String() })
}

// scopeFailureText is one failed scope as every consumer shows it: the scope, the reason and its class.
// getRetried reads one proxy as a refresh does: Get, tried again on the backend's transient errors. A
// resource's Read, a listed proxy read for import, and egress_backends' reads of running proxies all read so.
func getRetried(ctx context.Context, b backend.Backend, id backend.ProviderID) (backend.Instance, error) {
	var inst backend.Instance
	err := backend.Retry(ctx, backend.DefaultBackoff, func(ctx context.Context) (err error) {
		inst, err = b.Get(ctx, id)
		return err
	})
	return inst, err
}

func scopeFailureText(f backend.ScopeError) string {
	return fmt.Sprintf("%s (class %s)", f.Error(), backend.ClassOf(f.Err))
}

// incompleteListDiagnostic is the warning every consumer gives when scopes could not be listed: what is
// missing, why, and what to do (again names the consumer's own retry).
func incompleteListDiagnostic(failed []backend.ScopeError, again string) diag.Diagnostic {
	lines := make([]string, len(failed))
	for i, f := range failed {
		lines[i] = "- " + scopeFailureText(f)
	}
	return diag.NewWarningDiagnostic("Orphan list is incomplete", fmt.Sprintf(
		"%d scope(s) could not be listed, so proxies there are not in the result:\n%s\n\n"+
			"Check those backends (the egress_backends data source reports their health), then %s.",
		len(failed), strings.Join(lines, "\n"), again))
}

// ageText is an instance's age as people say it: the largest whole unit, "age unknown" when the backend
// could not tell.
func ageText(created, now time.Time) string {
	if created.IsZero() {
		return "age unknown"
	}
	age := now.Sub(created)
	switch {
	case age >= 48*time.Hour:
		return fmt.Sprintf("age %dd", int(age/(24*time.Hour)))
	case age >= time.Hour:
		return fmt.Sprintf("age %dh", int(age/time.Hour))
	case age >= time.Minute:
		return fmt.Sprintf("age %dm", int(age/time.Minute))
	default:
		return fmt.Sprintf("age %ds", max(0, int(age/time.Second)))
	}
}

// displayName is how a listed proxy reads in `terraform query` and in the action's progress: its id, its user
// labels and its age, e.g. "kvm/local/egress-3f9a (team=ci, age 3h)".
func displayName(inst backend.Instance, now time.Time) string {
	user := backend.UserLabels(inst.Labels)
	keys := make([]string, 0, len(user))
	for k := range user {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys)+1)
	for _, k := range keys {
		parts = append(parts, k+"="+user[k])
	}
	parts = append(parts, ageText(inst.CreatedAt, now))
	return fmt.Sprintf("%s (%s)", inst.ID, strings.Join(parts, ", "))
}

// proxyFilter is what the list resource and the action select from the owner's proxies.
type proxyFilter struct {
	// kinds are the backends to list; every configured one when empty.
	kinds []string
	// orphanedOnly drops the proxies in known and those younger than minAge, as egress_proxy_orphans does.
	orphanedOnly bool
	known        map[string]bool
	minAge       time.Duration
	// labels must all be on a proxy, with these values, for it to be selected.
	labels map[string]string
}

// selectFrom applies the filter to a listing, sorted by id.
func (f proxyFilter) selectFrom(all []backend.Instance, now time.Time) []backend.Instance {
	candidates := all
	if f.orphanedOnly {
		candidates = selectOrphans(all, f.known, f.minAge, now)
	}
	var out []backend.Instance
	for _, inst := range candidates {
		if oldEnough(inst, f.minAge, now) && hasLabels(inst, f.labels) {
			out = append(out, inst)
		}
	}
	sortInstances(out)
	return out
}

func hasLabels(inst backend.Instance, want map[string]string) bool {
	user := backend.UserLabels(inst.Labels)
	for k, v := range want {
		if got, ok := user[k]; !ok || got != v {
			return false
		}
	}
	return true
}
