package aws

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// haSpec is a proxy of three instances over the region's three seeded subnets, one per Availability Zone.
func haSpec(fake *ec2fake.Server, name string) backend.Spec {
	spec := testSpec(fake, name)
	o := spec.Placement.Options.(*Options) //nolint:forcetypeassert // testSpec's own options
	o.SubnetID, o.Instances = "", 3
	for _, sn := range fake.Subnets(testRegion) {
		o.SubnetIDs = append(o.SubnetIDs, sn.ID)
	}
	return spec
}

// adminELB reads ELB as a client does, behind the provider's back.
func adminELB(fake *ec2fake.Server) *elb.Client {
	return elb.NewFromConfig(fake.AdminAWSConfig(testRegion))
}

// A proxy of three instances: one in each subnet (each its own zone), each reading its own parameters; a
// target group of the three health-checked over HTTP on the health port, an internal load balancer over the
// three subnets and a TCP listener on the proxy port forwarding to the group; the security group admits the
// health checks from the subnets. Get reports the members with their zones, own addresses and health, the
// load balancer's address and DNS name, and Degraded, then Failed, as the targets' health checks fail;
// Delete leaves nothing.
func TestSeveralInstancesBehindALoadBalancer(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	ctx := context.Background()
	spec := haSpec(fake, "ha")
	spec.Placement.Options.(*Options).WaitForProxy = true //nolint:forcetypeassert // haSpec's own options
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if inst.ID.String() != "aws/"+testRegion+"/ha" {
		t.Errorf("id %s", inst.ID)
	}
	live := liveInstancesOf(fake)
	if len(live) != 3 {
		t.Fatalf("%d live instances, want 3", len(live))
	}
	zones, subnets := map[string]bool{}, fake.Subnets(testRegion)
	for _, in := range live {
		k, _ := strconv.Atoi(in.Tags[TagMember]) // member 0 has none
		if in.Tags[tagName] != "ha" || in.SubnetID != subnets[k].ID {
			t.Errorf("member %d: Name %q in %s, want ha in %s", k, in.Tags[tagName], in.SubnetID, subnets[k].ID)
		}
		zones[in.AvailabilityZone] = true
		if _, ok := fake.Parameter(testRegion, guest.ParameterPath(memberParameters("ha", k), guest.ParameterConfig)); !ok {
			t.Errorf("member %d has no config parameter of its own", k)
		}
	}
	if len(zones) != 3 {
		t.Errorf("members in zones %v, want three", zones)
	}
	name := lbName("ha")
	if lbs, tgs := fake.LoadBalancers(testRegion), fake.TargetGroups(testRegion); !slices.Equal(lbs, []string{name}) || !slices.Equal(tgs, []string{name}) {
		t.Fatalf("load balancers %v, target groups %v, want %s each", lbs, tgs, name)
	}
	c := adminELB(fake)
	tgs, err := c.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{Names: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	tg := tgs.TargetGroups[0]
	if tg.Protocol != elbtypes.ProtocolEnumTcp || awssdk.ToInt32(tg.Port) != 3128 || tg.HealthCheckProtocol != elbtypes.ProtocolEnumHttp ||
		awssdk.ToString(tg.HealthCheckPort) != strconv.Itoa(proxyconf.DefaultHealthPort) || awssdk.ToString(tg.HealthCheckPath) != proxyconf.HealthPath {
		t.Errorf("target group %+v: want TCP on 3128, health checked over HTTP on %d at %s", tg, proxyconf.DefaultHealthPort, proxyconf.HealthPath)
	}
	lbs, err := c.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Names: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	lb := lbs.LoadBalancers[0]
	if lb.Scheme != elbtypes.LoadBalancerSchemeEnumInternal || len(lb.AvailabilityZones) != 3 {
		t.Errorf("load balancer %+v: want internal, in three zones", lb)
	}
	ls, err := c.DescribeListeners(ctx, &elb.DescribeListenersInput{LoadBalancerArn: lb.LoadBalancerArn})
	if err != nil {
		t.Fatal(err)
	}
	if len(ls.Listeners) != 1 || awssdk.ToInt32(ls.Listeners[0].Port) != 3128 || ls.Listeners[0].Protocol != elbtypes.ProtocolEnumTcp ||
		awssdk.ToString(ls.Listeners[0].DefaultActions[0].TargetGroupArn) != awssdk.ToString(tg.TargetGroupArn) {
		t.Errorf("listeners %+v: want TCP 3128 forwarding to the group", ls.Listeners)
	}
	var health []string
	for _, g := range fake.SecurityGroups(testRegion) {
		if g.Name != securityGroupName("ha") {
			continue
		}
		for _, rule := range g.Ingress {
			if rule.FromPort == proxyconf.DefaultHealthPort {
				health = append(health, rule.CIDR)
			}
		}
	}
	var want []string
	for _, sn := range subnets {
		want = append(want, sn.CIDR)
	}
	if slices.Sort(health); !slices.Equal(health, want) {
		t.Errorf("the group admits the health port from %v, want the subnets %v", health, want)
	}

	got, err := b.Get(ctx, inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != backend.StateRunning || len(got.Members) != 3 || got.InternalName != awssdk.ToString(lb.DNSName) ||
		got.InternalAddress != awssdk.ToString(lb.AvailabilityZones[0].LoadBalancerAddresses[0].PrivateIPv4Address) || got.EgressAddress != "" {
		t.Fatalf("Get = %+v", got)
	}
	if !maps.Equal(got.Labels, spec.Labels) {
		t.Errorf("labels read back %v, want %v: the members' own tags are not the user's", got.Labels, spec.Labels)
	}
	o := got.Placement.Options.(*Options)                                                                                //nolint:forcetypeassert // the backend's own options
	if o.Instances != 3 || !slices.Equal(o.SubnetIDs, spec.Placement.Options.(*Options).SubnetIDs) || o.SubnetID != "" { //nolint:forcetypeassert // haSpec's
		t.Errorf("placement read back %+v", o)
	}
	for i, m := range got.Members {
		in, _ := fake.Instance(testRegion, m.Name)
		if !m.Healthy || m.Scope != in.AvailabilityZone || m.InternalAddress != in.PrivateIP || m.EgressAddress == "" || m.EgressAddress != in.PublicIP ||
			in.SubnetID != subnets[i].ID {
			t.Errorf("member %d = %+v, instance %+v", i, m, in)
		}
	}
	fake.SetTargetHealth(testRegion, got.Members[1].Name, false)
	got, err = b.Get(ctx, inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != backend.StateDegraded || got.Members[1].Healthy || !strings.Contains(got.Members[1].Reason, "Target.FailedHealthChecks") ||
		!got.Members[0].Healthy || !got.Members[2].Healthy {
		t.Fatalf("with member 1's health checks failing, Get = %s %+v", got.State, got.Members)
	}
	fake.SetTargetHealth(testRegion, got.Members[0].Name, false)
	fake.SetTargetHealth(testRegion, got.Members[2].Name, false)
	if got, err = b.Get(ctx, inst.ID); err != nil || got.State != backend.StateFailed {
		t.Fatalf("with every member failing, Get = %s, %v", got.State, err)
	}

	if err := b.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, inst.ID); err != nil {
		t.Fatalf("Delete again: %v", err)
	}
	assertNothingLeft(t, fake)
}

func assertNothingLeft(t *testing.T, fake *ec2fake.Server) {
	t.Helper()
	if live := liveInstancesOf(fake); len(live) != 0 {
		t.Errorf("%d instances left", len(live))
	}
	if lbs, tgs := fake.LoadBalancers(testRegion), fake.TargetGroups(testRegion); len(lbs)+len(tgs) != 0 {
		t.Errorf("left: load balancers %v, target groups %v", lbs, tgs)
	}
	for _, g := range fake.SecurityGroups(testRegion) {
		if g.Name != "default" {
			t.Errorf("security group %s left", g.Name)
		}
	}
	for _, p := range fake.Parameters(testRegion) {
		if strings.HasPrefix(p.Name, guest.ParameterPrefix) {
			t.Errorf("parameter %s left", p.Name)
		}
	}
}

// A label update of a proxy of three retags its load balancer and target group as it does its instances: a
// label dropped is gone, a new one and a changed value are there, and the provider's own tags (ownership, ID,
// name, creation time) are as they were, whatever owner the update's spec says. The instances keep
// egress-instances and egress-member, so that the delete after still finds the load balancer and every
// member and leaves nothing.
func TestLabelUpdateRetagsTheLoadBalancer(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	ctx := context.Background()
	spec := haSpec(fake, "relabel")
	spec.Labels = map[string]string{"env": "test", "tier": "a"}
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	c := adminELB(fake)
	name := lbName("relabel")
	lbs, err := c.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Names: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	tgs, err := c.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{Names: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	arns := map[string]string{"load balancer": awssdk.ToString(lbs.LoadBalancers[0].LoadBalancerArn), "target group": awssdk.ToString(tgs.TargetGroups[0].TargetGroupArn)}
	tagsOf := func() map[string]map[string]string {
		out := map[string]map[string]string{}
		for what, arn := range arns {
			res, err := c.DescribeTags(ctx, &elb.DescribeTagsInput{ResourceArns: []string{arn}})
			if err != nil {
				t.Fatal(err)
			}
			out[what] = map[string]string{}
			for _, tg := range res.TagDescriptions[0].Tags {
				out[what][awssdk.ToString(tg.Key)] = awssdk.ToString(tg.Value)
			}
		}
		return out
	}
	own := []string{backend.LabelManagedBy, backend.LabelUID, backend.LabelOwner, backend.LabelName, tagName, tagCreated}
	before := tagsOf()
	for what, tags := range before {
		if tags["env"] != "test" || tags["tier"] != "a" || tags[backend.LabelUID] != spec.UID || tags[backend.LabelOwner] != spec.Owner || tags[tagCreated] == "" {
			t.Fatalf("%s made with tags %v", what, tags)
		}
	}
	update := spec
	update.Labels = map[string]string{"tier": "b", "team": "net"}
	update.Owner = "team-b" // not the proxy's: the update keeps the tags' owner
	got, err := b.Update(ctx, inst.ID, update)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Labels, update.Labels) || got.Owner != spec.Owner {
		t.Errorf("Update answered labels %v of owner %s, want %v of %s", got.Labels, got.Owner, update.Labels, spec.Owner)
	}
	for what, tags := range tagsOf() {
		if _, ok := tags["env"]; ok || tags["tier"] != "b" || tags["team"] != "net" {
			t.Errorf("%s after the update: %v, want env gone, tier=b, team=net", what, tags)
		}
		for _, k := range own {
			if tags[k] != before[what][k] {
				t.Errorf("%s: the update made %s %q, was %q", what, k, tags[k], before[what][k])
			}
		}
	}
	for _, in := range liveInstancesOf(fake) {
		_, member := in.Tags[TagMember]
		if in.Tags[TagInstances] != "3" || member != (in.ID != inst.Members[0].Name) || in.Tags["team"] != "net" || in.Tags["env"] != "" {
			// Fatal: a delete would take the proxy for one of one instance and wait on its security group.
			t.Fatalf("instance %s after the update: %v", in.ID, in.Tags)
		}
	}
	if err := b.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, fake)
}

// A proxy of one is as it always was: one instance, no load balancer, not one call to Elastic Load Balancing
// in its whole life (so that a caller policy of before needs nothing new), and the same id.
func TestOneInstanceMakesNoLoadBalancer(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	ctx := context.Background()
	for _, n := range []int{0, 1} {
		spec := testSpec(fake, "one-"+strconv.Itoa(n))
		spec.Placement.Options.(*Options).Instances = n //nolint:forcetypeassert // testSpec's own options
		inst, err := b.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if inst.ID.String() != "aws/"+testRegion+"/"+spec.Name || len(inst.Members) != 0 || inst.EgressAddress == "" {
			t.Errorf("instances = %d: %+v", n, inst)
		}
		if _, err := b.Get(ctx, inst.ID); err != nil {
			t.Fatal(err)
		}
		s := spec.Proxy
		s.AllowedDestinations = []string{"example.org"}
		if _, err := b.Reconfigure(ctx, inst.ID, s); err != nil {
			t.Fatal(err)
		}
		spec.Labels = map[string]string{"env": "prod"}
		if _, err := b.Update(ctx, inst.ID, spec); err != nil {
			t.Fatal(err)
		}
		if _, err := b.ListByTag(ctx, backend.Selector{Owner: spec.Owner}); err != nil {
			t.Fatal(err)
		}
		if err := b.Delete(ctx, inst.ID); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range fake.Requests() {
		if r.Service == "elasticloadbalancing" {
			t.Errorf("a proxy of one called Elastic Load Balancing: %s", r.Action)
		}
	}
	assertNothingLeft(t, fake)
}

// A create of three instances killed once the load balancer is made, before its listener: ListByTag lists
// the proxy (its security group says so), and deleting that id removes the load balancer, the target group,
// every member and the rest. A create of the same UID instead takes up where the first stopped.
func TestSeveralInstancesKilledMidCreate(t *testing.T) {
	t.Parallel()
	for _, then := range []string{"delete", "create again"} {
		t.Run(then, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, ec2fake.Options{})
			fake.PlayGuests()
			spec := haSpec(fake, "killed")
			ctx, cancel := context.WithCancel(context.Background())
			p := fake.PauseNext("CreateListener", false)
			done := make(chan error, 1)
			go func() {
				_, err := b.Create(ctx, spec)
				done <- err
			}()
			<-p.Reached()
			cancel() // the provider's process is gone: nothing after this request happens
			p.Drop()
			if err := <-done; err == nil {
				t.Fatal("the killed create succeeded")
			}
			if lbs, n := fake.LoadBalancers(testRegion), len(liveInstancesOf(fake)); len(lbs) != 1 || n != 3 || fake.Listeners(testRegion) != 0 {
				t.Fatalf("after the kill: load balancers %v, %d instances, %d listeners", lbs, n, fake.Listeners(testRegion))
			}
			bg := context.Background()
			if then == "create again" {
				inst, err := b.Create(bg, spec)
				if err != nil {
					t.Fatal(err)
				}
				if len(liveInstancesOf(fake)) != 3 || fake.Listeners(testRegion) != 1 || len(inst.Members) != 3 || inst.State != backend.StateRunning {
					t.Fatalf("the create taken up: %d instances, %d listeners, %+v", len(liveInstancesOf(fake)), fake.Listeners(testRegion), inst)
				}
				if err := b.Delete(bg, inst.ID); err != nil {
					t.Fatal(err)
				}
				assertNothingLeft(t, fake)
				return
			}
			listed, err := b.ListByTag(bg, backend.Selector{Owner: spec.Owner})
			if err != nil {
				t.Fatal(err)
			}
			if len(listed) != 1 || listed[0].ID.Name != "killed" {
				t.Fatalf("ListByTag = %+v, want the killed proxy once", listed)
			}
			if err := b.Delete(bg, listed[0].ID); err != nil {
				t.Fatal(err)
			}
			assertNothingLeft(t, fake)
		})
	}
}

