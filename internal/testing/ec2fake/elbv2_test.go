package ec2fake

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
)

// The rules of Elastic Load Balancing v2 (README.md, R69 to R76), one test each, driving the fake through the
// real ELBv2 client.

func (h *harness) elbAs(cfg aws.Config) *elb.Client {
	return elb.NewFromConfig(cfg, func(o *elb.Options) { o.RetryMaxAttempts = 1 })
}

func (h *harness) elb() *elb.Client { return h.elbAs(h.s.AWSConfig(h.region)) }

// subnetsByZone are the region's seeded default subnets, one per Availability Zone, in zone order.
func (h *harness) subnetsByZone() (ids []string, vpc string) {
	h.t.Helper()
	out, err := h.ec2.DescribeSubnets(h.ctx, &ec2.DescribeSubnetsInput{})
	h.ok("DescribeSubnets", err)
	sort.Slice(out.Subnets, func(i, j int) bool {
		return aws.ToString(out.Subnets[i].AvailabilityZone) < aws.ToString(out.Subnets[j].AvailabilityZone)
	})
	for _, sn := range out.Subnets {
		ids = append(ids, aws.ToString(sn.SubnetId))
		vpc = aws.ToString(sn.VpcId)
	}
	return ids, vpc
}

func elbTagList(kv ...string) []elbtypes.Tag {
	var out []elbtypes.Tag
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, elbtypes.Tag{Key: aws.String(kv[i]), Value: aws.String(kv[i+1])})
	}
	return out
}

// nlb makes an internal network load balancer of name in subnets.
func (h *harness) nlb(c *elb.Client, name string, subnets []string, tags ...string) (*elb.CreateLoadBalancerOutput, error) {
	return c.CreateLoadBalancer(h.ctx, &elb.CreateLoadBalancerInput{Name: aws.String(name), Type: elbtypes.LoadBalancerTypeEnumNetwork,
		Scheme: elbtypes.LoadBalancerSchemeEnumInternal, Subnets: subnets, Tags: elbTagList(tags...)})
}

// tcpGroup makes a TCP target group of instances on port, health-checked on hcPort.
func (h *harness) tcpGroup(c *elb.Client, name, vpc string, port int32, hcPort string, tags ...string) (*elb.CreateTargetGroupOutput, error) {
	return c.CreateTargetGroup(h.ctx, &elb.CreateTargetGroupInput{Name: aws.String(name), Protocol: elbtypes.ProtocolEnumTcp,
		Port: aws.Int32(port), VpcId: aws.String(vpc), TargetType: elbtypes.TargetTypeEnumInstance,
		HealthCheckProtocol: elbtypes.ProtocolEnumTcp, HealthCheckPort: aws.String(hcPort), Tags: elbTagList(tags...)})
}

func (h *harness) forward(c *elb.Client, lbARN, tgARN string, port int32, tags ...string) (*elb.CreateListenerOutput, error) {
	return c.CreateListener(h.ctx, &elb.CreateListenerInput{LoadBalancerArn: aws.String(lbARN), Protocol: elbtypes.ProtocolEnumTcp, Port: aws.Int32(port),
		DefaultActions: []elbtypes.Action{{Type: elbtypes.ActionTypeEnumForward, TargetGroupArn: aws.String(tgARN)}}, Tags: elbTagList(tags...)})
}

// stack makes a load balancer over the first two zones, a group of instances on 3128 checked on 8080 and a
// listener forwarding to it, and returns their ARNs.
func (h *harness) stack(c *elb.Client) (lbARN, tgARN, listenerARN string) {
	h.t.Helper()
	subnets, vpc := h.subnetsByZone()
	lb, err := h.nlb(c, "p1", subnets[:2])
	h.ok("CreateLoadBalancer", err)
	tg, err := h.tcpGroup(c, "p1", vpc, 3128, "8080")
	h.ok("CreateTargetGroup", err)
	lbARN, tgARN = aws.ToString(lb.LoadBalancers[0].LoadBalancerArn), aws.ToString(tg.TargetGroups[0].TargetGroupArn)
	l, err := h.forward(c, lbARN, tgARN, 3128, "l", "1")
	h.ok("CreateListener", err)
	return lbARN, tgARN, aws.ToString(l.Listeners[0].ListenerArn)
}

