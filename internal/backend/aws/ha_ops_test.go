package aws

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// withInstances is spec asking for n instances, its options copied so that spec keeps its own.
func withInstances(spec backend.Spec, n int) backend.Spec {
	o := *spec.Placement.Options.(*Options) //nolint:forcetypeassert // haSpec's own options
	o.Instances = n
	spec.Placement.Options = &o
	return spec
}

// memberParameterNames are the members' parameters the fake holds, by member number.
func memberParameterNames(fake *ec2fake.Server, proxy string) map[int]bool {
	out := map[int]bool{}
	prefix := guest.ParameterPath(proxy, "") + "member-"
	for _, p := range fake.Parameters(testRegion) {
		if rest, ok := strings.CutPrefix(p.Name, prefix); ok {
			if k, err := strconv.Atoi(strings.SplitN(rest, "/", 2)[0]); err == nil {
				out[k] = true
			}
		}
	}
	return out
}

// An Update of a proxy of three asking for five launches members 3 and 4 in the next subnets, registers them
// behind the same load balancer and records five; asking for two then deregisters members 4, 3 and 2, waits
// for the load balancer to drain them before they are terminated (none is cut while draining), deletes their
// parameters and records two. The load balancer's address and DNS name stay throughout, Get reads the count
// asked for, Running, and Delete leaves nothing.
func TestSeveralInstancesCountChangedInPlace(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	ctx := context.Background()
	spec := haSpec(fake, "resize")
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	subnets := fake.Subnets(testRegion)

	more, err := b.Update(ctx, inst.ID, withInstances(spec, 5))
	if err != nil {
		t.Fatalf("Update to 5: %v", err)
	}
	if more.State != backend.StateRunning || len(more.Members) != 5 || more.InternalName != inst.InternalName || more.InternalAddress != inst.InternalAddress {
		t.Fatalf("Update to 5 = %s at %s (%s), %d members %+v; want Running at %s (%s), 5 members",
			more.State, more.InternalAddress, more.InternalName, len(more.Members), more.Members, inst.InternalAddress, inst.InternalName)
	}
	for i, m := range more.Members {
		if !m.Healthy || (i < 3 && m.Name != inst.Members[i].Name) {
			t.Errorf("member %d after Update to 5 = %+v; want healthy, the same instance as before for 0 to 2", i, m)
		}
		in, _ := fake.Instance(testRegion, m.Name)
		if want := subnets[i%len(subnets)].ID; in.SubnetID != want || in.Tags[TagInstances] != "5" {
			t.Errorf("member %d: subnet %s, %s=%s; want subnet %s, 5", i, in.SubnetID, TagInstances, in.Tags[TagInstances], want)
		}
	}
	if o := more.Placement.Options.(*Options); o.Instances != 5 { //nolint:forcetypeassert // the backend's own options
		t.Errorf("Update to 5 reads instances = %d", o.Instances)
	}
	if lbs, tgs := fake.LoadBalancers(testRegion), fake.TargetGroups(testRegion); len(lbs) != 1 || len(tgs) != 1 {
		t.Errorf("load balancers %v, target groups %v after Update to 5, want the one of each", lbs, tgs)
	}

	fewer, err := b.Update(ctx, inst.ID, withInstances(spec, 2))
	if err != nil {
		t.Fatalf("Update to 2: %v", err)
	}
	if fewer.State != backend.StateRunning || len(fewer.Members) != 2 || fewer.Members[0].Name != inst.Members[0].Name ||
		fewer.Members[1].Name != inst.Members[1].Name || fewer.InternalName != inst.InternalName {
		t.Fatalf("Update to 2 = %s, members %+v at %s; want Running, members %s and %s at %s",
			fewer.State, fewer.Members, fewer.InternalName, inst.Members[0].Name, inst.Members[1].Name, inst.InternalName)
	}
	live := runningIDs(fake)
	for _, m := range more.Members[2:] {
		if live[m.Name] {
			t.Errorf("member %s is left running after Update to 2", m.Name)
		}
	}
	if n := fake.DrainsCut(testRegion); n != 0 {
		t.Errorf("%d instances were terminated while the load balancer still drained them", n)
	}
	if n := fake.Count("DeregisterTargets"); n != 1 {
		t.Errorf("Update to 2 made %d DeregisterTargets calls, want 1 (members 2 to 4 at once)", n)
	}
	if got := memberParameterNames(fake, spec.Name); !slices.Equal(slices.Sorted(func(yield func(int) bool) {
		for k := range got {
			if !yield(k) {
				return
			}
		}
	}), []int{1}) {
		t.Errorf("members' parameters after Update to 2: %v, want member 1's alone", got)
	}
	again, err := b.Get(ctx, inst.ID)
	if err != nil || len(again.Members) != 2 || again.State != backend.StateRunning || again.Placement.Options.(*Options).Instances != 2 { //nolint:forcetypeassert // the backend's own options
		t.Fatalf("Get after Update to 2 = %+v, %v; want Running, 2 members, instances 2", again, err)
	}

	// Nothing to change: an Update with the same count deregisters, terminates and launches nothing.
	before := fake.Counts()
	if _, err := b.Update(ctx, inst.ID, withInstances(spec, 2)); err != nil {
		t.Fatal(err)
	}
	after := fake.Counts()
	for _, action := range []string{"DeregisterTargets", "TerminateInstances", "RunInstances", "PutParameter", "DeleteParameters"} {
		if after[action] != before[action] {
			t.Errorf("an Update that changes no count made %d %s calls", after[action]-before[action], action)
		}
	}
	if err := b.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, fake)
}

