package aws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// A proxy of several instances (Options.Instances > 1) is reached at one internal Network Load Balancer: a
// TCP listener on the proxy port forwards to a target group of the instances, whose health check asks each
// instance's health port for proxyconf.HealthPath (HTTP 200, Squid's own answer). The load balancer has a
// node, with a private address, in each of the placement's subnets (one per Availability Zone); its DNS name
// answers the addresses of the nodes in service, so clients that use it (proxy_url) ride out a zone's loss.
// With instance targets the clients' addresses reach the instances unchanged: the security group's rules for
// the allowed clients still decide, and it admits the health checks from the subnets' ranges.
//
// The load balancer and the target group carry the proxy's tags and a name derived from the proxy's
// (lbName); both are made after the security group and deleted before it, so that while either exists the
// group does too, and ListByTag lists the proxy's name as a leftover whose Delete removes them.

// MaxInstances bounds Options.Instances.
const MaxInstances = 10

// lbName names the proxy's load balancer and target group: ELB's names are at most 32 characters of
// [a-zA-Z0-9-], unique per region and account, so a proxy name of up to 63 is cut and a hash of the whole
// keeps two names that share their first characters apart.
func lbName(proxy string) string {
	sum := sha256.Sum256([]byte(proxy))
	short := proxy
	if len(short) > 16 {
		short = short[:16]
	}
	return "egress-" + short + "-" + hex.EncodeToString(sum[:4])
}

func lbObject(region, proxy string) string {
	return fmt.Sprintf("aws load balancer %s of proxy %s in region %s", lbName(proxy), proxy, region)
}

func targetGroupObject(region, proxy string) string {
	return fmt.Sprintf("aws target group %s of proxy %s in region %s", lbName(proxy), proxy, region)
}

// loadBalancer is what a proxy's load balancer is, as read back.
type loadBalancer struct {
	lb          *elbtypes.LoadBalancer
	targetGroup *elbtypes.TargetGroup
}

// internalAddress is the first node's private address, and the DNS name that answers every node in service.
func (l loadBalancer) addresses() (address, dnsName string) {
	if l.lb == nil {
		return "", ""
	}
	for _, z := range l.lb.AvailabilityZones {
		for _, a := range z.LoadBalancerAddresses {
			if ip := awssdk.ToString(a.PrivateIPv4Address); ip != "" && address == "" {
				address = ip
			}
		}
	}
	return address, awssdk.ToString(l.lb.DNSName)
}

// elbTagsOf reads a load balancer's or target group's tags.
func (b *Backend) elbTagsOf(ctx context.Context, r *region, obj, arn string) (map[string]string, error) {
	var tags map[string]string
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		out, err := r.elb.DescribeTags(ctx, &elb.DescribeTagsInput{ResourceArns: []string{arn}})
		if err != nil {
			return classify(obj, err)
		}
		tags = map[string]string{}
		for _, d := range out.TagDescriptions {
			for _, t := range d.Tags {
				tags[awssdk.ToString(t.Key)] = awssdk.ToString(t.Value)
			}
		}
		return nil
	})
	return tags, err
}

// findLoadBalancer reads the proxy's load balancer and target group by name, with their tags; either is nil
// when there is none.
func (b *Backend) findLoadBalancer(ctx context.Context, r *region, proxy string) (l loadBalancer, lbTags, tgTags map[string]string, err error) {
	name := lbName(proxy)
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		out, err := r.elb.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Names: []string{name}})
		if errorCode(err) == "LoadBalancerNotFound" {
			return nil
		}
		if err != nil {
			return classify(lbObject(r.name, proxy), err)
		}
		if len(out.LoadBalancers) > 0 {
			l.lb = &out.LoadBalancers[0]
		}
		return nil
	})
	if err != nil {
		return l, nil, nil, err
	}
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		out, err := r.elb.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{Names: []string{name}})
		if errorCode(err) == "TargetGroupNotFound" {
			return nil
		}
		if err != nil {
			return classify(targetGroupObject(r.name, proxy), err)
		}
		if len(out.TargetGroups) > 0 {
			l.targetGroup = &out.TargetGroups[0]
		}
		return nil
	})
	if err != nil {
		return l, nil, nil, err
	}
	if l.lb != nil {
		if lbTags, err = b.elbTagsOf(ctx, r, lbObject(r.name, proxy), awssdk.ToString(l.lb.LoadBalancerArn)); err != nil {
			return l, nil, nil, err
		}
	}
	if l.targetGroup != nil {
		if tgTags, err = b.elbTagsOf(ctx, r, targetGroupObject(r.name, proxy), awssdk.ToString(l.targetGroup.TargetGroupArn)); err != nil {
			return l, nil, nil, err
		}
	}
	return l, lbTags, tgTags, nil
}