func TestDocumentedELBRules(t *testing.T) {
	t.Parallel()
	for name, r := range map[string]rule{
		"R69 the Query API of version 2015-12-01": {run: func(h *harness) {
			c := h.elb()
			_, err := c.DescribeAccountLimits(h.ctx, &elb.DescribeAccountLimitsInput{})
			h.failsWith("an action the fake does not serve", err, http.StatusBadRequest, "InvalidAction")
			subnets, _ := h.subnetsByZone()
			_, err = c.CreateLoadBalancer(h.ctx, &elb.CreateLoadBalancerInput{Name: aws.String("p1"), Type: elbtypes.LoadBalancerTypeEnumNetwork,
				Scheme: elbtypes.LoadBalancerSchemeEnumInternal, Subnets: subnets[:1], SecurityGroups: []string{"sg-1"}})
			h.failsWith("security groups on a network load balancer, not modelled", err, http.StatusNotImplemented, "NotImplemented")
			_, err = h.elbAs(h.s.AWSConfig(h.region)).DescribeLoadBalancers(h.ctx, &elb.DescribeLoadBalancersInput{}, func(o *elb.Options) {
				o.APIOptions = append(o.APIOptions, withFormParam("Bogus=1"))
			})
			h.failsWith("a parameter the SDK cannot send", err, http.StatusBadRequest, "ValidationError")
			_, err = h.in("us-east-1").elb().DescribeLoadBalancers(h.ctx, &elb.DescribeLoadBalancersInput{})
			h.ok("another region", err)
		}},
		"R70 CreateLoadBalancer: an internal network load balancer": {run: func(h *harness) {
			c := h.elb()
			subnets, vpc := h.subnetsByZone()
			for _, bad := range []string{"-p", "p-", strings.Repeat("a", 33), "a_b", "internal-p"} {
				_, err := h.nlb(c, bad, subnets[:1])
				h.failsWith("name "+bad, err, http.StatusBadRequest, "ValidationError")
			}
			_, err := h.nlb(c, strings.Repeat("a", 32), subnets[:1])
			h.ok("a 32-character name", err)
			_, err = h.nlb(c, "p2", []string{"subnet-0123456789abcdef0"})
			h.failsWith("an unknown subnet", err, http.StatusBadRequest, "SubnetNotFound")
			other := h.s.SetSubnets(h.region, []Subnet{{VPCID: vpc, CIDR: "172.31.0.0/20", AvailabilityZone: h.region + "a"},
				{VPCID: vpc, CIDR: "172.31.16.0/20", AvailabilityZone: h.region + "a"}, {VPCID: vpc, CIDR: "172.31.32.0/20", AvailabilityZone: h.region + "b"},
				{VPCID: "vpc-0aaaaaaaaaaaaaaaa", CIDR: "10.1.0.0/20", AvailabilityZone: h.region + "c"}})
			_, err = h.nlb(c, "p2", []string{other[0].ID, other[1].ID})
			h.fails("two subnets of one zone", err, "InvalidConfigurationRequest", "same Availability Zone")
			_, err = h.nlb(c, "p2", []string{other[0].ID, other[3].ID})
			h.fails("subnets of two VPCs", err, "InvalidConfigurationRequest", "same VPC")
			out, err := h.nlb(c, "p2", []string{other[0].ID, other[2].ID}, "k", "v")
			h.ok("two zones", err)
			lb := out.LoadBalancers[0]
			if aws.ToString(lb.VpcId) != vpc || lb.Scheme != elbtypes.LoadBalancerSchemeEnumInternal || lb.Type != elbtypes.LoadBalancerTypeEnumNetwork ||
				!strings.HasPrefix(aws.ToString(lb.LoadBalancerArn), "arn:aws:elasticloadbalancing:"+h.region+":"+h.s.AccountID()+":loadbalancer/net/p2/") ||
				!strings.HasSuffix(aws.ToString(lb.DNSName), ".elb."+h.region+".amazonaws.com") || len(lb.AvailabilityZones) != 2 {
				h.t.Fatalf("load balancer %+v", lb)
			}
			for i, z := range lb.AvailabilityZones {
				want := []Subnet{other[0], other[2]}[i]
				if aws.ToString(z.SubnetId) != want.ID || aws.ToString(z.ZoneName) != want.AvailabilityZone || len(z.LoadBalancerAddresses) != 1 ||
					!strings.HasPrefix(aws.ToString(z.LoadBalancerAddresses[0].PrivateIPv4Address), strings.TrimSuffix(want.CIDR, ".0/20")[:len("172.31.")]) {
					h.t.Errorf("zone %d: %+v", i, z)
				}
			}
			again, err := h.nlb(c, "p2", []string{other[0].ID, other[2].ID}, "k", "v")
			h.ok("the same create again (idempotent)", err)
			if aws.ToString(again.LoadBalancers[0].LoadBalancerArn) != aws.ToString(lb.LoadBalancerArn) {
				h.t.Errorf("the same create made another load balancer")
			}
			_, err = h.nlb(c, "p2", []string{other[0].ID})
			h.failsWith("the name with other settings", err, http.StatusBadRequest, "DuplicateLoadBalancerName")
			if got := h.s.LoadBalancers(h.region); !slices.Equal(got, []string{strings.Repeat("a", 32), "p2"}) {
				h.t.Errorf("load balancers %v", got)
			}
		}},
		"R71 CreateTargetGroup: TCP, instances, a health check": {run: func(h *harness) {
			c := h.elb()
			_, vpc := h.subnetsByZone()
			_, err := h.tcpGroup(c, "p1", "vpc-0aaaaaaaaaaaaaaaa", 3128, "8080")
			h.fails("an unknown VPC", err, "ValidationError", "vpc-0aaaaaaaaaaaaaaaa")
			_, err = h.tcpGroup(c, "p1-", vpc, 3128, "8080")
			h.fails("a name ending with a hyphen", err, "ValidationError", "")
			_, err = h.tcpGroup(c, "p1", vpc, 3128, "65536")
			h.fails("a health check port out of range", err, "ValidationError", "")
			_, err = c.CreateTargetGroup(h.ctx, &elb.CreateTargetGroupInput{Name: aws.String("p1"), Protocol: elbtypes.ProtocolEnumTcp, Port: aws.Int32(3128),
				VpcId: aws.String(vpc), HealthCheckIntervalSeconds: aws.Int32(4)})
			h.fails("an interval under 5 seconds", err, "ValidationError", "healthCheckIntervalSeconds")
			_, err = c.CreateTargetGroup(h.ctx, &elb.CreateTargetGroupInput{Name: aws.String("p1"), Protocol: elbtypes.ProtocolEnumTcp, Port: aws.Int32(3128),
				VpcId: aws.String(vpc), HealthCheckPath: aws.String("/")})
			h.fails("a path on a TCP health check", err, "ValidationError", "")
			_, err = c.CreateTargetGroup(h.ctx, &elb.CreateTargetGroupInput{Name: aws.String("p1"), Protocol: elbtypes.ProtocolEnumTcp, Port: aws.Int32(3128),
				VpcId: aws.String(vpc), TargetType: elbtypes.TargetTypeEnumIp})
			h.failsWith("ip targets, not modelled", err, http.StatusNotImplemented, "NotImplemented")
			out, err := h.tcpGroup(c, "p1", vpc, 3128, "8080", "k", "v")
			h.ok("a TCP group", err)
			tg := out.TargetGroups[0]
			if tg.Protocol != elbtypes.ProtocolEnumTcp || aws.ToInt32(tg.Port) != 3128 || aws.ToString(tg.VpcId) != vpc || tg.TargetType != elbtypes.TargetTypeEnumInstance ||
				tg.HealthCheckProtocol != elbtypes.ProtocolEnumTcp || aws.ToString(tg.HealthCheckPort) != "8080" || !aws.ToBool(tg.HealthCheckEnabled) ||
				aws.ToInt32(tg.HealthCheckIntervalSeconds) != 30 || aws.ToInt32(tg.HealthyThresholdCount) != 5 || aws.ToInt32(tg.UnhealthyThresholdCount) != 2 {
				h.t.Errorf("target group %+v", tg)
			}
			again, err := h.tcpGroup(c, "p1", vpc, 3128, "8080", "k", "v")
			h.ok("the same create again (idempotent)", err)
			if aws.ToString(again.TargetGroups[0].TargetGroupArn) != aws.ToString(tg.TargetGroupArn) {
				h.t.Errorf("the same create made another group")
			}
			_, err = h.tcpGroup(c, "p1", vpc, 3128, "traffic-port")
			h.failsWith("the name with other settings", err, http.StatusBadRequest, "DuplicateTargetGroupName")
			hc, err := c.CreateTargetGroup(h.ctx, &elb.CreateTargetGroupInput{Name: aws.String("p2"), Protocol: elbtypes.ProtocolEnumTcp, Port: aws.Int32(3128),
				VpcId: aws.String(vpc), HealthCheckProtocol: elbtypes.ProtocolEnumHttp, HealthCheckPath: aws.String("/healthz")})
			h.ok("an HTTP health check", err)
			if g := hc.TargetGroups[0]; aws.ToString(g.HealthCheckPath) != "/healthz" || aws.ToString(g.HealthCheckPort) != "traffic-port" ||
				g.Matcher == nil || aws.ToString(g.Matcher.HttpCode) != "200-399" {
				h.t.Errorf("HTTP group %+v", g)
			}
		}},
		"R72 RegisterTargets and DeregisterTargets: running instances of the VPC": {run: func(h *harness) {
			c := h.elb()
			_, vpc := h.subnetsByZone()
			tg, err := h.tcpGroup(c, "p1", vpc, 3128, "8080")
			h.ok("CreateTargetGroup", err)
			arn := tg.TargetGroups[0].TargetGroupArn
			pending := h.mustLaunch(nil)
			_, err = c.RegisterTargets(h.ctx, &elb.RegisterTargetsInput{TargetGroupArn: arn, Targets: []elbtypes.TargetDescription{{Id: aws.String(pending)}}})
			h.fails("a pending instance", err, "InvalidTarget", "not in a running state")
			_, err = c.RegisterTargets(h.ctx, &elb.RegisterTargetsInput{TargetGroupArn: arn, Targets: []elbtypes.TargetDescription{{Id: aws.String("i-0123456789abcdef0")}}})
			h.fails("an unknown instance", err, "InvalidTarget", "")
			_, err = c.RegisterTargets(h.ctx, &elb.RegisterTargetsInput{TargetGroupArn: aws.String(strings.Replace(aws.ToString(arn), "/p1/", "/p9/", 1)),
				Targets: []elbtypes.TargetDescription{{Id: aws.String(pending)}}})
			h.fails("an unknown group", err, "TargetGroupNotFound", "")
			h.s.Settle()
			running := h.running(nil)
			_, err = c.RegisterTargets(h.ctx, &elb.RegisterTargetsInput{TargetGroupArn: arn, Targets: []elbtypes.TargetDescription{{Id: aws.String(pending)}, {Id: aws.String(running)}}})
			h.ok("running instances", err)
			health, err := c.DescribeTargetHealth(h.ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: arn})
			h.ok("DescribeTargetHealth", err)
			if len(health.TargetHealthDescriptions) != 2 {
				h.t.Errorf("registered %d targets, want 2", len(health.TargetHealthDescriptions))
			}
			_, err = c.DeregisterTargets(h.ctx, &elb.DeregisterTargetsInput{TargetGroupArn: arn, Targets: []elbtypes.TargetDescription{{Id: aws.String(running)}}})
			h.ok("DeregisterTargets", err)
			_, err = c.DeregisterTargets(h.ctx, &elb.DeregisterTargetsInput{TargetGroupArn: arn, Targets: []elbtypes.TargetDescription{{Id: aws.String(running)}}})
			h.ok("DeregisterTargets again (nothing)", err)
			_, err = c.DeregisterTargets(h.ctx, &elb.DeregisterTargetsInput{TargetGroupArn: arn, Targets: []elbtypes.TargetDescription{{Id: aws.String("i-0123456789abcdef0")}}})
			h.fails("an unknown instance", err, "InvalidTarget", "")
			health, err = c.DescribeTargetHealth(h.ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: arn})
			h.ok("DescribeTargetHealth", err)
			if len(health.TargetHealthDescriptions) != 1 || aws.ToString(health.TargetHealthDescriptions[0].Target.Id) != pending {
				h.t.Errorf("after deregistering, %+v", health.TargetHealthDescriptions)
			}
		}},
		"R72 DeregisterTargets of a group a load balancer uses: draining first": {run: func(h *harness) {
			c := h.elb()
			_, tgARN, _ := h.stack(c)
			arn := aws.String(tgARN)
			kept, cut := h.running(nil), h.running(nil)
			_, err := c.RegisterTargets(h.ctx, &elb.RegisterTargetsInput{TargetGroupArn: arn, Targets: []elbtypes.TargetDescription{{Id: aws.String(kept)}, {Id: aws.String(cut)}}})
			h.ok("RegisterTargets", err)
			_, err = c.DeregisterTargets(h.ctx, &elb.DeregisterTargetsInput{TargetGroupArn: arn, Targets: []elbtypes.TargetDescription{{Id: aws.String(kept)}, {Id: aws.String(cut)}}})
			h.ok("DeregisterTargets", err)
			for read := 1; read <= DefaultTiming().DrainingPolls; read++ {
				health, err := c.DescribeTargetHealth(h.ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: arn})
				h.ok("DescribeTargetHealth", err)
				for _, d := range health.TargetHealthDescriptions {
					if d.TargetHealth.State != elbtypes.TargetHealthStateEnumDraining || d.TargetHealth.Reason != elbtypes.TargetHealthReasonEnumDeregistrationInProgress {
						h.t.Errorf("health read %d after deregistering: %s %+v, want draining Target.DeregistrationInProgress", read, aws.ToString(d.Target.Id), *d.TargetHealth)
					}
				}
				if len(health.TargetHealthDescriptions) != 2 {
					h.t.Errorf("health read %d after deregistering lists %d targets, want both, draining", read, len(health.TargetHealthDescriptions))
				}
				if read == 1 {
					_, err = h.ec2.TerminateInstances(h.ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{cut}})
					h.ok("TerminateInstances while draining", err)
				}
			}
			health, err := c.DescribeTargetHealth(h.ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: arn})
			h.ok("DescribeTargetHealth", err)
			if len(health.TargetHealthDescriptions) != 0 {
				h.t.Errorf("after the deregistration delay, targets %+v, want none", health.TargetHealthDescriptions)
			}
			if n := h.s.DrainsCut(h.region); n != 1 {
				h.t.Errorf("DrainsCut = %d, want 1 (the instance terminated while draining)", n)
			}
		}},
		"R73 CreateListener and the Describe actions": {run: func(h *harness) {
			c := h.elb()
			subnets, vpc := h.subnetsByZone()
			lbARN, tgARN, listenerARN := h.stack(c)
			_, err := h.forward(c, lbARN, tgARN, 3128, "l", "1")
			h.ok("the same listener again (idempotent)", err)
			other, err := h.tcpGroup(c, "p2", vpc, 3129, "8080")
			h.ok("CreateTargetGroup", err)
			_, err = h.forward(c, lbARN, aws.ToString(other.TargetGroups[0].TargetGroupArn), 3128)
			h.failsWith("another listener on the port", err, http.StatusBadRequest, "DuplicateListener")
			lb2, err := h.nlb(c, "p2", subnets[:1])
			h.ok("CreateLoadBalancer", err)
			_, err = h.forward(c, aws.ToString(lb2.LoadBalancers[0].LoadBalancerArn), tgARN, 3128)
			h.fails("a group another load balancer forwards to", err, "TargetGroupAssociationLimit", "")
			_, err = c.CreateListener(h.ctx, &elb.CreateListenerInput{LoadBalancerArn: aws.String(lbARN), Protocol: elbtypes.ProtocolEnumTcp, Port: aws.Int32(80),
				DefaultActions: []elbtypes.Action{{Type: elbtypes.ActionTypeEnumFixedResponse}}})
			h.failsWith("an action other than forward, not modelled", err, http.StatusNotImplemented, "NotImplemented")
			_, err = h.forward(c, lbARN+"0", tgARN, 80)
			h.fails("an unknown load balancer", err, "LoadBalancerNotFound", "")
			ls, err := c.DescribeListeners(h.ctx, &elb.DescribeListenersInput{LoadBalancerArn: aws.String(lbARN)})
			h.ok("DescribeListeners", err)
			if len(ls.Listeners) != 1 || aws.ToString(ls.Listeners[0].ListenerArn) != listenerARN || aws.ToInt32(ls.Listeners[0].Port) != 3128 ||
				len(ls.Listeners[0].DefaultActions) != 1 || aws.ToString(ls.Listeners[0].DefaultActions[0].TargetGroupArn) != tgARN {
				h.t.Errorf("listeners %+v", ls.Listeners)
			}
			_, err = c.DescribeListeners(h.ctx, &elb.DescribeListenersInput{})
			h.fails("neither a load balancer nor listeners", err, "ValidationError", "")
			_, err = c.DescribeListeners(h.ctx, &elb.DescribeListenersInput{ListenerArns: []string{listenerARN + "0"}})
			h.fails("an unknown listener", err, "ListenerNotFound", "")
			tgs, err := c.DescribeTargetGroups(h.ctx, &elb.DescribeTargetGroupsInput{LoadBalancerArn: aws.String(lbARN)})
			h.ok("DescribeTargetGroups of a load balancer", err)
			if len(tgs.TargetGroups) != 1 || aws.ToString(tgs.TargetGroups[0].TargetGroupArn) != tgARN || !slices.Equal(tgs.TargetGroups[0].LoadBalancerArns, []string{lbARN}) {
				h.t.Errorf("target groups %+v", tgs.TargetGroups)
			}
			_, err = c.DescribeTargetGroups(h.ctx, &elb.DescribeTargetGroupsInput{Names: []string{"p9"}})
			h.fails("an unknown group's name", err, "TargetGroupNotFound", "")
			_, err = c.DescribeLoadBalancers(h.ctx, &elb.DescribeLoadBalancersInput{Names: []string{"p9"}})
			h.fails("an unknown load balancer's name", err, "LoadBalancerNotFound", "")
			var names []string
			pages := elb.NewDescribeLoadBalancersPaginator(c, &elb.DescribeLoadBalancersInput{PageSize: aws.Int32(1)})
			for pages.HasMorePages() {
				page, err := pages.NextPage(h.ctx)
				h.ok("a page", err)
				for _, lb := range page.LoadBalancers {
					names = append(names, aws.ToString(lb.LoadBalancerName))
				}
			}
			if slices.Sort(names); !slices.Equal(names, []string{"p1", "p2"}) {
				h.t.Errorf("paged through %v", names)
			}
		}},
		"R74 DescribeTargetHealth: healthy while the instance runs, unless a test says not": {run: func(h *harness) {
			c := h.elb()
			_, vpc := h.subnetsByZone()
			tg, err := h.tcpGroup(c, "p1", vpc, 3128, "8080")
			h.ok("CreateTargetGroup", err)
			tgARN := aws.ToString(tg.TargetGroups[0].TargetGroupArn)
			a, b := h.running(nil), h.running(nil)
			_, err = c.RegisterTargets(h.ctx, &elb.RegisterTargetsInput{TargetGroupArn: aws.String(tgARN), Targets: []elbtypes.TargetDescription{{Id: aws.String(a)}, {Id: aws.String(b)}}})
			h.ok("RegisterTargets", err)
			health := func() map[string]string {
				out, err := c.DescribeTargetHealth(h.ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: aws.String(tgARN)})
				h.ok("DescribeTargetHealth", err)
				m := map[string]string{}
				for _, d := range out.TargetHealthDescriptions {
					m[aws.ToString(d.Target.Id)] = string(d.TargetHealth.State) + " " + string(d.TargetHealth.Reason)
					if aws.ToString(d.HealthCheckPort) != "8080" {
						h.t.Errorf("health check port %q, want 8080", aws.ToString(d.HealthCheckPort))
					}
				}
				return m
			}
			if got := health(); got[a] != "unused Target.NotInUse" {
				h.t.Errorf("a group no listener uses: %v", got)
			}
			_, err = h.nlb(c, "p1", []string{})
			h.fails("no subnet", err, "ValidationError", "")
			subnets, _ := h.subnetsByZone()
			lb, err := h.nlb(c, "p1", subnets)
			h.ok("CreateLoadBalancer", err)
			_, err = h.forward(c, aws.ToString(lb.LoadBalancers[0].LoadBalancerArn), tgARN, 3128)
			h.ok("CreateListener", err)
			if got := health(); got[a] != "healthy " || got[b] != "healthy " {
				h.t.Errorf("running targets: %v", got)
			}
			h.s.SetTargetHealth(h.region, b, false)
			if got := health(); got[a] != "healthy " || got[b] != "unhealthy Target.FailedHealthChecks" {
				h.t.Errorf("b marked unhealthy: %v", got)
			}
			h.s.SetTargetHealth(h.region, b, true)
			h.s.SetInstanceState(h.region, a, StateStopped)
			if got := health(); got[a] != "unused Target.InvalidState" || got[b] != "healthy " {
				h.t.Errorf("a stopped: %v", got)
			}
			out, err := c.DescribeTargetHealth(h.ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: aws.String(tgARN), Targets: []elbtypes.TargetDescription{{Id: aws.String(h.running(nil))}}})
			h.ok("an instance not registered", err)
			if len(out.TargetHealthDescriptions) != 1 || out.TargetHealthDescriptions[0].TargetHealth.Reason != elbtypes.TargetHealthReasonEnumNotRegistered {
				h.t.Errorf("not registered: %+v", out.TargetHealthDescriptions)
			}
		}},
		"R75 tags and deletes": {run: func(h *harness) {
			c := h.elb()
			lbARN, tgARN, listenerARN := h.stack(c)
			_, err := c.AddTags(h.ctx, &elb.AddTagsInput{ResourceArns: []string{lbARN, tgARN}, Tags: elbTagList("a", "1", "b", "2")})
			h.ok("AddTags", err)
			_, err = c.AddTags(h.ctx, &elb.AddTagsInput{ResourceArns: []string{lbARN}, Tags: elbTagList("a", "3")})
			h.ok("AddTags overwriting a key", err)
			_, err = c.AddTags(h.ctx, &elb.AddTagsInput{ResourceArns: []string{lbARN}, Tags: elbTagList("c", "1", "c", "2")})
			h.failsWith("a key twice", err, http.StatusBadRequest, "DuplicateTagKeys")
			_, err = c.AddTags(h.ctx, &elb.AddTagsInput{ResourceArns: []string{lbARN}, Tags: elbTagList("aws:x", "1")})
			h.fails("an aws: key", err, "ValidationError", "")
			var many []string
			for i := range 49 {
				many = append(many, "k"+string(rune('a'+i%26))+string(rune('a'+i/26)), "v")
			}
			_, err = c.AddTags(h.ctx, &elb.AddTagsInput{ResourceArns: []string{lbARN}, Tags: elbTagList(many...)})
			h.failsWith("more than 50 tags", err, http.StatusBadRequest, "TooManyTags")
			tags, err := c.DescribeTags(h.ctx, &elb.DescribeTagsInput{ResourceArns: []string{lbARN, tgARN, listenerARN}})
			h.ok("DescribeTags", err)
			got := map[string]string{}
			for _, d := range tags.TagDescriptions {
				for _, t := range d.Tags {
					got[aws.ToString(d.ResourceArn)] += aws.ToString(t.Key) + "=" + aws.ToString(t.Value) + " "
				}
			}
			if got[lbARN] != "a=3 b=2 " || got[tgARN] != "a=1 b=2 " || got[listenerARN] != "l=1 " {
				h.t.Errorf("tags %v", got)
			}
			_, err = c.RemoveTags(h.ctx, &elb.RemoveTagsInput{ResourceArns: []string{lbARN, tgARN + "0"}, TagKeys: []string{"b"}})
			h.fails("RemoveTags with a group that does not exist", err, "TargetGroupNotFound", "")
			_, err = c.RemoveTags(h.ctx, &elb.RemoveTagsInput{ResourceArns: []string{listenerARN + "0"}, TagKeys: []string{"l"}})
			h.fails("RemoveTags of a listener that does not exist", err, "ListenerNotFound", "")
			_, err = c.RemoveTags(h.ctx, &elb.RemoveTagsInput{ResourceArns: []string{lbARN}, TagKeys: []string{strings.Repeat("k", 129)}})
			h.fails("a key of 129 characters", err, "ValidationError", "")
			_, err = c.RemoveTags(h.ctx, &elb.RemoveTagsInput{ResourceArns: []string{lbARN}, TagKeys: []string{}})
			h.fails("no key", err, "ValidationError", "")
			_, err = c.RemoveTags(h.ctx, &elb.RemoveTagsInput{ResourceArns: []string{}, TagKeys: []string{"a"}})
			h.fails("no resource", err, "ValidationError", "")
			_, err = c.AddTags(h.ctx, &elb.AddTagsInput{ResourceArns: []string{}, Tags: elbTagList("a", "4")})
			h.fails("AddTags to no resource", err, "ValidationError", "")
			_, err = c.RemoveTags(h.ctx, &elb.RemoveTagsInput{ResourceArns: []string{lbARN, tgARN, listenerARN}, TagKeys: []string{"a", "l", "absent"}})
			h.ok("RemoveTags, a key absent from some", err)
			tags, err = c.DescribeTags(h.ctx, &elb.DescribeTagsInput{ResourceArns: []string{lbARN, tgARN, listenerARN}})
			h.ok("DescribeTags", err)
			got = map[string]string{}
			for _, d := range tags.TagDescriptions {
				got[aws.ToString(d.ResourceArn)] += "|"
				for _, t := range d.Tags {
					got[aws.ToString(d.ResourceArn)] += aws.ToString(t.Key) + "=" + aws.ToString(t.Value) + " "
				}
			}
			if got[lbARN] != "|b=2 " || got[tgARN] != "|b=2 " || got[listenerARN] != "|" {
				h.t.Errorf("after RemoveTags (the refused ones changing nothing), tags %v", got)
			}
			_, err = c.DescribeTags(h.ctx, &elb.DescribeTagsInput{ResourceArns: []string{tgARN + "0"}})
			h.fails("an unknown group's tags", err, "TargetGroupNotFound", "")
			_, err = c.DeleteTargetGroup(h.ctx, &elb.DeleteTargetGroupInput{TargetGroupArn: aws.String(tgARN)})
			h.failsWith("a group a listener forwards to", err, http.StatusBadRequest, "ResourceInUse")
			_, err = c.DeleteListener(h.ctx, &elb.DeleteListenerInput{ListenerArn: aws.String(listenerARN)})
			h.ok("DeleteListener", err)
			_, err = c.DeleteListener(h.ctx, &elb.DeleteListenerInput{ListenerArn: aws.String(listenerARN)})
			h.fails("a listener deleted", err, "ListenerNotFound", "")
			_, err = c.DeleteTargetGroup(h.ctx, &elb.DeleteTargetGroupInput{TargetGroupArn: aws.String(tgARN)})
			h.ok("the group, once no listener uses it", err)
			_, err = c.DeleteTargetGroup(h.ctx, &elb.DeleteTargetGroupInput{TargetGroupArn: aws.String(tgARN)})
			h.ok("the group again", err)
			// A load balancer takes its listeners with it.
			_, vpc := h.subnetsByZone()
			tg2, err := h.tcpGroup(c, "p2", vpc, 3128, "8080")
			h.ok("CreateTargetGroup", err)
			_, err = h.forward(c, lbARN, aws.ToString(tg2.TargetGroups[0].TargetGroupArn), 3128)
			h.ok("CreateListener", err)
			_, err = c.DeleteLoadBalancer(h.ctx, &elb.DeleteLoadBalancerInput{LoadBalancerArn: aws.String(lbARN)})
			h.ok("DeleteLoadBalancer", err)
			_, err = c.DeleteLoadBalancer(h.ctx, &elb.DeleteLoadBalancerInput{LoadBalancerArn: aws.String(lbARN)})
			h.ok("DeleteLoadBalancer again", err)
			if n := h.s.Listeners(h.region); n != 0 {
				h.t.Errorf("%d listeners left after their load balancer", n)
			}
			_, err = c.DeleteTargetGroup(h.ctx, &elb.DeleteTargetGroupInput{TargetGroupArn: tg2.TargetGroups[0].TargetGroupArn})
			h.ok("a group whose load balancer is gone", err)
			if lbs, tgs := h.s.LoadBalancers(h.region), h.s.TargetGroups(h.region); len(lbs)+len(tgs) != 0 {
				h.t.Errorf("left: %v %v", lbs, tgs)
			}
		}},
		"R76 what an ELBv2 request needs": {opts: Options{CallerPolicies: []string{`{"Version": "2012-10-17", "Statement": [
			{"Effect": "Allow", "Action": "ec2:DescribeSubnets", "Resource": "*"},
			{"Effect": "Allow", "Action": ["elasticloadbalancing:CreateLoadBalancer", "elasticloadbalancing:CreateTargetGroup"],
			 "Resource": ["arn:aws:elasticloadbalancing:*:*:loadbalancer/net/egress-*/*", "arn:aws:elasticloadbalancing:*:*:targetgroup/egress-*/*"],
			 "Condition": {"StringEquals": {"aws:RequestTag/managed-by": "egress"}}},
			{"Effect": "Allow", "Action": "elasticloadbalancing:AddTags", "Resource": "*",
			 "Condition": {"StringEquals": {"elasticloadbalancing:CreateAction": ["CreateLoadBalancer", "CreateTargetGroup", "CreateListener"]}}},
			{"Effect": "Allow", "Action": ["elasticloadbalancing:CreateListener", "elasticloadbalancing:DeleteLoadBalancer", "elasticloadbalancing:DeleteTargetGroup",
			 "elasticloadbalancing:RemoveTags"],
			 "Resource": "*", "Condition": {"StringEquals": {"aws:ResourceTag/managed-by": "egress"}}},
			{"Effect": "Allow", "Action": "elasticloadbalancing:Describe*", "Resource": "*"}]}`}}, run: func(h *harness) {
			c := h.elb()
			admin := h.elbAs(h.s.AdminAWSConfig(h.region))
			subnets, vpc := h.subnetsByZone()
			_, err := h.nlb(c, "egress-p1", subnets[:1])
			h.failsWith("a create without the tag the policy asks for", err, http.StatusForbidden, "AccessDenied")
			h.fails("a create without the tag the policy asks for", err, "AccessDenied", "is not authorized to perform: elasticloadbalancing:CreateLoadBalancer on resource: arn:aws:elasticloadbalancing:"+
				h.region+":"+h.s.AccountID()+":loadbalancer/net/egress-p1/*")
			_, err = h.nlb(c, "other", subnets[:1], "managed-by", "egress")
			h.fails("a name the policy does not cover", err, "AccessDenied", "")
			lb, err := h.nlb(c, "egress-p1", subnets[:1], "managed-by", "egress")
			h.ok("a create the policy allows, with its tags", err)
			tg, err := h.tcpGroup(c, "egress-p1", vpc, 3128, "8080", "managed-by", "egress")
			h.ok("a group the policy allows", err)
			lbARN, tgARN := aws.ToString(lb.LoadBalancers[0].LoadBalancerArn), aws.ToString(tg.TargetGroups[0].TargetGroupArn)
			_, err = h.forward(c, lbARN, tgARN, 3128)
			h.ok("a listener of a load balancer of the tag", err)
			_, err = c.RegisterTargets(h.ctx, &elb.RegisterTargetsInput{TargetGroupArn: aws.String(tgARN), Targets: []elbtypes.TargetDescription{{Id: aws.String("i-0123456789abcdef0")}}})
			h.fails("RegisterTargets, no statement allows it", err, "AccessDenied", "elasticloadbalancing:RegisterTargets on resource: "+tgARN)
			_, err = c.AddTags(h.ctx, &elb.AddTagsInput{ResourceArns: []string{lbARN}, Tags: elbTagList("a", "b")})
			h.fails("AddTags outside a create", err, "AccessDenied", "")
			other, err := h.nlb(admin, "egress-p2", subnets[:1])
			h.ok("another's load balancer, by the administrator", err)
			_, err = c.DeleteLoadBalancer(h.ctx, &elb.DeleteLoadBalancerInput{LoadBalancerArn: other.LoadBalancers[0].LoadBalancerArn})
			h.fails("a load balancer without the tag", err, "AccessDenied", "")
			_, err = c.RemoveTags(h.ctx, &elb.RemoveTagsInput{ResourceArns: []string{lbARN}, TagKeys: []string{"a"}})
			h.ok("RemoveTags of a load balancer of the tag", err)
			_, err = c.RemoveTags(h.ctx, &elb.RemoveTagsInput{ResourceArns: []string{lbARN, aws.ToString(other.LoadBalancers[0].LoadBalancerArn)}, TagKeys: []string{"a"}})
			h.fails("RemoveTags of one without the tag", err, "AccessDenied", "elasticloadbalancing:RemoveTags on resource: "+aws.ToString(other.LoadBalancers[0].LoadBalancerArn))
			_, err = c.RemoveTags(h.ctx, &elb.RemoveTagsInput{ResourceArns: []string{tgARN}, TagKeys: []string{"managed-by"}})
			h.ok("RemoveTags of the very tag the statement asks for (the condition reads the tags before)", err)
			_, err = c.RemoveTags(h.ctx, &elb.RemoveTagsInput{ResourceArns: []string{tgARN}, TagKeys: []string{"a"}})
			h.fails("RemoveTags once the group lost the tag", err, "AccessDenied", "")
			_, err = admin.AddTags(h.ctx, &elb.AddTagsInput{ResourceArns: []string{tgARN}, Tags: elbTagList("managed-by", "egress")})
			h.ok("the tag again, by the administrator", err)
			_, err = c.DescribeTargetHealth(h.ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: aws.String(tgARN)})
			h.ok("a Describe action", err)
			_, err = c.DeleteLoadBalancer(h.ctx, &elb.DeleteLoadBalancerInput{LoadBalancerArn: aws.String(lbARN)})
			h.ok("its own load balancer", err)
			_, err = c.DeleteTargetGroup(h.ctx, &elb.DeleteTargetGroupInput{TargetGroupArn: aws.String(tgARN)})
			h.ok("its own group", err)
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r.run(newHarness(t, r.opts))
		})
	}
}