// A change of the number of instances cut at each of its steps (the step's call refused once, for good) leaves
// a proxy Get reads, whose next Update finishes the change, and whose Delete after leaves nothing: no member,
// no member's parameters, no target.
func TestSeveralInstancesCountChangeCut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		from, to int
		action   string // the call refused
		code     string
	}{
		{"more, cut at the launch of a new member", 3, 4, "RunInstances", "UnauthorizedOperation"},
		{"more, cut at the registration of the new member", 3, 4, "RegisterTargets", "AccessDenied"},
		{"fewer, cut at the deregistration", 4, 2, "DeregisterTargets", "AccessDenied"},
		{"fewer, cut at the termination", 4, 2, "TerminateInstances", "UnauthorizedOperation"},
		{"fewer, cut at the members' parameters", 4, 2, "DeleteParameters", "AccessDeniedException"},
		{"fewer, cut as the count is recorded", 4, 2, "CreateTags", "UnauthorizedOperation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, ec2fake.Options{})
			fake.PlayGuests()
			ctx := context.Background()
			spec := withInstances(haSpec(fake, "cut"), tc.from)
			inst, err := b.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			fake.FailNext(tc.action, tc.code)
			if _, err := b.Update(ctx, inst.ID, withInstances(spec, tc.to)); err == nil {
				t.Fatalf("Update with %s refused succeeded", tc.action)
			}
			if fake.Fired() != 1 {
				t.Fatalf("the Update never called %s: the case cuts nothing", tc.action)
			}
			if _, err := b.Get(ctx, inst.ID); err != nil {
				t.Fatalf("Get after the cut: %v", err)
			}
			done, err := b.Update(ctx, inst.ID, withInstances(spec, tc.to))
			if err != nil {
				t.Fatalf("the next Update: %v", err)
			}
			if len(done.Members) != tc.to || done.State != backend.StateRunning {
				t.Fatalf("the next Update = %s, members %+v; want Running, %d", done.State, done.Members, tc.to)
			}
			assertFinishedThenDeleted(t, fake, b, inst.ID, tc.to)
		})
	}
}

