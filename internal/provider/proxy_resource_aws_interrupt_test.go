package provider

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	awsguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
)

// kill -9 in the middle of an aws create: the provider process and the CLI die at a known point of the
// create's requests, so neither the backend nor the CLI records or cleans up anything. Each object the
// create made by then must be adopted by the next apply of the configuration or belong to a proxy that
// egress_proxy_orphans lists (and that its id deletes whole); what is neither is a leak, and every such
// leak this test knows of is named in its case, so that a new one fails it and a fixed one does too.

// providerProcessEnv makes the test binary, started again by startProviderProcess, serve the real provider
// for the CLI (TestProviderProcessForKill) until it is killed.
const providerProcessEnv = "EGRESS_TEST_PROVIDER_PROCESS"

// reattachLinePrefix starts the line on which that process tells its TF_REATTACH_PROVIDERS value, and
// appliedLine is the line it writes each time an ApplyResourceChange has returned: the event a test waits
// for when the provider lives on after its CLI died.
const (
	reattachLinePrefix = "egress-provider-reattach: "
	appliedLine        = "egress-provider-applied"
)

// reportingApplies is a provider server that writes appliedLine once each ApplyResourceChange returns.
type reportingApplies struct{ tfprotov6.ProviderServer }

func (r reportingApplies) ApplyResourceChange(ctx context.Context, req *tfprotov6.ApplyResourceChangeRequest) (*tfprotov6.ApplyResourceChangeResponse, error) {
	resp, err := r.ProviderServer.ApplyResourceChange(ctx, req)
	fmt.Println(appliedLine)
	return resp, err
}

// TestProviderProcessForKill is no test of its own: it is the provider process the kill -9 tests start and
// kill, a process apart from the test's so that killing it loses everything it held, as a real kill does.
func TestProviderProcessForKill(t *testing.T) {
	if os.Getenv(providerProcessEnv) == "" {
		t.Skip("the provider process of the kill -9 tests: started by them, never on its own")
	}
	server := providerserver.NewProtocol6(New("test")())
	reattach := serveProviderServerForCLI(t, func() tfprotov6.ProviderServer { return reportingApplies{server()} })
	fmt.Println(reattachLinePrefix + reattach)
	select {} // until killed
}

// providerProcess is the real provider served in a process of its own.
type providerProcess struct {
	reattach string
	cmd      *exec.Cmd
	stderr   testutil.LockedBuffer
	// applied receives a value each time an ApplyResourceChange of the process returned.
	applied chan struct{}
}

// startProviderProcess starts the test binary again as the provider's process and returns once it serves.
func startProviderProcess(t *testing.T) *providerProcess {
	t.Helper()
	p := &providerProcess{cmd: exec.Command(os.Args[0], "-test.run=^TestProviderProcessForKill$", "-test.count=1"), applied: make(chan struct{}, 16)}
	p.cmd.Env = append(os.Environ(), providerProcessEnv+"=1")
	// Killed with the test, should the test die first.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting the provider process: %v", err)
	}
	t.Cleanup(p.kill)
	lines := bufio.NewReader(stdout)
	line, err := lines.ReadString('\n')
	reattach, ok := strings.CutPrefix(strings.TrimSpace(line), reattachLinePrefix)
	if err != nil || !ok {
		t.Fatalf("the provider process did not start: %q, %v; its stderr:\n%s", line, err, p.stderr.String())
	}
	p.reattach = reattach
	go func() {
		for {
			line, err := lines.ReadString('\n')
			if strings.TrimSpace(line) == appliedLine {
				p.applied <- struct{}{}
			}
			if err != nil {
				return
			}
		}
	}()
	return p
}

// kill is kill -9: the process ends at once, whatever it was doing.
func (p *providerProcess) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// awsKillPoint is where a create dies.
type awsKillPoint struct {
	name string
	// staticIP asks for an Elastic IP of the proxy's own.
	staticIP bool
	// instances is how many instances the proxy has, each in a subnet of its own behind a load balancer; 0 is
	// one.
	instances int
	// arm prepares the fake before the apply starts, and returns what waits for the point: the pause holding
	// the request the provider process is killed in, once reached.
	arm func(fake *ec2fake.Server) func() *ec2fake.Pause
	// leaksUnnamed are the objects, by kind, that a kill here leaves of a proxy named after its UID (name
	// unset) and that the next apply does not adopt and no orphan list shows. A proxy with a name leaks
	// nothing: the next apply of its name adopts what is not listed.
	leaksUnnamed []string
}