// Reconfigure reaches the members one at a time: each next member's config is written only once the one
// before has applied its own and passes its health check. With member 1 stalled (its guest silent, or its
// health check failing), the change stops there while the backend keeps polling for it: member 0 and 1 have
// the new config, member 2 still the old one. Once member 1 recovers, the change goes through.
func TestReconfigureMembersOneAtATime(t *testing.T) {
	t.Parallel()
	for stall, polled := range map[string]string{"guest silent": "GetParameter", "health check failing": "DescribeTargetHealth"} {
		t.Run(stall, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, ec2fake.Options{})
			fake.PlayGuests()
			ctx := context.Background()
			spec := haSpec(fake, "rolling")
			inst, err := b.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			config := func(k int) string {
				p, _ := fake.Parameter(testRegion, guest.ParameterPath(memberParameters("rolling", k), guest.ParameterConfig))
				return p.Value
			}
			before := []string{config(0), config(1), config(2)}
			if stall == "guest silent" {
				fake.SetGuest(testRegion, memberParameters("rolling", 1), ec2fake.GuestSilent)
			} else {
				fake.SetTargetHealth(testRegion, inst.Members[1].Name, false)
			}
			s := spec.Proxy
			s.AllowedDestinations = []string{"example.org"}
			stalled, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := b.Reconfigure(stalled, inst.ID, s)
				done <- err
			}()
			// The event: member 1's config is written, and the backend then polls what it waits for three times
			// more without writing member 2's.
			polls := -1
		wait:
			for {
				select {
				case err := <-done:
					t.Fatalf("Reconfigure returned (%v) with member 1 stalled", err)
				default:
				}
				switch {
				case config(1) == before[1]:
				case polls < 0:
					polls = fake.Count(polled)
				case fake.Count(polled) >= polls+3:
					break wait
				}
				if config(2) != before[2] {
					t.Fatal("member 2's config was written while member 1 was stalled")
				}
				time.Sleep(time.Millisecond) // the fake's state is polled; the backend polls every few milliseconds
			}
			cancel()
			if err := <-done; err == nil {
				t.Error("the stalled Reconfigure succeeded once cancelled")
			}
			if config(0) == before[0] || config(1) == before[1] || config(2) != before[2] {
				t.Errorf("configs changed: member 0 %v, 1 %v, 2 %v; want 0 and 1 changed, 2 not", config(0) != before[0], config(1) != before[1], config(2) != before[2])
			}
			fake.SetGuest(testRegion, memberParameters("rolling", 1), ec2fake.GuestApplies)
			fake.SetTargetHealth(testRegion, inst.Members[1].Name, true)
			got, err := b.Reconfigure(ctx, inst.ID, s)
			if err != nil {
				t.Fatal(err)
			}
			if config(2) == before[2] || got.State != backend.StateRunning {
				t.Errorf("the change again: member 2's config changed %v, state %s", config(2) != before[2], got.State)
			}
		})
	}
}

