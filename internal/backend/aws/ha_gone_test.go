package aws

import (
	"context"
	"slices"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// A member's instance ended behind Terraform's back (terminated through EC2 and still shutting down, or
// terminated and listed as such): Get reports it alone Gone, the proxy Degraded and still Reconfigurable (Update
// comes first), and Update makes exactly one instance again, in the member's subnet, with the Spec's labels,
// registered with the same target group behind the same load balancer, the other members left as they were.
// A member merely stopped is unhealthy, not Gone, and Update launches nothing for it.
func TestSeveralInstancesGoneMemberMadeAgain(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"terminated through EC2, shutting down", "terminated", "stopped"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			shuttingDown := how == "terminated through EC2, shutting down"
			fake, b, spec, inst := createThenEnd(t, "gone", 1, how)
			ctx := context.Background()
			lost := inst.Members[1].Name
			wantGone := how != "stopped"
			got, err := b.Get(ctx, inst.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Members) != 3 || got.State != backend.StateDegraded || !got.Reconfigurable || got.Members[1].Healthy ||
				got.Members[1].Gone != wantGone || got.Members[0].Gone || got.Members[2].Gone || got.Members[1].Name != lost {
				t.Fatalf("Get with member 1 %s = %s, reconfigurable %v, members %+v; want Degraded, reconfigurable, member 1 (%s) unhealthy, Gone %v, no other Gone",
					how, got.State, got.Reconfigurable, got.Members, lost, wantGone)
			}

			if in, _ := fake.Instance(testRegion, lost); shuttingDown && in.State != ec2fake.StateShuttingDown {
				t.Fatalf("member 1 is %s after Get, want still shutting-down: the case tests nothing of its own", in.State)
			}
			updated, made := updateLabelsLaunching(t, fake, b, inst.ID, spec)
			after := runningIDs(fake)
			before := len(after) - len(made)
			if !wantGone {
				if len(made) != 0 || len(after) != before {
					t.Fatalf("Update of a proxy with a stopped member launched %v; want nothing launched", made)
				}
				if updated.Members[1].Gone || updated.Members[1].Name != lost {
					t.Errorf("after Update, member 1 = %+v, want %s, not Gone", updated.Members[1], lost)
				}
				return
			}
			if len(made) != 1 || len(after) != 3 {
				t.Fatalf("Update launched %v, %d instances run; want one launched, three running", made, len(after))
			}
			in, _ := fake.Instance(testRegion, made[0])
			if in.SubnetID != fake.Subnets(testRegion)[1].ID || in.Tags[TagMember] != "1" || in.Tags["env"] != "prod" || in.Tags[backend.LabelUID] != spec.UID {
				t.Errorf("the instance made again: subnet %s, tags %v; want member 1's subnet %s, env=prod, UID %s",
					in.SubnetID, in.Tags, fake.Subnets(testRegion)[1].ID, spec.UID)
			}
			if updated.State != backend.StateRunning || len(updated.Members) != 3 || updated.InternalName != inst.InternalName ||
				updated.InternalAddress != inst.InternalAddress || updated.Members[1].Name != made[0] {
				t.Fatalf("Update = %s at %s (%s), members %+v; want Running at %s (%s), member 1 %s",
					updated.State, updated.InternalAddress, updated.InternalName, updated.Members, inst.InternalAddress, inst.InternalName, made[0])
			}
			for i, m := range updated.Members {
				if m.Gone || !m.Healthy || (i != 1 && m.Name != inst.Members[i].Name) {
					t.Errorf("member %d after Update = %+v, want healthy, not Gone, %s as before unless member 1", i, m, inst.Members[i].Name)
				}
			}
			if lbs, tgs := fake.LoadBalancers(testRegion), fake.TargetGroups(testRegion); len(lbs) != 1 || len(tgs) != 1 {
				t.Errorf("load balancers %v, target groups %v after Update, want the one of each", lbs, tgs)
			}
			c := adminELB(fake)
			tgs, err := c.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{Names: []string{lbName(spec.Name)}})
			if err != nil {
				t.Fatal(err)
			}
			health, err := c.DescribeTargetHealth(ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: tgs.TargetGroups[0].TargetGroupArn})
			if err != nil {
				t.Fatal(err)
			}
			var registered []string
			for _, d := range health.TargetHealthDescriptions {
				registered = append(registered, awssdk.ToString(d.Target.Id))
			}
			if !slices.Contains(registered, made[0]) {
				t.Errorf("targets %v, want %s among them", registered, made[0])
			}
			again, err := b.Get(ctx, inst.ID)
			if err != nil || again.State != backend.StateRunning || slices.ContainsFunc(again.Members, func(m backend.Member) bool { return m.Gone }) {
				t.Fatalf("Get after Update = %s, %+v, %v; want Running, none Gone", again.State, again.Members, err)
			}
			if err := b.Delete(ctx, inst.ID); err != nil {
				t.Fatal(err)
			}
			assertNothingLeft(t, fake)
		})
	}
}

