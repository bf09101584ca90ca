package provider

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// What egress_backends says of the owner's proxies on each target: those that serve through only some of
// their instances (State Degraded), and why their listing or reading fell short, as data.

// proxyReadsAtOnce bounds the Gets one read of egress_backends runs side by side, as Terraform's own
// parallelism bounds the refreshes of the proxies.
const proxyReadsAtOnce = 4

// proxiesReadTimeout bounds the listing and the reads of one egress_backends: a scope or a proxy still
// failing then is reported in proxy_errors with its last error, and the data source, which a check block
// reads on every plan, does not wait out a refresh's five minutes for it.
const proxiesReadTimeout = time.Minute

type degradedProxyModel struct {
	ID               types.String           `tfsdk:"id"`
	Name             types.String           `tfsdk:"name"`
	UnhealthyMembers []unhealthyMemberModel `tfsdk:"unhealthy_members"`
}

type unhealthyMemberModel struct {
	Name   types.String `tfsdk:"name"`
	Scope  types.String `tfsdk:"scope"`
	Reason types.String `tfsdk:"reason"`
}

// degradedAttributes are the attributes of one target of egress_backends that report the owner's proxies there.
func degradedAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"degraded_proxies": schema.ListNestedAttribute{Computed: true,
			MarkdownDescription: "The proxies of the provider's `owner` on this target whose `state` is `Degraded`: they serve through their " +
				"address, but some of their `members` do not (the warning a refresh of each gives). Sorted by id; empty when none is. " +
				"Each running proxy is read as its refresh reads it, since only that read asks the health checks.",
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"id":   schema.StringAttribute{Computed: true, MarkdownDescription: "The proxy's id, as `egress_proxy.id`."},
				"name": schema.StringAttribute{Computed: true, MarkdownDescription: "The proxy's name."},
				"unhealthy_members": schema.ListNestedAttribute{Computed: true, MarkdownDescription: "Its members that do not serve, in the order of its `members`.",
					NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
						"name":   schema.StringAttribute{Computed: true, MarkdownDescription: "The member's own VM or pod."},
						"scope":  schema.StringAttribute{Computed: true, MarkdownDescription: "Where it runs: a zone, an availability zone, a host."},
						"reason": schema.StringAttribute{Computed: true, MarkdownDescription: "Why it does not serve, in the backend's words."},
					}}},
			}}},
		"proxy_errors": schema.ListAttribute{Computed: true, ElementType: types.StringType,
			MarkdownDescription: "Why `degraded_proxies` may be incomplete: each scope of this target whose proxies could not be listed, and each " +
				"proxy that could not be read, with the reason and its error class. Empty when every proxy was read."},
	}
}

// targetProxies is what one target of a backend reports of the owner's proxies.
type targetProxies struct {
	degraded []degradedProxyModel
	errors   []types.String
}

// proxiesByTarget lists the owner's proxies on kind as egress_proxy_orphans does, reads back each that runs
// (the listing does not ask the health checks: gcp's counts a running VM as serving, aws's reads no member),
// and files the Degraded ones and every failure under the target they belong to, among targets (those the
// health check reported).
func (d *providerData) proxiesByTarget(ctx context.Context, kind backend.Kind, targets []string) map[string]*targetProxies {
	out := make(map[string]*targetProxies, len(targets))
	for _, t := range targets {
		out[t] = &targetProxies{degraded: []degradedProxyModel{}, errors: []types.String{}}
	}
	fail := func(on []string, text string) {
		for _, t := range on {
			out[t].errors = append(out[t].errors, types.StringValue(text))
		}
	}
	listed, failed := d.listOwned(ctx, []string{string(kind)})
	for _, f := range failed {
		fail(targetsOfScope(f.Scope, targets), scopeFailureText(f))
	}
	read := d.readRunning(ctx, kind, listed)
	for i, inst := range listed {
		on := targetsOf(inst.ID.Target, targets)
		switch r := read[i]; {
		case r.err != nil:
			fail(on, fmt.Sprintf("proxy %s could not be read: %v (class %s)", inst.ID, r.err, backend.ClassOf(r.err)))
		case r.inst.State == backend.StateDegraded:
			for _, t := range on {
				out[t].degraded = append(out[t].degraded, degradedFrom(r.inst))
			}
		}
	}
	return out
}

// readResult is one listed proxy read back: its instance, or why it could not be read. A proxy that is not
// running, or that is gone since the listing, reads as the zero value.
type readResult struct {
	inst backend.Instance
	err  error
}

// readRunning reads back, proxyReadsAtOnce at a time, each listed proxy that runs: a proxy that is not
// Running or Degraded has no member that serves, or none yet.
func (d *providerData) readRunning(ctx context.Context, kind backend.Kind, listed []backend.Instance) []readResult {
	results := make([]readResult, len(listed))
	b, err := d.registry.Backend(ctx, kind)
	if err != nil {
		// The listing failed as a whole for the same reason, and says so: it listed nothing to read.
		return results
	}
	slots := make(chan struct{}, proxyReadsAtOnce)
	var wg sync.WaitGroup
	for i, inst := range listed {
		if inst.State != backend.StateRunning && inst.State != backend.StateDegraded {
			continue
		}
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			got, err := getRetried(ctx, b, inst.ID)
			switch {
			case backend.IsNotFound(err):
				// Deleted since the listing: nothing serves there to be degraded.
			case err != nil:
				results[i].err = err
			default:
				results[i].inst = got
			}
		})
	}
	wg.Wait()
	return results
}

func degradedFrom(inst backend.Instance) degradedProxyModel {
	m := degradedProxyModel{ID: types.StringValue(inst.ID.String()), Name: types.StringValue(inst.Name), UnhealthyMembers: []unhealthyMemberModel{}}
	for _, mem := range inst.Members {
		if !mem.Healthy {
			m.UnhealthyMembers = append(m.UnhealthyMembers, unhealthyMemberModel{
				Name: types.StringValue(mem.Name), Scope: types.StringValue(mem.Scope), Reason: types.StringValue(mem.Reason),
			})
		}
	}
	return m
}

// targetsOf is where a proxy on target is reported: that target's entry, else the backend's entry for all of
// it ("*", a backend without a health check), else every entry, so that no proxy goes unreported.
func targetsOf(target string, targets []string) []string {
	for _, want := range []string{target, "*"} {
		for _, t := range targets {
			if t == want {
				return []string{t}
			}
		}
	}
	return targets
}

// targetsOfScope is where a scope that could not be listed is reported. Backends name a failed scope by its
// target, alone or followed by what within it failed ("proj-a/us-central1-b", "proj-a forwarding rules",
// "cluster/namespace"); a scope that names no target (a backend that failed as a whole: "*") leaves every
// target's list incomplete.
func targetsOfScope(scope string, targets []string) []string {
	best := ""
	for _, t := range targets {
		if t == scope || strings.HasPrefix(scope, t+"/") || strings.HasPrefix(scope, t+" ") {
			if len(t) > len(best) {
				best = t
			}
		}
	}
	if best == "" {
		return targetsOf(scope, targets)
	}
	return []string{best}
}