// pauseAt arms a pause of the next request of action.
func pauseAt(action string, after bool) func(*ec2fake.Server) func() *ec2fake.Pause {
	return pauseAtNth(action, 1, after)
}

// pauseAtNth arms a pause of the nth next request of action: each one before it is held in its turn, the
// next pause armed while it waits (so that no request of action slips by), and let go.
func pauseAtNth(action string, n int, after bool) func(*ec2fake.Server) func() *ec2fake.Pause {
	return func(fake *ec2fake.Server) func() *ec2fake.Pause {
		p := fake.PauseNext(action, after)
		return func() *ec2fake.Pause {
			for range n - 1 {
				<-p.Reached()
				next := fake.PauseNext(action, after)
				p.Resume()
				p = next
			}
			<-p.Reached()
			return p
		}
	}
}

var awsKillPoints = []awsKillPoint{
	// The group is made first, with its tags, and stands for the proxy in ListByTag until an instance does:
	// from then on a kill leaves nothing that is neither adopted nor listed.
	{name: "the security group made, no parameter yet", arm: pauseAt("PutParameter", false)},
	{name: "a parameter written with its tags", arm: pauseAt("PutParameter", true)},
	{name: "the parameters written", arm: pauseAt("RunInstances", false)},
	{name: "the instance launched, its answer lost", arm: pauseAt("RunInstances", true)},
	{
		name: "waiting for the instance to run",
		arm: func(fake *ec2fake.Server) func() *ec2fake.Pause {
			fake.StickNextLaunchInPending(1)
			launched := fake.PauseNext("RunInstances", true)
			return func() *ec2fake.Pause {
				<-launched.Reached()
				// The next DescribeInstances is the wait's first poll of the pending instance.
				poll := fake.PauseNext("DescribeInstances", false)
				launched.Resume()
				<-poll.Reached()
				return poll
			}
		},
	},
	{name: "an Elastic IP allocated, not associated", staticIP: true, arm: pauseAt("AllocateAddress", true)},
}

// awsObject is one object of the fake that a proxy is made of.
type awsObject struct {
	kind, id string
	// name is the proxy's it carries (its Name tag, or the path of a parameter), uid its egress-uid tag.
	name, uid string
}

// what names the object by kind, and a parameter by its last path element.
func (o awsObject) what() string {
	if o.kind == "parameter" {
		return "parameter " + o.id[strings.LastIndex(o.id, "/")+1:]
	}
	return o.kind
}

// awsObjects lists the fake's proxy objects: live instances, security groups but the VPC's default, Elastic
// IPs and parameters under the proxies' prefix.
func awsObjects(t *testing.T, fake *ec2fake.Server) map[string]awsObject {
	t.Helper()
	out := map[string]awsObject{}
	add := func(o awsObject) { out[o.kind+" "+o.id] = o }
	for _, in := range liveInstances(fake) {
		add(awsObject{"instance", in.ID, in.Tags["Name"], in.Tags[backend.LabelUID]})
	}
	for _, g := range fake.SecurityGroups(awsTestRegion) {
		if g.Name != "default" {
			add(awsObject{"security group", g.ID, g.Tags["Name"], g.Tags[backend.LabelUID]})
		}
	}
	for _, a := range fake.Addresses(awsTestRegion) {
		add(awsObject{"Elastic IP", a.AllocationID, a.Tags["Name"], a.Tags[backend.LabelUID]})
	}
	for _, p := range fake.Parameters(awsTestRegion) {
		if rest, ok := strings.CutPrefix(p.Name, awsguest.ParameterPrefix); ok {
			name, _, _ := strings.Cut(rest, "/")
			add(awsObject{"parameter", p.Name, name, p.Tags[backend.LabelUID]})
		}
	}
	for _, o := range elbObjects(t, fake) {
		add(o)
	}
	return out
}

