package gcp

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// listPageSize is the largest page the API serves: the fewest calls.
const listPageSize = 500

// ListByTag lists each project's proxies of sel.Owner with one paged aggregatedList and a label filter.
// A zone that answers with a warning other than NO_RESULTS_ON_PAGE, or a project that fails, is a failed scope.
func (b *Backend) ListByTag(ctx context.Context, sel backend.Selector) ([]backend.Instance, error) {
	ids := b.Projects()
	type result struct {
		found  []backend.Instance
		failed []backend.ScopeError
	}
	results := make([]result, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			found, failed := b.listProject(ctx, id, sel.Owner)
			results[i] = result{found, failed}
		}()
	}
	wg.Wait()
	var all []backend.Instance
	var failed []backend.ScopeError
	for _, r := range results {
		all = append(all, r.found...)
		failed = append(failed, r.failed...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].ID.String() < all[j].ID.String() })
	return all, backend.ListErrorOf(failed)
}

// labelFilter selects the provider's instances of one owner. Label values are lowercase letters, digits,
// '-' and '_' (checked by the provider), so quoting them is enough.
func labelFilter(owner string) string {
	return fmt.Sprintf(`(labels.%s = "%s") AND (labels.%s = "%s")`, backend.LabelManagedBy, backend.ManagedByValue, backend.LabelOwner, owner)
}

func (b *Backend) listProject(ctx context.Context, id, owner string) ([]backend.Instance, []backend.ScopeError) {
	fail := func(scope string, err error) []backend.ScopeError {
		return []backend.ScopeError{{Backend: backend.KindGCP, Scope: scope, Err: err}}
	}
	p, err := b.clients(ctx, id)
	if err != nil {
		return nil, fail(id, err)
	}
	var found []backend.Instance
	var failed []backend.ScopeError
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		found, failed = nil, nil
		it := p.instances.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{
			Project: id, Filter: proto.String(labelFilter(owner)), MaxResults: proto.Uint32(listPageSize),
		})
		for {
			pair, err := it.Next()
			if errors.Is(err, iterator.Done) {
				return nil
			}
			if err != nil {
				return classify("gcp instances in project "+id, err)
			}
			scope := id + "/" + strings.TrimPrefix(pair.Key, "zones/")
			if w := pair.Value.GetWarning(); w != nil && w.GetCode() != "NO_RESULTS_ON_PAGE" {
				failed = append(failed, backend.ScopeError{Backend: backend.KindGCP, Scope: scope,
					Err: backend.Transient("gcp zone "+scope, "%s: %s", w.GetCode(), w.GetMessage())})
			}
			for _, in := range pair.Value.GetInstances() {
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
	return found, failed
}