// runningIDs are the ids of the instances that are neither shutting down nor terminated.
// createThenEnd creates a proxy of three named name (haSpec) and ends its member k behind the provider's back:
// terminated through EC2, as a user does, and seen shutting down long enough for Get and the start of Update
// to see it so; terminated; terminated so long ago that EC2 no longer lists it; or stopped.
func createThenEnd(t *testing.T, name string, k int, how string) (*ec2fake.Server, *Backend, backend.Spec, backend.Instance) {
	t.Helper()
	timing := ec2fake.DefaultTiming()
	if how == "terminated through EC2, shutting down" {
		timing.ShuttingDownPolls = 8
	}
	fake, b := newTest(t, ec2fake.Options{Timing: &timing})
	fake.PlayGuests()
	ctx := context.Background()
	spec := haSpec(fake, name)
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	ended := inst.Members[k].Name
	switch how {
	case "terminated through EC2, shutting down":
		out, err := ec2.NewFromConfig(fake.AdminAWSConfig(testRegion)).TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{ended}})
		if err != nil {
			t.Fatal(err)
		}
		if st := out.TerminatingInstances[0].CurrentState.Name; st != "shutting-down" {
			t.Fatalf("terminated instance is %s, want shutting-down", st)
		}
	case "terminated":
		fake.SetInstanceState(testRegion, ended, ec2fake.StateTerminated)
	case "terminated, no longer listed":
		fake.SetInstanceState(testRegion, ended, ec2fake.StateTerminated)
		fake.Advance(2 * timing.TerminatedVisibleFor)
	case "stopped":
		fake.SetInstanceState(testRegion, ended, ec2fake.StateStopped)
	default:
		t.Fatalf("no way to end an instance %q", how)
	}
	return fake, b, spec, inst
}

// updateLabelsLaunching updates the proxy id with spec's labels changed to env=prod, and returns what Update
// returned and the instances running after it that did not before.
func updateLabelsLaunching(t *testing.T, fake *ec2fake.Server, b *Backend, id backend.ProviderID, spec backend.Spec) (backend.Instance, []string) {
	t.Helper()
	before := runningIDs(fake)
	spec.Labels = map[string]string{"env": "prod"}
	updated, err := b.Update(context.Background(), id, spec)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	var made []string
	for running := range runningIDs(fake) {
		if !before[running] {
			made = append(made, running)
		}
	}
	return updated, made
}

func runningIDs(fake *ec2fake.Server) map[string]bool {
	ids := map[string]bool{}
	for _, in := range fake.Instances(testRegion) {
		if in.State != ec2fake.StateTerminated && in.State != ec2fake.StateShuttingDown {
			ids[in.ID] = true
		}
	}
	return ids
}