// The fake's ELBv2 wire against the SDK's own snapshots of it (request_snapshot/<Action>.request.snap and
// response_snapshot/<Action>.response.snap in the module): the parameters the fake accepts for each action
// are those the SDK's serializer sends, and each element the fake writes in an answer is one the SDK's answer
// names (R69).
func TestELBWireMatchesSDK(t *testing.T) {
	t.Parallel()
	dir := moduleDir(t, "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2")
	topRE := regexp.MustCompile(`(?:^|&)([A-Za-z0-9]+)[.=]`)
	elementRE := regexp.MustCompile(`<([A-Za-z0-9]+)>`)
	for action := range elbActions {
		b, err := os.ReadFile(filepath.Join(dir, "request_snapshot", action+".request.snap"))
		if err != nil {
			t.Errorf("%s: %v", action, err)
			continue
		}
		body := string(b)[strings.LastIndex(string(b), "\n\n")+2:]
		var want []string
		for _, m := range topRE.FindAllStringSubmatch(body, -1) {
			if m[1] != "Action" && m[1] != "Version" && !slices.Contains(want, m[1]) {
				want = append(want, m[1])
			}
		}
		sort.Strings(want)
		if got := slices.Sorted(slices.Values(elbParams[action])); !slices.Equal(got, want) {
			t.Errorf("%s: elbParams %v, the SDK's serializer sends %v", action, got, want)
		}
	}
	h := newHarness(t, Options{})
	c := h.elb()
	lbARN, tgARN, listenerARN := h.stack(c)
	_, err := c.AddTags(h.ctx, &elb.AddTagsInput{ResourceArns: []string{lbARN}, Tags: elbTagList("k", "v")})
	h.ok("AddTags", err)
	_, err = c.RegisterTargets(h.ctx, &elb.RegisterTargetsInput{TargetGroupArn: aws.String(tgARN), Targets: []elbtypes.TargetDescription{{Id: aws.String(h.running(nil))}}})
	h.ok("RegisterTargets", err)
	h.s.mu.Lock()
	rg := h.s.regions[h.region]
	h.s.mu.Unlock()
	for action, form := range map[string]string{
		"DescribeLoadBalancers": "",
		"DescribeTargetGroups":  "",
		"DescribeListeners":     "LoadBalancerArn=" + lbARN,
		"DescribeTargetHealth":  "TargetGroupArn=" + tgARN,
		"DescribeTags":          "ResourceArns.member.1=" + lbARN + "&ResourceArns.member.2=" + listenerARN,
		"RemoveTags":            "ResourceArns.member.1=" + lbARN + "&TagKeys.member.1=k",
	} {
		snap, err := os.ReadFile(filepath.Join(dir, "response_snapshot", action+".response.snap"))
		if err != nil {
			t.Fatal(err)
		}
		var sdk []string
		for _, m := range elementRE.FindAllStringSubmatch(string(snap), -1) {
			sdk = append(sdk, m[1])
		}
		f, _ := parseForm(form)
		h.s.mu.Lock()
		out, e := elbActions[action](h.s, rg, &call{form: f})
		h.s.mu.Unlock()
		if e != nil {
			t.Fatalf("%s: %v", action, e)
		}
		rec := httptest.NewRecorder()
		writeQueryAnswer(rec, elbNamespace, action, out, "id")
		for _, m := range elementRE.FindAllStringSubmatch(rec.Body.String(), -1) {
			if !slices.Contains(sdk, m[1]) && m[1] != "ResponseMetadata" && m[1] != "RequestId" {
				t.Errorf("%s: the fake writes <%s>, which the SDK's answer does not name", action, m[1])
			}
		}
	}
}

func parseForm(q string) (form, error) {
	v, err := url.ParseQuery(q)
	return form{v}, err
}
