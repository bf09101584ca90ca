package aws

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

func addressObject(region, name string) string {
	return fmt.Sprintf("aws Elastic IP of proxy %s in region %s", name, region)
}

// ownAddresses are the Elastic IPs the backend allocated for the proxy named name: tagged with its name and
// as the provider's. A successor of the same name adopts one a replacement kept.
func (b *Backend) ownAddresses(ctx context.Context, r *region, name string) ([]ec2types.Address, error) {
	var found []ec2types.Address
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		out, err := r.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{Filters: []ec2types.Filter{
			{Name: awssdk.String("tag:" + tagName), Values: []string{name}},
			{Name: awssdk.String("tag:" + backend.LabelManagedBy), Values: []string{backend.ManagedByValue}},
			{Name: awssdk.String("domain"), Values: []string{"vpc"}},
		}})
		if err != nil {
			return classify(addressObject(r.name, name), err)
		}
		found = out.Addresses
		return nil
	})
	return found, err
}

// attachEgressAddress gives the instance its egress address when the options ask for one: the user's own
// Elastic IP, or the proxy's, allocated now or adopted from the proxy this one replaces; own are the
// proxy's addresses (ownAddresses) as Create found them before it made anything.
func (b *Backend) attachEgressAddress(ctx context.Context, r *region, spec backend.Spec, o Options, instanceID string, own []ec2types.Address) error {
	obj := addressObject(r.name, spec.Name)
	allocationID := o.EIPAllocationID
	if o.StaticEgressIP {
		if len(own) > 0 {
			// A kept address is adopted by its owner's successor only: another team's address of this name
			// may be on a partner's allow-list.
			tags := tagMap(own[0].Tags)
			if err := (backend.Ownership{Owner: spec.Owner}).Check(fmt.Sprintf("aws Elastic IP %s in region %s", awssdk.ToString(own[0].PublicIp), r.name),
				tags[backend.LabelOwner], tags[backend.LabelUID]); err != nil {
				return err
			}
			allocationID = awssdk.ToString(own[0].AllocationId)
			if id := awssdk.ToString(own[0].InstanceId); id == instanceID {
				return nil // a retried create: attached already
			}
			// Adopted: it now belongs to this proxy, so that a destroy of this one releases it.
			err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
				_, err := r.ec2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{allocationID}, Tags: ec2Tags(groupTags(spec, time.Now()))})
				return classify(obj, err)
			})
			if err != nil {
				return err
			}
		} else {
			err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
				out, err := r.ec2.AllocateAddress(ctx, &ec2.AllocateAddressInput{Domain: ec2types.DomainTypeVpc,
					TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeElasticIp, Tags: ec2Tags(groupTags(spec, time.Now()))}}})
				if err != nil {
					return classify(obj, err)
				}
				allocationID = awssdk.ToString(out.AllocationId)
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	if allocationID == "" {
		return nil
	}
	// An address allocated moments ago (here, or by the user's apply) may be unknown to EC2 for a while.
	w := b.propagationWindow()
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		// Without reassociation: an address another instance uses is the user's to move, not this proxy's.
		_, err := r.ec2.AssociateAddress(ctx, &ec2.AssociateAddressInput{AllocationId: awssdk.String(allocationID),
			InstanceId: awssdk.String(instanceID), AllowReassociation: awssdk.Bool(false)})
		return w.classify(fmt.Sprintf("aws Elastic IP %s in region %s", allocationID, r.name), err)
	})
}

// releaseOwnAddresses releases the Elastic IPs the backend allocated for the proxy named name, once no
// instance uses them: the user's own (eip_allocation_id) carry no such tags and are never touched.
func (b *Backend) releaseOwnAddresses(ctx context.Context, r *region, name string) error {
	own, err := b.ownAddresses(ctx, r, name)
	if err != nil {
		return err
	}
	for _, a := range own {
		if !sameOwner(ctx, tagMap(a.Tags)) {
			continue // another owner's proxy of the same name: theirs to release
		}
		allocationID := awssdk.ToString(a.AllocationId)
		err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
			_, err := r.ec2.ReleaseAddress(ctx, &ec2.ReleaseAddressInput{AllocationId: awssdk.String(allocationID)})
			switch errorCode(err) {
			case "InvalidAllocationID.NotFound":
				return nil
			case "InvalidIPAddress.InUse":
				// The terminated instance's association ends a moment after it: wait for it.
				return backend.Transient(addressObject(r.name, name), "still associated: %v", err)
			}
			return classify(addressObject(r.name, name), err)
		})
		if err != nil {
			return err
		}
	}
	return nil
}
