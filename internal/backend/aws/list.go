package aws

import (
	"context"
	"maps"
	"slices"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// listPageSize is the largest page DescribeInstances serves: the fewest calls.
const listPageSize = 1000

// ListByTag lists each region's proxies of sel.Owner with one paged DescribeInstances filtered by tags, and
// the leftovers of proxies whose instance is gone or was never launched with one paged DescribeSecurityGroups,
// one DescribeAddresses and one paged DescribeLogGroups (listLeftovers), so that nothing the backend made is
// lost. Regions side by side; a
// region that fails is a failed scope beside what the others hold. The settings are not read (one more
// request per proxy): the instances carry none.
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
	// A proxy of several instances is listed once: by its first (ha.go), or while its first is gone (none
	// live, or shutting down) by its live member of lowest k, as Get reads it (findProxy).
	var names []string
	seen := map[string]bool{}
	first := map[string]*ec2types.Instance{}
	standIn := map[string]*ec2types.Instance{}
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
					in := &res.Instances[i]
					proxy := tagMap(in.Tags)[tagName]
					if !seen[proxy] {
						seen[proxy] = true
						names = append(names, proxy)
					}
					switch {
					case memberOf(in) == 0:
						first[proxy] = in
					case standsInBefore(in, standIn[proxy]):
						standIn[proxy] = in
					}
				}
			}
		}
		return nil
	}()
	if err != nil {
		return nil, err
	}
	for _, proxy := range names {
		switch in := first[proxy]; {
		case in != nil && (!memberGone(in) || standIn[proxy] == nil):
			found = append(found, toInstance(name, in))
		case standIn[proxy] != nil:
			inst := toInstance(name, standIn[proxy])
			if inst.State == backend.StateRunning {
				inst.State = backend.StateDegraded
			}
			inst.Notes = append(inst.Notes, "its first instance is gone: the next apply of its configuration makes it again")
			found = append(found, inst)
		}
	}
	leftovers, err := b.listLeftovers(ctx, r, owner, found)
	return append(found, leftovers...), err
}

// listLeftovers lists what is left of the owner's proxies that have no live instance, one proxy in state
// Failed per name, so that deleting its id removes every part: a security group (a create that did not
// finish, its parameters beside it), an Elastic IP no instance uses (kept by a replacement whose
// successor never came) and the proxy's own CloudWatch Logs group. Each is found with one paged request per region; the time is the parts' tag.
func (b *Backend) listLeftovers(ctx context.Context, r *region, owner string, live []backend.Instance) ([]backend.Instance, error) {
	names := map[string]bool{}
	for _, inst := range live {
		names[inst.Name] = true
	}
	byName := map[string]*backend.Instance{}
	var order []string
	add := func(tags map[string]string, note string) {
		name := tags[tagName]
		if name == "" || names[name] {
			return
		}
		inst, seen := byName[name]
		if !seen {
			inst = &backend.Instance{
				ID: backend.ProviderID{Backend: Kind, Target: r.name, Name: name}, Name: name,
				UID: tags[backend.LabelUID], Owner: tags[backend.LabelOwner], Labels: userLabels(tags), State: backend.StateFailed,
				Placement: backend.Placement{Backend: Kind, Target: r.name, Options: &Options{}},
			}
			byName[name] = inst
			order = append(order, name)
		}
		inst.Notes = append(inst.Notes, note)
		if created, err := time.Parse(time.RFC3339, tags[tagCreated]); err == nil && (inst.CreatedAt.IsZero() || created.Before(inst.CreatedAt)) {
			inst.CreatedAt = created
		}
	}
	mine := []ec2types.Filter{
		{Name: awssdk.String("tag:" + backend.LabelManagedBy), Values: []string{backend.ManagedByValue}},
		{Name: awssdk.String("tag:" + backend.LabelOwner), Values: []string{owner}},
	}
	groups := ec2.NewDescribeSecurityGroupsPaginator(r.ec2, &ec2.DescribeSecurityGroupsInput{MaxResults: awssdk.Int32(listPageSize), Filters: mine})
	for groups.HasMorePages() {
		out, err := groups.NextPage(ctx)
		if err != nil {
			return nil, classify("aws security groups in region "+r.name, err)
		}
		for _, g := range out.SecurityGroups {
			tags := tagMap(g.Tags)
			if awssdk.ToString(g.GroupName) == securityGroupName(tags[tagName]) {
				add(tags, "its security group and parameters, and its own instance role when it had one (and its other instances and load balancer when it had several), are left without an instance: a create that did not finish, or an instance terminated behind the provider's back")
			}
		}
	}
	// DescribeAddresses has no pages: it answers every address of the region at once.
	var addresses *ec2.DescribeAddressesOutput
	addresses, err := r.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{Filters: mine})
	if err != nil {
		return nil, classify("aws Elastic IPs in region "+r.name, err)
	}
	for _, a := range addresses.Addresses {
		if a.AssociationId == nil {
			add(tagMap(a.Tags), "its Elastic IP "+awssdk.ToString(a.PublicIp)+" is left without an instance: kept by a replacement whose new proxy never came")
		}
	}
	logGroups, err := b.ownLogGroups(ctx, r, owner, names)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(logGroups)) {
		tags := logGroups[name]
		add(tags, "its CloudWatch Logs group "+ownLogGroup(tags[tagName])+" is left without an instance: a create that did not finish, or a delete that stopped before it")
	}
	left := make([]backend.Instance, 0, len(order))
	for _, name := range order {
		left = append(left, *byName[name])
	}
	return left, nil
}