// adoptable refuses a load balancer or target group of the proxy's name that is not this proxy's: the user's,
// another owner's, or a gone proxy's of this owner (listed by egress_proxy_orphans, for its delete).
func adoptable(spec backend.Spec, obj string, tags map[string]string) error {
	if !managed(tags) {
		return backend.Permanent(obj, "exists and was not made by this provider: delete it or choose another proxy name")
	}
	if err := (backend.Ownership{Owner: spec.Owner}).Check(obj, tags[backend.LabelOwner], tags[backend.LabelUID]); err != nil {
		return err
	}
	if tags[backend.LabelUID] != spec.UID {
		return backend.Permanent(obj, "was left by proxy %s of this name, which is gone: delete that proxy (egress_proxy_orphans lists it), then apply again", tags[backend.LabelUID])
	}
	return nil
}

func elbTags(m map[string]string) []elbtypes.Tag {
	var out []elbtypes.Tag
	for _, t := range ec2Tags(m) {
		out = append(out, elbtypes.Tag{Key: t.Key, Value: t.Value})
	}
	return out
}

// ensureLoadBalancer finds or makes the proxy's target group (TCP on the proxy port, health-checked on the
// health port), registers the instances, finds or makes the internal load balancer in subnets (one per
// zone) and its TCP listener on the proxy port. A create that an earlier attempt of this proxy began is
// taken up where it stopped.
func (b *Backend) ensureLoadBalancer(ctx context.Context, r *region, spec backend.Spec, vpcID string, subnets, instanceIDs []string) error {
	l, lbTags, tgTags, err := b.findLoadBalancer(ctx, r, spec.Name)
	if err != nil {
		return err
	}
	name := lbName(spec.Name)
	tags := elbTags(groupTags(spec, time.Now()))
	port := spec.Proxy.Port
	if port == 0 {
		port = proxyconf.DefaultPort
	}
	tgObj, lbObj := targetGroupObject(r.name, spec.Name), lbObject(r.name, spec.Name)
	if l.targetGroup != nil {
		if err := adoptable(spec, tgObj, tgTags); err != nil {
			return err
		}
	} else {
		err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
			out, err := r.elb.CreateTargetGroup(ctx, &elb.CreateTargetGroupInput{
				Name: awssdk.String(name), Protocol: elbtypes.ProtocolEnumTcp, Port: awssdk.Int32(int32(port)),
				VpcId: awssdk.String(vpcID), TargetType: elbtypes.TargetTypeEnumInstance,
				HealthCheckProtocol: elbtypes.ProtocolEnumHttp, HealthCheckPort: awssdk.String(strconv.Itoa(proxyconf.DefaultHealthPort)),
				HealthCheckPath: awssdk.String(proxyconf.HealthPath), Matcher: &elbtypes.Matcher{HttpCode: awssdk.String("200")},
				Tags: tags,
			})
			if err != nil {
				return classify(tgObj, err)
			}
			l.targetGroup = &out.TargetGroups[0]
			return nil
		})
		if err != nil {
			return err
		}
	}
	tgARN := l.targetGroup.TargetGroupArn
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		_, err := r.elb.RegisterTargets(ctx, &elb.RegisterTargetsInput{TargetGroupArn: tgARN, Targets: targetsOf(instanceIDs)})
		return classify(tgObj, err)
	})
	if err != nil {
		return err
	}
	if l.lb != nil {
		if err := adoptable(spec, lbObj, lbTags); err != nil {
			return err
		}
	} else {
		err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
			out, err := r.elb.CreateLoadBalancer(ctx, &elb.CreateLoadBalancerInput{
				Name: awssdk.String(name), Type: elbtypes.LoadBalancerTypeEnumNetwork, Scheme: elbtypes.LoadBalancerSchemeEnumInternal,
				Subnets: subnets, Tags: tags,
			})
			if err != nil {
				return classify(lbObj, err)
			}
			l.lb = &out.LoadBalancers[0]
			return nil
		})
		if err != nil {
			return err
		}
	}
	return b.ensureListener(ctx, r, spec.Name, l.lb.LoadBalancerArn, tgARN, port)
}

// targetsOf names instances ids as a target group's targets, on the group's port.
func targetsOf(ids []string) []elbtypes.TargetDescription {
	targets := make([]elbtypes.TargetDescription, len(ids))
	for i, id := range ids {
		targets[i] = elbtypes.TargetDescription{Id: awssdk.String(id)}
	}
	return targets
}