// elbObjects lists the fake's load balancers and target groups, read as an administrator would, with the
// proxy name and uid their tags carry.
func elbObjects(t *testing.T, fake *ec2fake.Server) []awsObject {
	t.Helper()
	if len(fake.LoadBalancers(awsTestRegion))+len(fake.TargetGroups(awsTestRegion)) == 0 {
		return nil // no request to the fake where there is nothing to read
	}
	ctx := t.Context()
	admin := elb.NewFromConfig(fake.AdminAWSConfig(awsTestRegion))
	var out []awsObject
	tagged := func(kind, id, arn string) {
		got, err := admin.DescribeTags(ctx, &elb.DescribeTagsInput{ResourceArns: []string{arn}})
		if err != nil {
			t.Fatalf("reading the tags of %s %s: %v", kind, id, err)
		}
		tags := map[string]string{}
		for _, d := range got.TagDescriptions {
			for _, tag := range d.Tags {
				tags[awssdk.ToString(tag.Key)] = awssdk.ToString(tag.Value)
			}
		}
		out = append(out, awsObject{kind, id, tags["Name"], tags[backend.LabelUID]})
	}
	lbs, err := admin.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{})
	if err != nil {
		t.Fatalf("listing the load balancers: %v", err)
	}
	for _, lb := range lbs.LoadBalancers {
		tagged("load balancer", awssdk.ToString(lb.LoadBalancerName), awssdk.ToString(lb.LoadBalancerArn))
	}
	tgs, err := admin.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{})
	if err != nil {
		t.Fatalf("listing the target groups: %v", err)
	}
	for _, tg := range tgs.TargetGroups {
		tagged("target group", awssdk.ToString(tg.TargetGroupName), awssdk.ToString(tg.TargetGroupArn))
	}
	return out
}

// awsCLI runs the CLI under test in one configuration directory.
type awsCLI struct {
	t   *testing.T
	dir string
	env []string
}

func newAWSCLI(t *testing.T, config string) *awsCLI {
	t.Helper()
	c := &awsCLI{t: t, dir: t.TempDir()}
	c.write(config)
	cliConfig := filepath.Join(c.dir, "cli.tfrc")
	if err := os.WriteFile(cliConfig, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+cliConfig, "TF_IN_AUTOMATION=1")
	return c
}

// cmd is one CLI run against the provider served at reattach.
func (c *awsCLI) cmd(reattach string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Getenv("TF_ACC_TERRAFORM_PATH"), append(args, "-no-color")...)
	cmd.Dir, cmd.Env = c.dir, append(slices.Clip(c.env), "TF_REATTACH_PROVIDERS="+reattach)
	return cmd
}

// run runs the CLI to its end and returns its output, whitespace made single spaces for matching.
func (c *awsCLI) run(reattach string, args ...string) (string, error) {
	out, err := c.cmd(reattach, args...).CombinedOutput()
	return strings.Join(strings.Fields(string(out)), " "), err
}

func (c *awsCLI) mustRun(reattach string, args ...string) string {
	c.t.Helper()
	out, err := c.run(reattach, args...)
	if err != nil {
		c.t.Fatalf("%s %s: %v\n%s", filepath.Base(os.Getenv("TF_ACC_TERRAFORM_PATH")), strings.Join(args, " "), err, out)
	}
	return out
}

// stateProxy is the proxy the state holds: its id, name and uid; zero when it holds none.
func (c *awsCLI) stateProxy(reattach string) (id, name, uid string) {
	c.t.Helper()
	id, name, uid, _ = c.stateProxyEgress(reattach)
	return id, name, uid
}

// stateValues are the attributes of the proxy the state holds; nil when it holds none.
func (c *awsCLI) stateValues(reattach string) map[string]any {
	c.t.Helper()
	out, err := c.cmd(reattach, "show", "-json").Output()
	if err != nil {
		c.t.Fatalf("show -json: %v", err)
	}
	var state struct {
		Values struct {
			RootModule struct {
				Resources []struct {
					Type   string         `json:"type"`
					Values map[string]any `json:"values"`
				} `json:"resources"`
			} `json:"root_module"`
		} `json:"values"`
	}
	if err := json.Unmarshal(out, &state); err != nil {
		c.t.Fatalf("reading show -json: %v\n%s", err, out)
	}
	for _, r := range state.Values.RootModule.Resources {
		if r.Type == "egress_proxy" {
			return r.Values
		}
	}
	return nil
}

// stateProxyEgress is stateProxy with the proxy's egress_address.
func (c *awsCLI) stateProxyEgress(reattach string) (id, name, uid, egress string) {
	c.t.Helper()
	values := c.stateValues(reattach)
	str := func(k string) string { s, _ := values[k].(string); return s }
	return str("id"), str("name"), str("uid"), str("egress_address")
}