// A member outside the target group (deregistered behind the provider's back, as an Update cut before the
// registration leaves one) is registered again by the next Update while it runs; stopped, it is left
// unregistered (RegisterTargets refuses an instance that is not running), its reason says so, and the Update
// succeeds.
func TestSeveralInstancesUnregisteredMemberRegisteredByUpdate(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	ctx := context.Background()
	spec := haSpec(fake, "outside")
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	outside := inst.Members[2].Name
	c := adminELB(fake)
	tgs, err := c.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{Names: []string{lbName(spec.Name)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeregisterTargets(ctx, &elb.DeregisterTargetsInput{TargetGroupArn: tgs.TargetGroups[0].TargetGroupArn,
		Targets: []elbtypes.TargetDescription{{Id: awssdk.String(outside)}}}); err != nil {
		t.Fatal(err)
	}
	fake.SetInstanceState(testRegion, outside, ec2fake.StateStopped)
	// Until the deregistration delay has passed, the member is still listed, draining.
	for range ec2fake.DefaultTiming().DrainingPolls {
		if _, err := b.Get(ctx, inst.ID); err != nil {
			t.Fatal(err)
		}
	}
	stopped, err := b.Update(ctx, inst.ID, spec)
	if err != nil {
		t.Fatalf("Update with a stopped member outside the target group: %v", err)
	}
	if m := stopped.Members[2]; m.Healthy || !strings.Contains(m.Reason, reasonNotRegistered+" (its instance is stopped)") {
		t.Errorf("the stopped member outside the target group reads %+v", m)
	}
	fake.SetInstanceState(testRegion, outside, ec2fake.StateRunning)
	got, err := b.Update(ctx, inst.ID, spec)
	if err != nil {
		t.Fatalf("Update with a running member outside the target group: %v", err)
	}
	if m := got.Members[2]; !m.Healthy || m.Name != outside || got.State != backend.StateRunning {
		t.Errorf("after Update, member 2 = %+v, proxy %s; want %s registered and healthy, Running", m, got.State, outside)
	}
}

// assertFinishedThenDeleted checks a proxy an Update finished after a cut: n instances run, none was terminated
// while the load balancer drained it, and its Delete leaves nothing.
func assertFinishedThenDeleted(t *testing.T, fake *ec2fake.Server, b *Backend, id backend.ProviderID, n int) {
	t.Helper()
	if got := len(runningIDs(fake)); got != n {
		t.Errorf("%d instances run after the next Update, want %d", got, n)
	}
	if cut := fake.DrainsCut(testRegion); cut != 0 {
		t.Errorf("%d instances were terminated while the load balancer still drained them", cut)
	}
	if err := b.Delete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, fake)
}

// withImage is spec asking for image, its options copied.
func withImage(spec backend.Spec, image string) backend.Spec {
	o := *spec.Placement.Options.(*Options) //nolint:forcetypeassert // haSpec's own options
	o.AMI = image
	spec.Placement.Options = &o
	return spec
}

// rollCalls are, in order, the calls of an image roll that change what serves: launches, registrations and
// deregistrations, root volume replacements and terminations.
func rollCalls(fake *ec2fake.Server, from int) []string {
	var out []string
	for _, r := range fake.Requests()[from:] {
		switch r.Action {
		case "RunInstances", "RegisterTargets", "DeregisterTargets", "CreateReplaceRootVolumeTask", "TerminateInstances":
			if r.Code == "" {
				out = append(out, r.Action)
			}
		}
	}
	return out
}

// A new image over a proxy of three is an Update that keeps every instance: a surge member of the new image
// is launched and registered first, then each member, highest first and the first instance last, is
// deregistered (drained), gets its root volume made again from the new image and is registered again; last
// the surge member is deregistered and terminated, and its parameters deleted. The proxy keeps its load
// balancer, its members their ids and addresses, the old root volumes are gone and the new ones carry the
// proxy's tags and the image. Get reads the new image; an Update asking for it again changes nothing, and
// Delete leaves nothing.
func TestSeveralInstancesImageRolledInPlace(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{Images: []ec2fake.Image{ec2fake.NewerDebian}})
	fake.PlayGuests()
	ctx := context.Background()
	spec := haSpec(fake, "roll")
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	oldImage := inst.Placement.Options.(*Options).AMI //nolint:forcetypeassert // the backend's own options
	oldVolumes := map[string]string{}
	for _, m := range inst.Members {
		in, _ := fake.Instance(testRegion, m.Name)
		oldVolumes[m.Name] = in.VolumeID
	}
	from := len(fake.Requests())
	rolled, err := b.Update(ctx, inst.ID, withImage(spec, ec2fake.NewerDebian.ID))
	if err != nil {
		t.Fatalf("Update to a new image: %v", err)
	}
	drained := []string{"DeregisterTargets", "CreateReplaceRootVolumeTask", "RegisterTargets"}
	want := append([]string{"RunInstances", "RegisterTargets"}, slices.Concat(drained, drained, drained)...)
	want = append(want, "DeregisterTargets", "TerminateInstances")
	if got := rollCalls(fake, from); !slices.Equal(got, want) {
		t.Errorf("the roll called\n%v\nwant\n%v", got, want)
	}
	tasks := fake.RootVolumeTasks(testRegion)
	if len(tasks) != 3 {
		t.Fatalf("%d root volume replacements, want 3: %+v", len(tasks), tasks)
	}
	for i, task := range tasks {
		if wantID := inst.Members[2-i].Name; task.InstanceID != wantID || task.ImageID != ec2fake.NewerDebian.ID || !task.DeleteReplaced {
			t.Errorf("replacement %d = %+v; want of %s (member %d), from %s, the old volume deleted", i, task, wantID, 2-i, ec2fake.NewerDebian.ID)
		}
	}
	if o := rolled.Placement.Options.(*Options); o.AMI != ec2fake.NewerDebian.ID { //nolint:forcetypeassert // the backend's own options
		t.Errorf("Get after the roll reads image %q, want %s", o.AMI, ec2fake.NewerDebian.ID)
	}
	if rolled.State != backend.StateRunning || len(rolled.Members) != 3 || rolled.InternalName != inst.InternalName || rolled.InternalAddress != inst.InternalAddress {
		t.Fatalf("after the roll: %s at %s (%s), members %+v; want Running at %s (%s), 3 members",
			rolled.State, rolled.InternalAddress, rolled.InternalName, rolled.Members, inst.InternalAddress, inst.InternalName)
	}
	for i, m := range rolled.Members {
		before := inst.Members[i]
		if m.Name != before.Name || m.InternalAddress != before.InternalAddress || m.EgressAddress != before.EgressAddress || !m.Healthy {
			t.Errorf("member %d = %+v, was %+v; want the same instance and addresses, healthy", i, m, before)
		}
		in, _ := fake.Instance(testRegion, m.Name)
		if _, kept := fake.Volume(testRegion, oldVolumes[m.Name]); kept || in.VolumeID == oldVolumes[m.Name] {
			t.Errorf("member %d's old root volume %s: kept %v, its root now %s", i, oldVolumes[m.Name], kept, in.VolumeID)
		}
		if _, ok := fake.Volume(testRegion, in.VolumeID); !ok || in.Tags[TagImage] != ec2fake.NewerDebian.ID {
			t.Errorf("member %d: its root volume %s exists %v, its instance's %s=%q; want %s", i, in.VolumeID, ok, TagImage, in.Tags[TagImage], ec2fake.NewerDebian.ID)
		}
	}
	if live := liveInstancesOf(fake); len(live) != 3 {
		t.Errorf("%d instances live after the roll, want 3: the surge member stayed", len(live))
	}
	if names := memberParameterNames(fake, spec.Name); names[3] {
		t.Errorf("the surge member's parameters are left: %v", names)
	}
	if n := fake.DrainsCut(testRegion); n != 0 {
		t.Errorf("%d instances were cut while the load balancer drained them", n)
	}
	if oldImage == ec2fake.NewerDebian.ID {
		t.Fatalf("the proxy was made from %s already", oldImage)
	}

	from = len(fake.Requests())
	if _, err := b.Update(ctx, inst.ID, withImage(spec, ec2fake.NewerDebian.ID)); err != nil {
		t.Fatal(err)
	}
	for _, r := range fake.Requests()[from:] {
		if !strings.HasPrefix(r.Action, "Describe") && !strings.HasPrefix(r.Action, "Get") && r.Action != "ListTagsForResource" && r.Action != "CreateTags" && r.Action != "AddTags" {
			t.Errorf("an Update asking for the image the proxy runs called %s", r.Action)
		}
	}
	// The policy lets the provider tag only what carries its tags: a label update leaves the new root
	// volumes alone (replaceRoot) and still succeeds.
	labelled := withImage(spec, ec2fake.NewerDebian.ID)
	labelled.Labels = map[string]string{"team": "net"}
	if _, err := b.Update(ctx, inst.ID, labelled); err != nil {
		t.Fatalf("a label update after the roll: %v", err)
	}
	if err := b.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, fake)
}

