package aws

import (
	"context"
	"slices"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
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
			timing := ec2fake.DefaultTiming()
			if shuttingDown {
				// Long enough for Get and the start of Update to see it shutting down: Update waits for it.
				timing.ShuttingDownPolls = 8
			}
			fake, b := newTest(t, ec2fake.Options{Timing: &timing})
			fake.PlayGuests()
			ctx := context.Background()
			spec := haSpec(fake, "gone")
			inst, err := b.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			lost := inst.Members[1].Name
			switch how {
			case "terminated through EC2, shutting down": // as a user does
				out, err := ec2.NewFromConfig(fake.AdminAWSConfig(testRegion)).TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{lost}})
				if err != nil {
					t.Fatal(err)
				}
				if st := out.TerminatingInstances[0].CurrentState.Name; st != "shutting-down" {
					t.Fatalf("terminated instance is %s, want shutting-down", st)
				}
			case "terminated":
				fake.SetInstanceState(testRegion, lost, ec2fake.StateTerminated)
			case "stopped":
				fake.SetInstanceState(testRegion, lost, ec2fake.StateStopped)
			}
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
			before := runningIDs(fake)
			next := spec
			next.Labels = map[string]string{"env": "prod"}
			updated, err := b.Update(ctx, inst.ID, next)
			if err != nil {
				t.Fatalf("Update: %v", err)
			}
			after := runningIDs(fake)
			var made []string
			for id := range after {
				if !before[id] {
					made = append(made, id)
				}
			}
			if !wantGone {
				if len(made) != 0 || len(after) != len(before) {
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
func runningIDs(fake *ec2fake.Server) map[string]bool {
	ids := map[string]bool{}
	for _, in := range fake.Instances(testRegion) {
		if in.State != ec2fake.StateTerminated && in.State != ec2fake.StateShuttingDown {
			ids[in.ID] = true
		}
	}
	return ids
}