// awsOrphans lists the owner's orphans with egress_proxy_orphans, through the CLI, given the ids a state
// holds: their ids by name.
func awsOrphans(t *testing.T, fake *ec2fake.Server, reattach string, known []string) map[string]string {
	t.Helper()
	return listOrphans(t, awsConfig(t, fake, "", ""), "aws", reattach, known)
}

// serveForKillTests checks the kill tests can run and serves the real provider in this process for the CLI
// runs after a kill; only the killed run has a provider process of its own.
func serveForKillTests(t *testing.T) string {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1")
	}
	testAccPreCheck(t)
	return serveProviderForCLI(t, New("test")())
}

func TestAccProxyAWS_killedApply(t *testing.T) {
	inProcess := serveForKillTests(t)
	for _, kp := range awsKillPoints {
		for _, named := range []bool{true, false} {
			if kp.staticIP && !named {
				continue // static_egress_ip needs a name: the address is found again by it
			}
			t.Run(fmt.Sprintf("%s, name %s", kp.name, map[bool]string{true: "set", false: "unset"}[named]), func(t *testing.T) {
				testAWSKilledApply(t, inProcess, kp, named, false)
			})
		}
	}
	// The CLI killed alone: the provider lives on, its request cancelled with the CLI's connection, and
	// whatever it does then must lose nothing either. Two points: one before the launch, one after.
	for _, kp := range []awsKillPoint{awsKillPoints[1], awsKillPoints[3]} {
		t.Run(kp.name+", name unset, the CLI alone killed", func(t *testing.T) {
			testAWSKilledApply(t, inProcess, kp, false, true)
		})
	}
}

// A proxy of three instances killed in its create: after its first instance (which a proxy of one shares),
// at its second, and around its load balancer. Every object is adopted or its proxy listed, as for one.
var awsSeveralKillPoints = []awsKillPoint{
	{name: "the first instance running, the second launched, its answer lost", instances: 3, arm: pauseAtNth("RunInstances", 2, true)},
	{name: "the members running, the target group made, no load balancer", instances: 3, arm: pauseAt("CreateLoadBalancer", false)},
	{name: "the load balancer made, its answer lost", instances: 3, arm: pauseAt("CreateLoadBalancer", true)},
	{name: "the listener made, its answer lost", instances: 3, arm: pauseAt("CreateListener", true)},
}

func TestAccProxyAWS_killedApplyOfSeveral(t *testing.T) {
	inProcess := serveForKillTests(t)
	for _, kp := range awsSeveralKillPoints {
		for _, named := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, name %s", kp.name, map[bool]string{true: "set", false: "unset"}[named]), func(t *testing.T) {
				testAWSKilledApply(t, inProcess, kp, named, false)
			})
		}
	}
}

func awsKillProxy(fake *ec2fake.Server, name, instanceType string, staticIP bool) string {
	return awsKillProxyOf(fake, name, instanceType, staticIP, 0)
}

// awsKillProxyOf is awsKillProxy of instances instances (0: one), several placed in every subnet of the
// region.
func awsKillProxyOf(fake *ec2fake.Server, name, instanceType string, staticIP bool, instances int) string {
	placement := fmt.Sprintf("subnet_id = %q", fake.Subnets(awsTestRegion)[0].ID)
	if instances > 1 {
		var subnets []string
		for _, sn := range fake.Subnets(awsTestRegion) {
			subnets = append(subnets, strconv.Quote(sn.ID))
		}
		placement = fmt.Sprintf("subnet_ids = [%s]\n    instances = %d", strings.Join(subnets, ", "), instances)
	}
	return fmt.Sprintf(`
resource "egress_proxy" "test" {
  %s
  aws = {
    %s
    iam_instance_profile = "egress-proxy"
    instance_type        = %q
    static_egress_ip     = %t
  }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]
}
`, name, placement, instanceType, staticIP)
}

