package gcp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"cloud.google.com/go/secretmanager/apiv1/secretmanagerpb"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// listPageSize is the largest page the API serves: the fewest calls.
const listPageSize = 500

// ListByTag lists each project's proxies of sel.Owner with one paged aggregatedList and a label filter.
// A zone that answers with a warning other than NO_RESULTS_ON_PAGE, or a project that fails, is a failed scope.
func (b *Backend) ListByTag(ctx context.Context, sel backend.Selector) ([]backend.Instance, error) {
	return backend.ListEach(ctx, b.Projects(), func(ctx context.Context, id string) backend.Listed {
		found, failed := b.listProject(ctx, id, sel.Owner)
		return backend.Listed{Found: found, Failed: failed}
	})
}

// labelFilter selects the provider's instances of one owner. Label values are lowercase letters, digits,
// '-' and '_' (checked by the provider), so quoting them is enough.
func labelFilter(owner string) string {
	return fmt.Sprintf(`(labels.%s = "%s") AND (labels.%s = "%s")`, backend.LabelManagedBy, backend.ManagedByValue, backend.LabelOwner, owner)
}

func (b *Backend) listProject(ctx context.Context, id, owner string) ([]backend.Instance, []backend.ScopeError) {
	fail := func(scope string, err error) []backend.ScopeError {
		return []backend.ScopeError{{Backend: Kind, Scope: scope, Err: err}}
	}
	p, err := b.clients(ctx, id)
	if err != nil {
		return nil, fail(id, err)
	}
	var found []backend.Instance
	var failed []backend.ScopeError
	// The VMs of proxies of several, by the proxy's id: each such proxy is listed once, under its own id.
	var members map[backend.ProviderID][]*computepb.Instance
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		found, failed, members = nil, nil, map[backend.ProviderID][]*computepb.Instance{}
		it := p.instances.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{
			Project: id, Filter: proto.String(labelFilter(owner)), MaxResults: proto.Uint32(listPageSize),
		})
		for {
			// The client's paged lists send their requests without the context: a cancelled list stops here,
			// between pages, instead of listing on.
			if err := ctx.Err(); err != nil {
				return classify("gcp instances in project "+id, err)
			}
			pair, err := it.Next()
			if errors.Is(err, iterator.Done) {
				return nil
			}
			if err != nil {
				return classify("gcp instances in project "+id, err)
			}
			scope := id + "/" + strings.TrimPrefix(pair.Key, "zones/")
			if w := pair.Value.GetWarning(); w != nil && w.GetCode() != "NO_RESULTS_ON_PAGE" {
				failed = append(failed, backend.ScopeError{Backend: Kind, Scope: scope,
					Err: backend.Transient("gcp zone "+scope, "%s: %s", w.GetCode(), w.GetMessage())})
			}
			for _, in := range pair.Value.GetInstances() {
				if zone, name, _, ok := memberOf(in); ok {
					pid := backend.ProviderID{Backend: Kind, Target: id, Scope: zone, Name: name}
					members[pid] = append(members[pid], in)
					continue
				}
				inst, err := toInstance(id, in)
				if err != nil {
					continue // the filter only lets managed instances through; a forged label is not ours
				}
				found = append(found, inst)
			}
		}
	})
	if err != nil {
		return nil, fail(id, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fail(id, err)
	}
	found, memberIDs, err := b.listHA(ctx, p, owner, found, members)
	if err != nil {
		failed = append(failed, fail(id+" forwarding rules", err)...)
	}
	kept, err := b.listKeptAddresses(ctx, p, owner)
	if err != nil {
		failed = append(failed, fail(id+" addresses", err)...)
	}
	left, err := b.listOrphanSecrets(ctx, p, owner, append(found, memberIDs...), failed)
	if err != nil {
		failed = append(failed, fail(id+" secrets", err)...)
	}
	return append(append(found, kept...), left...), failed
}