// The first instance of a proxy of three ended behind Terraform's back: terminated through EC2 and still
// shutting down, terminated and listed, or terminated so long ago that EC2 no longer lists it. Get reads the
// proxy through a member: Degraded, member 0 Gone, its load balancer's address and its creation time kept;
// ListByTag lists it once, Degraded; Reconfigure is refused until an Update, which launches one instance
// in the first's subnet, without TagMember, with the proxy's creation time, registered with the same target
// group, and binds the proxy's own parameters to the new instance's ARN alone. The proxy is then whole:
// Reconfigure reaches every member, and Delete leaves nothing.
func TestSeveralInstancesFirstGone(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"terminated through EC2, shutting down", "terminated", "terminated, no longer listed"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			fake, b, spec, inst := createThenEnd(t, "headless", 0, how)
			ctx := context.Background()
			lost := inst.Members[0].Name
			got, err := b.Get(ctx, inst.ID)
			if err != nil {
				t.Fatalf("Get with the first instance %s: %v", how, err)
			}
			if got.State != backend.StateDegraded || len(got.Members) != 3 || !got.Members[0].Gone || got.Members[1].Gone || got.Members[2].Gone ||
				got.InternalAddress != inst.InternalAddress || !got.CreatedAt.Equal(inst.CreatedAt) || got.UID != spec.UID {
				t.Fatalf("Get = %s at %s, created %v, members %+v; want Degraded at %s, created %v, member 0 alone Gone",
					got.State, got.InternalAddress, got.CreatedAt, got.Members, inst.InternalAddress, inst.CreatedAt)
			}
			listed, err := b.ListByTag(ctx, backend.Selector{Owner: spec.Owner})
			if err != nil {
				t.Fatal(err)
			}
			if len(listed) != 1 || listed[0].ID != inst.ID || listed[0].State != backend.StateDegraded || listed[0].UID != spec.UID {
				t.Fatalf("ListByTag = %+v, want %s once, Degraded", listed, inst.ID)
			}
			if _, err := b.Reconfigure(ctx, inst.ID, spec.Proxy); backend.ClassOf(err) != backend.ClassPermanent {
				t.Fatalf("Reconfigure before the Update = %v, want refused", err)
			}

			updated, made := updateLabelsLaunching(t, fake, b, inst.ID, spec)
			if len(made) != 1 || len(runningIDs(fake)) != 3 {
				t.Fatalf("Update launched %v, %d run; want one launched, three running", made, len(runningIDs(fake)))
			}
			in, _ := fake.Instance(testRegion, made[0])
			if _, member := in.Tags[TagMember]; member || in.SubnetID != fake.Subnets(testRegion)[0].ID || in.Tags["env"] != "prod" || in.Tags[backend.LabelUID] != spec.UID {
				t.Errorf("the first instance made again: subnet %s, tags %v; want the first's subnet %s, no %s, env=prod, UID %s",
					in.SubnetID, in.Tags, fake.Subnets(testRegion)[0].ID, TagMember, spec.UID)
			}
			if updated.State != backend.StateRunning || updated.Members[0].Name != made[0] || updated.InternalAddress != inst.InternalAddress ||
				!updated.CreatedAt.Equal(inst.CreatedAt) {
				t.Fatalf("Update = %s at %s, created %v, members %+v; want Running at %s, created %v, member 0 %s",
					updated.State, updated.InternalAddress, updated.CreatedAt, updated.Members, inst.InternalAddress, inst.CreatedAt, made[0])
			}
			// The proxy's own parameters answer the new instance's role alone: the ended one's ARN is on none.
			for _, name := range []string{guest.ParameterConfig, guest.ParameterSecrets, guest.ParameterApplied} {
				p, ok := fake.Parameter(testRegion, guest.ParameterPath(spec.Name, name))
				if arn := p.Tags[TagInstance]; !ok || !strings.HasSuffix(arn, "/"+made[0]) {
					t.Errorf("parameter %s bound to %q, want the ARN of %s", name, arn, made[0])
				}
			}
			for _, p := range fake.Parameters(testRegion) {
				if strings.HasSuffix(p.Tags[TagInstance], "/"+lost) {
					t.Errorf("parameter %s still bound to the ended instance %s", p.Name, lost)
				}
			}

			again, err := b.Get(ctx, inst.ID)
			if err != nil || again.State != backend.StateRunning || slices.ContainsFunc(again.Members, func(m backend.Member) bool { return m.Gone }) ||
				!again.CreatedAt.Equal(inst.CreatedAt) {
				t.Fatalf("Get after Update = %s, created %v, %+v, %v; want Running, created %v, none Gone", again.State, again.CreatedAt, again.Members, err, inst.CreatedAt)
			}
			changed := spec.Proxy
			changed.AllowedDestinations = []string{"example.org"}
			if _, err := b.Reconfigure(ctx, inst.ID, changed); err != nil {
				t.Fatalf("Reconfigure after the Update: %v", err)
			}
			if err := b.Delete(ctx, inst.ID); err != nil {
				t.Fatal(err)
			}
			assertNothingLeft(t, fake)
		})
	}
}