func testAWSKilledApply(t *testing.T, inProcess string, kp awsKillPoint, named, cliOnly bool) {
	fake := awsFake(t, ec2fake.Options{})
	name := ""
	if named {
		name = `name = "egress-acc"`
	}
	cli := newAWSCLI(t, awsConfig(t, fake, "", awsKillProxyOf(fake, name, "t3.micro", kp.staticIP, kp.instances)))
	cli.mustRun(inProcess, "init")
	made := cli.killedApply(fake, kp, cliOnly)
	if id, _, _ := cli.stateProxy(inProcess); id != "" {
		t.Fatalf("the killed apply recorded %s: the test needs a kill before anything is recorded", id)
	}
	launched := false
	for _, o := range made {
		launched = launched || o.kind == "instance"
	}
	var wantLeaks []string
	if !named {
		wantLeaks = kp.leaksUnnamed
	}
	// A live instance of the name with another uid: the next apply is refused, not taken over (the
	// contract's rule); it is the orphan list's to show.
	refused := refusedNever
	if named && launched {
		refused = refusedAlways
	}
	leaked, _ := cli.recoverAfterKill(fake, inProcess, made, refused, wantLeaks)
	cli.mustRun(inProcess, "destroy", "-auto-approve")
	checkNothingLeft(t, fake, leaked)
}

// awsReplacementKillPoint is where the replacement of a proxy with static_egress_ip dies: in the delete of
// the old proxy (which keeps the Elastic IP for its successor) or in the successor's create.
type awsReplacementKillPoint struct {
	awsKillPoint
	// successorLaunched: the successor's instance was launched. Whether the CLI had recorded the old
	// proxy's delete before it died is up to the CLI's timing: if it had, the state holds no proxy and the
	// next apply is refused over the successor, whose uid no state holds (as over a killed create's), until
	// its proxy, listed as an orphan, is deleted; if not, the refresh finds the successor under the old id.
	successorLaunched bool
	// deleteRecorded: the state is made what the CLI leaves when it had recorded the old proxy's delete before
	// it died (no proxy), so that the next apply is refused over the successor and the refused path is taken
	// whatever the CLI's timing.
	deleteRecorded bool
}

var awsReplacementKillPoints = []awsReplacementKillPoint{
	{awsKillPoint: awsKillPoint{name: "the old instance terminating", arm: pauseAt("TerminateInstances", true)}},
	{awsKillPoint: awsKillPoint{name: "the old proxy's security group deleted, its parameters not", arm: pauseAt("DeleteParameters", false)}},
	{awsKillPoint: awsKillPoint{name: "the successor launched, its answer lost", arm: pauseAt("RunInstances", true)}, successorLaunched: true},
	{awsKillPoint: awsKillPoint{name: "the kept Elastic IP about to be associated to the successor", arm: pauseAt("AssociateAddress", false)}, successorLaunched: true},
	{awsKillPoint: awsKillPoint{name: "the successor launched, its answer lost, the old proxy's delete recorded", arm: pauseAt("RunInstances", true)}, successorLaunched: true, deleteRecorded: true},
	{awsKillPoint: awsKillPoint{name: "the kept Elastic IP about to be associated to the successor, the old proxy's delete recorded", arm: pauseAt("AssociateAddress", false)}, successorLaunched: true, deleteRecorded: true},
}