// listKeptAddresses lists, with one paged aggregatedList and the same label filter, the static addresses
// the backend reserved for the owner's proxies that no instance uses: kept for a successor that has not come
// (see DeleteForReplacement), or left by a create that failed. Each is reported as an instance named after
// the address, in state Stopped, so the orphan list shows what still costs money.
func (b *Backend) listKeptAddresses(ctx context.Context, p *project, owner string) ([]backend.Instance, error) {
	var kept []backend.Instance
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		kept = nil
		it := p.addresses.AggregatedList(ctx, &computepb.AggregatedListAddressesRequest{
			Project: p.id, Filter: proto.String(labelFilter(owner)), MaxResults: proto.Uint32(listPageSize),
		})
		for {
			// The client's paged lists send their requests without the context: a cancelled list stops here,
			// between pages, instead of listing on.
			if err := ctx.Err(); err != nil {
				return classify("gcp addresses in project "+p.id, err)
			}
			pair, err := it.Next()
			if errors.Is(err, iterator.Done) {
				return nil
			}
			if err != nil {
				return classify("gcp addresses in project "+p.id, err)
			}
			for _, a := range pair.Value.GetAddresses() {
				if a.GetStatus() == "IN_USE" || len(a.GetUsers()) > 0 {
					continue // its instance is listed, or belongs to someone's state
				}
				kept = append(kept, keptAddress(p.id, a))
			}
		}
	})
	return kept, err
}

func keptAddress(projectID string, a *computepb.Address) backend.Instance {
	region := lastSegment(a.GetRegion())
	inst := backend.Instance{
		ID:            backend.ProviderID{Backend: Kind, Target: projectID, Scope: region, Name: a.GetName()},
		Name:          a.GetName(),
		UID:           a.GetLabels()[backend.LabelUID],
		Owner:         a.GetLabels()[backend.LabelOwner],
		Labels:        backend.UserLabels(a.GetLabels()),
		State:         backend.StateStopped,
		EgressAddress: a.GetAddress(),
		Notes: []string{fmt.Sprintf("%s (%s) is attached to no proxy: a replacement named %s adopts it; release it if none comes",
			addressObject(projectID, region, a.GetName()), a.GetAddress(), a.GetLabels()[backend.LabelName])},
	}
	if t, err := time.Parse(time.RFC3339, a.GetCreationTimestamp()); err == nil {
		inst.CreatedAt = t
	}
	return inst
}

// listOrphanSecrets lists, with one paged list and the same labels as a Secret Manager filter, the owner's
// secrets whose VM is gone: deleted behind the provider's back, or a create that failed between the secret and
// the VM. Each is reported as an instance named after the secret, gcp/<project>/secrets/<secret id>, in state
// Stopped, so the orphan list shows it and the GC action's Delete of that id deletes it
// (delete.go#Backend.deleteOrphanSecret). A secret of a VM listed in found, or in a zone whose VMs could not be
// listed (failed), is not an orphan. A project where Secret Manager is not enabled has no secret to list.
func (b *Backend) listOrphanSecrets(ctx context.Context, p *project, owner string, found []backend.Instance, failed []backend.ScopeError) ([]backend.Instance, error) {
	live := map[string]bool{}
	for _, in := range found {
		live[secretID(in.ID.Scope, in.ID.Name)] = true
	}
	for _, f := range failed {
		live[strings.TrimPrefix(f.Scope, p.id+"/")] = true // a zone: its secrets cannot be told orphans
	}
	var left []backend.Instance
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		left = nil
		it := p.secrets.ListSecrets(ctx, &secretmanagerpb.ListSecretsRequest{Parent: "projects/" + p.id, Filter: secretLabelFilter(owner)})
		for {
			sec, err := it.Next()
			if errors.Is(err, iterator.Done) {
				return nil
			}
			if serviceDisabled(err) {
				left = nil
				return nil
			}
			if err != nil {
				return withSecretAdvice(classify("gcp secrets in project "+p.id, err))
			}
			id := lastSegment(sec.GetName())
			zone, ok := secretZone(id, sec.GetLabels()[backend.LabelName])
			if !ok || live[id] || live[zone] {
				continue // not of a proxy's form, its VM runs, or its zone could not be listed
			}
			left = append(left, orphanSecret(p.id, zone, sec))
		}
	})
	return left, err
}