// An image roll cut at any of its steps leaves a proxy that Get reads, naming both images while its members
// run two, and that the next Update brings to the new image; a Delete after either leaves nothing, the surge
// member's parameters included.
func TestSeveralInstancesImageRollCut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		action string // the call refused
		code   string
		skip   int // calls of it let through first
		mixed  bool
	}{
		{"at the surge member's launch", "RunInstances", "UnauthorizedOperation", 0, true},
		{"at the second member's root volume", "CreateReplaceRootVolumeTask", "UnauthorizedOperation", 1, true},
		{"at the highest member's registration again", "RegisterTargets", "AccessDenied", 1, true},
		{"at the first instance's registration again", "RegisterTargets", "AccessDenied", 3, false},
		{"at the surge member's termination", "TerminateInstances", "UnauthorizedOperation", 0, false},
	} {
		for _, finish := range []bool{true, false} {
			name := tc.name + ", then deleted"
			if finish {
				name = tc.name + ", then finished"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				fake, b := newTest(t, ec2fake.Options{Images: []ec2fake.Image{ec2fake.NewerDebian}})
				fake.PlayGuests()
				ctx := context.Background()
				spec := haSpec(fake, "rollcut")
				inst, err := b.Create(ctx, spec)
				if err != nil {
					t.Fatal(err)
				}
				oldImage := inst.Placement.Options.(*Options).AMI //nolint:forcetypeassert // the backend's own options
				fake.AddFault(ec2fake.Fault{Action: tc.action, Code: tc.code, Times: 1, Skip: tc.skip})
				if _, err := b.Update(ctx, inst.ID, withImage(spec, ec2fake.NewerDebian.ID)); err == nil {
					t.Fatalf("Update with %s refused succeeded", tc.action)
				}
				if fake.Fired() != 1 {
					t.Fatalf("the Update never reached call %d of %s: the case cuts nothing", tc.skip+1, tc.action)
				}
				got, err := b.Get(ctx, inst.ID)
				if err != nil {
					t.Fatalf("Get after the cut: %v", err)
				}
				image := got.Placement.Options.(*Options).AMI //nolint:forcetypeassert // the backend's own options
				if mixed := strings.Contains(image, oldImage) && strings.Contains(image, ec2fake.NewerDebian.ID); mixed != tc.mixed || image == ec2fake.NewerDebian.ID && tc.mixed {
					t.Errorf("Get after the cut reads image %q; want both named: %v", image, tc.mixed)
				}
				if image == oldImage {
					t.Errorf("Get after the cut reads image %q, the old one alone: no plan would finish the roll", image)
				}
				if !finish {
					if err := b.Delete(ctx, inst.ID); err != nil {
						t.Fatal(err)
					}
					assertNothingLeft(t, fake)
					return
				}
				done, err := b.Update(ctx, inst.ID, withImage(spec, ec2fake.NewerDebian.ID))
				if err != nil {
					t.Fatalf("the next Update: %v", err)
				}
				if o := done.Placement.Options.(*Options); o.AMI != ec2fake.NewerDebian.ID || done.State != backend.StateRunning || len(done.Members) != 3 { //nolint:forcetypeassert // the backend's own options
					t.Fatalf("the next Update = %s, image %q, members %+v; want Running, %s, 3", done.State, o.AMI, done.Members, ec2fake.NewerDebian.ID)
				}
				for i, m := range done.Members {
					if m.Name != inst.Members[i].Name {
						t.Errorf("member %d is %s, was %s", i, m.Name, inst.Members[i].Name)
					}
				}
				assertFinishedThenDeleted(t, fake, b, inst.ID, 3)
			})
		}
	}
}