// A replacement killed: the next apply converges on one proxy of the name, which egresses from the Elastic
// IP the first one had (what static_egress_ip promises across a replacement), and nothing is lost.
func TestAccProxyAWS_killedReplacement(t *testing.T) {
	inProcess := serveForKillTests(t)
	for _, kp := range awsReplacementKillPoints {
		t.Run(kp.name, func(t *testing.T) {
			fake := awsFake(t, ec2fake.Options{})
			cli := newAWSCLI(t, awsConfig(t, fake, "", awsKillProxy(fake, `name = "egress-acc"`, "t3.micro", true)))
			cli.mustRun(inProcess, "init")
			cli.mustRun(inProcess, "apply", "-auto-approve")
			addresses := fake.Addresses(awsTestRegion)
			if len(addresses) != 1 {
				t.Fatalf("the first apply made %d Elastic IPs, want 1", len(addresses))
			}
			kept := addresses[0]
			// Another instance type replaces the instance.
			cli.write(awsConfig(t, fake, "", awsKillProxy(fake, `name = "egress-acc"`, "t3.small", true)))
			made := cli.killedApply(fake, kp.awsKillPoint, false)
			refused := refusedNever
			if kp.successorLaunched {
				refused = refusedMaybe
			}
			if kp.deleteRecorded {
				// A state that holds no proxy. Not state rm: the kill may have caught the CLI writing the
				// state, which it leaves empty, and state rm refuses an empty state.
				if err := os.Remove(filepath.Join(cli.dir, "terraform.tfstate")); err != nil {
					t.Fatal(err)
				}
				refused = refusedAlways
			}
			leaked, wasRefused := cli.recoverAfterKill(fake, inProcess, made, refused, nil)
			if plan, err := cli.run(inProcess, "plan", "-detailed-exitcode"); err != nil {
				t.Errorf("the plan after recovering is not empty (%v):\n%s", err, plan)
			}
			live := liveInstances(fake)
			if len(live) != 1 || live[0].InstanceType != "t3.small" {
				t.Fatalf("after recovering, the live instances are %+v: want one t3.small", live)
			}
			var egress []ec2fake.Address
			for _, a := range fake.Addresses(awsTestRegion) {
				if a.InstanceID == live[0].ID {
					egress = append(egress, a)
				}
			}
			if len(egress) != 1 {
				t.Fatalf("after recovering, the proxy's instance has %d Elastic IPs (%+v), want 1", len(egress), egress)
			}
			if _, _, _, reported := cli.stateProxyEgress(inProcess); reported != egress[0].PublicIP {
				t.Errorf("the state's egress_address is %q, the instance's Elastic IP %s", reported, egress[0].PublicIP)
			}
			if n := len(fake.Addresses(awsTestRegion)); n != 1 {
				t.Errorf("after recovering the fake holds %d Elastic IPs, want the proxy's alone", n)
			}
			if !wasRefused {
				// static_egress_ip's promise across a replacement: the successor took the address the first
				// proxy had, the same allocation.
				if egress[0].AllocationID != kept.AllocationID {
					t.Errorf("the proxy egresses from %s (%s) after recovering, want the Elastic IP it had before the replacement, %s (%s)",
						egress[0].PublicIP, egress[0].AllocationID, kept.PublicIP, kept.AllocationID)
				}
			} else {
				// Refused: the successor's proxy, which held the kept address, was listed as an orphan and
				// deleted by its id, and a delete gives back the proxy's address (what the docs say of
				// static_egress_ip: an address left by a replacement that never finished is listed by
				// egress_proxy_orphans). So the kept address is released, not leaked nor kept, and the
				// proxy the refused apply made again egresses from an address of its own.
				if _, listed := made["Elastic IP "+kept.AllocationID]; !listed {
					t.Errorf("the kept Elastic IP %s was gone after the kill already: the refused path proves nothing of it", kept.AllocationID)
				}
				for _, a := range fake.Addresses(awsTestRegion) {
					if a.AllocationID == kept.AllocationID {
						t.Errorf("the kept Elastic IP %s (%s) is still allocated after its proxy was deleted as an orphan: %+v", kept.AllocationID, kept.PublicIP, a)
					}
				}
				if egress[0].PublicIP == kept.PublicIP {
					t.Errorf("the proxy made again egresses from the released address %s", kept.PublicIP)
				}
			}
			cli.mustRun(inProcess, "destroy", "-auto-approve")
			checkNothingLeft(t, fake, leaked)
		})
	}
}