// What a proxy of several instances cannot be is refused before anything is made.
func TestSeveralInstancesRefused(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	same := fake.SetSubnets(testRegion, []ec2fake.Subnet{{VPCID: fake.VPCs(testRegion)[0].ID, CIDR: "172.31.0.0/20", AvailabilityZone: testRegion + "a"},
		{VPCID: fake.VPCs(testRegion)[0].ID, CIDR: "172.31.16.0/20", AvailabilityZone: testRegion + "a"}})
	for name, tc := range map[string]struct {
		edit func(*Options)
		want string
	}{
		"subnet_id":         {func(o *Options) { o.SubnetIDs, o.SubnetID = nil, same[0].ID }, "set subnet_ids instead of subnet_id"},
		"one subnet":        {func(o *Options) { o.SubnetIDs = o.SubnetIDs[:1] }, "at least two Availability Zones"},
		"one zone":          {func(o *Options) {}, "must each be in their own zone"},
		"static egress IP":  {func(o *Options) { o.StaticEgressIP = true }, "static_egress_ip"},
		"too many":          {func(o *Options) { o.Instances = MaxInstances + 1 }, "between 1 and"},
		"subnet_ids of one": {func(o *Options) { o.Instances = 1 }, "subnet_ids is for several instances"},
	} {
		spec := testSpec(fake, "refused")
		o := spec.Placement.Options.(*Options) //nolint:forcetypeassert // testSpec's own options
		o.SubnetID, o.Instances, o.SubnetIDs = "", 2, []string{same[0].ID, same[1].ID}
		tc.edit(o)
		_, err := b.Create(context.Background(), spec)
		if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want Permanent with %q", name, err, tc.want)
		}
	}
	assertNothingLeft(t, fake)
}

// The health checks' rules count against the group's quota of inbound rules: 58 client ranges fit a proxy of
// one (58 rules) but not one of three (58 and a rule per subnet, 61 of 60), which is refused before anything
// is made.
func TestSeveralInstancesCountHealthRules(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	ctx := context.Background()
	var clients []string
	for i := range 58 {
		clients = append(clients, "10."+strconv.Itoa(i)+".0.0/16")
	}
	spec := haSpec(fake, "crowded")
	spec.Proxy.AllowedClientCIDRs = clients
	_, err := b.Create(ctx, spec)
	if backend.ClassOf(err) != backend.ClassQuota || !strings.Contains(err.Error(), "61 IPv4") {
		t.Fatalf("a proxy of three with 58 client ranges: %v, want Quota naming 61 IPv4 rules", err)
	}
	assertNothingLeft(t, fake)
	one := testSpec(fake, "crowded")
	one.Proxy.AllowedClientCIDRs = clients
	inst, err := b.Create(ctx, one)
	if err != nil {
		t.Fatalf("a proxy of one with 58 client ranges: %v", err)
	}
	if err := b.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
}