// ensureListener finds or makes the load balancer's TCP listener on port, forwarding to the target group.
func (b *Backend) ensureListener(ctx context.Context, r *region, proxy string, lbARN, tgARN *string, port int) error {
	lbObj := lbObject(r.name, proxy)
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		out, err := r.elb.DescribeListeners(ctx, &elb.DescribeListenersInput{LoadBalancerArn: lbARN})
		if err != nil {
			return classify(lbObj, err)
		}
		for _, ls := range out.Listeners {
			if awssdk.ToInt32(ls.Port) == int32(port) {
				return nil // made by an earlier attempt
			}
		}
		_, err = r.elb.CreateListener(ctx, &elb.CreateListenerInput{
			LoadBalancerArn: lbARN, Protocol: elbtypes.ProtocolEnumTcp, Port: awssdk.Int32(int32(port)),
			DefaultActions: []elbtypes.Action{{Type: elbtypes.ActionTypeEnumForward, TargetGroupArn: tgARN}},
		})
		return classify(lbObj, err)
	})
}

// retagLoadBalancer brings the user's labels on the proxy's load balancer and target group to spec's, as
// Update does on its instances: the labels dropped go (RemoveTags), the new and changed ones are set
// (AddTags). The provider's own tags (the ownership and ID tags, the Name, the creation time: what userLabels
// leaves out) are neither sent nor removed, so no label update can change whose they are; and only this
// proxy's are changed (adoptable: spec's UID and owner are its first instance's). One that is missing is left
// so (Get reports what is there). The listener carries no tags: ensureListener makes it without.
func (b *Backend) retagLoadBalancer(ctx context.Context, r *region, spec backend.Spec) error {
	l, lbTags, tgTags, err := b.findLoadBalancer(ctx, r, spec.Name)
	if err != nil {
		return err
	}
	labels := userLabels(spec.Labels)
	type tagged struct {
		obj  string
		arn  *string
		tags map[string]string
	}
	var all []tagged
	if l.lb != nil {
		all = append(all, tagged{lbObject(r.name, spec.Name), l.lb.LoadBalancerArn, lbTags})
	}
	if l.targetGroup != nil {
		all = append(all, tagged{targetGroupObject(r.name, spec.Name), l.targetGroup.TargetGroupArn, tgTags})
	}
	for _, t := range all {
		if err := adoptable(spec, t.obj, t.tags); err != nil {
			return err
		}
		stale := droppedLabels(t.tags, labels)
		set := map[string]string{}
		for k, v := range labels {
			if old, ok := t.tags[k]; !ok || old != v {
				set[k] = v
			}
		}
		err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
			if len(stale) > 0 {
				_, err := r.elb.RemoveTags(ctx, &elb.RemoveTagsInput{ResourceArns: []string{awssdk.ToString(t.arn)}, TagKeys: stale})
				if err != nil {
					return classify(t.obj, err)
				}
			}
			if len(set) > 0 {
				_, err := r.elb.AddTags(ctx, &elb.AddTagsInput{ResourceArns: []string{awssdk.ToString(t.arn)}, Tags: elbTags(set)})
				return classify(t.obj, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// targetHealth is each registered instance's health, by instance id.
func (b *Backend) targetHealth(ctx context.Context, r *region, proxy string, tg *elbtypes.TargetGroup) (map[string]elbtypes.TargetHealth, error) {
	out := map[string]elbtypes.TargetHealth{}
	if tg == nil {
		return out, nil
	}
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		res, err := r.elb.DescribeTargetHealth(ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: tg.TargetGroupArn})
		if err != nil {
			return classify(targetGroupObject(r.name, proxy), err)
		}
		for _, d := range res.TargetHealthDescriptions {
			if d.Target != nil && d.TargetHealth != nil {
				out[awssdk.ToString(d.Target.Id)] = *d.TargetHealth
			}
		}
		return nil
	})
	return out, err
}

// deleteLoadBalancer deletes the proxy's load balancer (its listener goes with it) and then its target group,
// this owner's only; either gone already is no error. A target group still named by the listener a moment
// after the load balancer's delete is ResourceInUse, which is retried.
func (b *Backend) deleteLoadBalancer(ctx context.Context, r *region, proxy string) error {
	l, lbTags, tgTags, err := b.findLoadBalancer(ctx, r, proxy)
	if err != nil {
		return err
	}
	if l.lb != nil && managed(lbTags) && sameOwner(ctx, lbTags) {
		err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
			_, err := r.elb.DeleteLoadBalancer(ctx, &elb.DeleteLoadBalancerInput{LoadBalancerArn: l.lb.LoadBalancerArn})
			return classify(lbObject(r.name, proxy), err)
		})
		if err != nil {
			return err
		}
	}
	if l.targetGroup != nil && managed(tgTags) && sameOwner(ctx, tgTags) {
		return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
			_, err := r.elb.DeleteTargetGroup(ctx, &elb.DeleteTargetGroupInput{TargetGroupArn: l.targetGroup.TargetGroupArn})
			if errorCode(err) == "ResourceInUse" {
				return backend.Transient(targetGroupObject(r.name, proxy), "still used by the deleted load balancer's listener: %v", err)
			}
			return classify(targetGroupObject(r.name, proxy), err)
		})
	}
	return nil
}