// write replaces the configuration.
func (c *awsCLI) write(config string) {
	c.t.Helper()
	config = "terraform {\n  required_providers {\n    egress = { source = \"" + providerAddress + "\" }\n  }\n}\n" + config
	if err := os.WriteFile(filepath.Join(c.dir, "main.tf"), []byte(config), 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// killedApply runs an apply against a provider process of its own until the fake reaches the kill point,
// then kills the CLI with SIGKILL and, unless cliOnly, the provider process too. With cliOnly the provider
// lives on until the apply it was serving returns, then dies. It returns the fake's proxy objects then.
func (c *awsCLI) killedApply(fake *ec2fake.Server, kp awsKillPoint, cliOnly bool) map[string]awsObject {
	t := c.t
	t.Helper()
	reached := kp.arm(fake)
	var pause *ec2fake.Pause
	provider := killApplyAt(c, func() { pause = reached() }, cliOnly)
	// The held request's client is gone: a request held before the fake handled it is never handled, one
	// held after keeps its change.
	pause.Drop()
	if cliOnly {
		select {
		case <-provider.applied:
		case <-time.After(2 * time.Minute):
			t.Fatalf("the provider did not end the apply in 2 minutes after its CLI died; its stderr:\n%s", provider.stderr.String())
		}
		provider.kill()
	}
	made := awsObjects(t, fake)
	if len(made) == 0 {
		t.Fatal("the killed apply left nothing: the point is too early to test anything")
	}
	var inventory []string
	for _, o := range made {
		inventory = append(inventory, fmt.Sprintf("%s %s (%s, uid %s)", o.kind, o.id, o.name, o.uid))
	}
	slices.Sort(inventory)
	t.Logf("killed at %q, the fake holds:\n  %s", kp.name, strings.Join(inventory, "\n  "))
	return made
}

// recoverAfterKill applies the configuration again after a killed apply and checks that each object the
// fake held after the kill (made) is removed, adopted by the state's proxy, or belongs to a proxy that
// egress_proxy_orphans lists; the ones that are none of these are leaks, which must be wantLeaks (by kind).
// wantRefused says whether the next apply is refused over an instance of the name that another proxy owns. The
// orphans are then deleted by the ids the list gave and a refused apply made again. It returns the leaked
// objects' keys, and whether the next apply was refused.
func (c *awsCLI) recoverAfterKill(fake *ec2fake.Server, inProcess string, made map[string]awsObject, wantRefused refusal, wantLeaks []string) (leakedIDs map[string]bool, refused bool) {
	t := c.t
	t.Helper()
	next, err := c.run(inProcess, "apply", "-auto-approve")
	refused = err != nil && strings.Contains(next, "already exists") && strings.Contains(next, "belongs to proxy")
	switch {
	case wantRefused == refusedAlways && !refused:
		t.Fatalf("the next apply over the killed create's instance: %v, want a refusal naming its proxy:\n%s", err, next)
	case wantRefused == refusedMaybe && refused:
		t.Logf("the next apply was refused over the instance the killed apply launched")
	case err != nil && !refused || err != nil && wantRefused == refusedNever:
		t.Fatalf("the next apply: %v\n%s", err, next)
	}
	stateID, stateName, stateUID := c.stateProxy(inProcess)
	var known []string
	if stateID != "" {
		known = append(known, stateID)
	}
	orphans := awsOrphans(t, fake, inProcess, known)

	now := awsObjects(t, fake)
	var leaked []string
	leakedIDs = map[string]bool{}
	for key, o := range made {
		cur, present := now[key]
		switch {
		case !present:
			t.Logf("%s %s: removed by the next apply", o.kind, o.id)
		case stateID != "" && cur.name == stateName && cur.uid == stateUID:
			t.Logf("%s %s: adopted by the next apply (%s)", o.kind, o.id, stateID)
		case orphans[cur.name] != "":
			t.Logf("%s %s: its proxy %s is listed by egress_proxy_orphans", o.kind, o.id, cur.name)
		default:
			leaked = append(leaked, o.what())
			leakedIDs[key] = true
			t.Logf("LEAK: %s %s (proxy %s, uid %q): not adopted, and no orphan list shows it", o.kind, o.id, cur.name, cur.uid)
		}
	}
	slices.Sort(leaked)
	if !slices.Equal(leaked, wantLeaks) {
		t.Errorf("leaked %v, want %v", leaked, wantLeaks)
	}

	b := awsTestBackend(t, fake)
	for _, orphan := range orphans {
		id, diags := parseID(orphan)
		if diags.HasError() {
			t.Fatalf("the orphan list's id %s does not parse: %v", orphan, diags)
		}
		if err := b.Delete(t.Context(), id); err != nil {
			t.Fatalf("deleting orphan %s: %v", orphan, err)
		}
	}
	if refused {
		c.mustRun(inProcess, "apply", "-auto-approve")
	}
	return leakedIDs, refused
}

// refusal is whether the apply after a kill is refused over an instance the killed apply launched.
type refusal int

const (
	refusedNever refusal = iota
	refusedAlways
	refusedMaybe
)

// checkNothingLeft: after the destroy, the fake holds no proxy object but the known leaks.
func checkNothingLeft(t *testing.T, fake *ec2fake.Server, leaked map[string]bool) {
	t.Helper()
	var left []string
	for key, o := range awsObjects(t, fake) {
		if !leaked[key] {
			left = append(left, fmt.Sprintf("%s %s (%s)", o.kind, o.id, o.name))
		}
	}
	if len(left) > 0 {
		t.Errorf("after deleting the orphans and destroying, left behind: %v", left)
	}
}
