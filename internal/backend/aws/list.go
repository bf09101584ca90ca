package aws

import (
	"context"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// listPageSize is the largest page DescribeInstances serves: the fewest calls.
const listPageSize = 1000

// ListByTag lists each region's proxies of sel.Owner with one paged DescribeInstances filtered by tags,
// regions side by side; a region that fails is a failed scope beside what the others hold. The settings are
// not read (one more request per proxy): the instances carry none.
func (b *Backend) ListByTag(ctx context.Context, sel backend.Selector) ([]backend.Instance, error) {
	return backend.ListEach(ctx, b.Regions(), func(ctx context.Context, name string) backend.Listed {
		found, err := b.listRegion(ctx, name, sel.Owner)
		if err != nil {
			return backend.Listed{Failed: []backend.ScopeError{{Backend: Kind, Scope: name, Err: err}}}
		}
		return backend.Listed{Found: found}
	})
}

func (b *Backend) listRegion(ctx context.Context, name, owner string) ([]backend.Instance, error) {
	r, err := b.clients(ctx, name)
	if err != nil {
		return nil, err
	}
	// No retry of the provider's own here: the SDK's retryer has retried throttling and dropped connections,
	// and a region still failing is reported as a failed scope now, not after the data source's timeout.
	var found []backend.Instance
	err = func() error {
		pages := ec2.NewDescribeInstancesPaginator(r.ec2, &ec2.DescribeInstancesInput{
			MaxResults: awssdk.Int32(listPageSize),
			Filters: []ec2types.Filter{
				{Name: awssdk.String("tag:" + backend.LabelManagedBy), Values: []string{backend.ManagedByValue}},
				{Name: awssdk.String("tag:" + backend.LabelOwner), Values: []string{owner}},
				{Name: awssdk.String("instance-state-name"), Values: liveStates},
			},
		})
		for pages.HasMorePages() {
			out, err := pages.NextPage(ctx)
			if err != nil {
				return classify("aws instances in region "+name, err)
			}
			for _, res := range out.Reservations {
				for i := range res.Instances {
					found = append(found, toInstance(name, &res.Instances[i]))
				}
			}
		}
		return nil
	}()
	return found, err
}