// secretLabelFilter is labelFilter in Secret Manager's filter syntax ("Filter lists of secrets and secret
// versions": labels.KEY=VALUE, joined by AND).
func secretLabelFilter(owner string) string {
	return fmt.Sprintf(`labels.%s="%s" AND labels.%s="%s"`, backend.LabelManagedBy, backend.ManagedByValue, backend.LabelOwner, owner)
}

// secretZone reads the zone back from a proxy's secret id (secretID: egress-proxy-<zone>-<name>), given the
// proxy's name from its labels.
func secretZone(id, name string) (string, bool) {
	rest, ok := strings.CutPrefix(id, secretIDPrefix)
	if !ok || name == "" {
		return "", false
	}
	zone, ok := strings.CutSuffix(rest, "-"+name)
	return zone, ok && zone != "" && !isRegion(zone)
}

func orphanSecret(projectID, zone string, sec *secretmanagerpb.Secret) backend.Instance {
	l := sec.GetLabels()
	id := lastSegment(sec.GetName())
	inst := backend.Instance{
		ID:     backend.ProviderID{Backend: Kind, Target: projectID, Scope: secretScope, Name: id},
		Name:   id,
		UID:    l[backend.LabelUID],
		Owner:  l[backend.LabelOwner],
		Labels: backend.UserLabels(l),
		State:  backend.StateStopped,
		Notes: []string{fmt.Sprintf("%s holds the password hash and TLS key of proxy %s, whose VM in %s is gone; "+
			"a new proxy of that name in that zone is refused while it stays: delete it (the egress_proxy_gc action does)",
			secretObject(projectID, zone, l[backend.LabelName]), l[backend.LabelName], zone)},
	}
	if t := sec.GetCreateTime(); t != nil {
		inst.CreatedAt = t.AsTime()
	}
	return inst
}

// listHA adds to found each proxy of several VMs, once, under its own id: from its members (grouped by the
// proxy their metadata names) and from the owner's forwarding rules (one paged aggregatedList), so that a
// forwarding rule whose VMs are gone is listed too, and its id deletes it. It returns, apart, one entry per
// member VM, whose secrets are no orphans.
func (b *Backend) listHA(ctx context.Context, p *project, owner string, found []backend.Instance,
	members map[backend.ProviderID][]*computepb.Instance) ([]backend.Instance, []backend.Instance, error) {
	rules := map[backend.ProviderID]*computepb.ForwardingRule{}
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		clear(rules)
		it := p.forwardingRules.AggregatedList(ctx, &computepb.AggregatedListForwardingRulesRequest{
			Project: p.id, Filter: proto.String(labelFilter(owner)), MaxResults: proto.Uint32(listPageSize),
		})
		for {
			if err := ctx.Err(); err != nil {
				return classify("gcp forwarding rules in project "+p.id, err)
			}
			pair, err := it.Next()
			if errors.Is(err, iterator.Done) {
				return nil
			}
			if err != nil {
				return classify("gcp forwarding rules in project "+p.id, err)
			}
			for _, fr := range pair.Value.GetForwardingRules() {
				if m := haDescriptionRE.FindStringSubmatch(fr.GetDescription()); m != nil && m[1] == fr.GetName() {
					rules[backend.ProviderID{Backend: Kind, Target: p.id, Scope: m[2], Name: m[1]}] = fr
				}
			}
		}
	})
	var memberIDs []backend.Instance
	ids := map[backend.ProviderID]bool{}
	for pid, vms := range members {
		ids[pid] = true
		for _, in := range vms {
			memberIDs = append(memberIDs, backend.Instance{ID: backend.ProviderID{Backend: Kind, Target: p.id, Scope: lastSegment(in.GetZone()), Name: in.GetName()}})
		}
	}
	for pid := range rules {
		ids[pid] = true
	}
	for pid := range ids {
		vms := members[pid]
		health := map[string]string{}
		for _, in := range vms {
			if in.GetStatus() == "RUNNING" {
				// A listing asks no backend service: a running member counts as serving.
				health[in.GetName()+"@"+lastSegment(in.GetZone())] = "HEALTHY"
			}
		}
		found = append(found, haInstance(p.id, pid, vms, rules[pid], health))
	}
	return found, memberIDs, err
}
