package aws

import (
	"context"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// A Create that ends while its RunInstances took effect and every answer was lost, then the provider's retry
// of the whole Create while EC2's reads do not list the new instance yet (eventual consistency): the second
// Create finds nothing by name and launches again, and only the client token, derived from the UID, makes
// EC2 answer with the first instance instead of a second one that nothing would ever delete.
func TestCreateRetriedAfterLostLaunchLaunchesOneInstance(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{Timing: &ec2fake.Timing{PendingPolls: 1, ShuttingDownPolls: 1, UnseenPolls: 50, TerminatedVisibleFor: time.Hour}})
	fake.PlayGuests()
	spec := testSpec(fake, "lost-launch")
	for range 1000 {
		fake.LoseNextAnswer("RunInstances")
	}
	first, cancel := context.WithCancel(context.Background())
	go func() {
		// The first Create ends once its launch has taken effect (answer lost), as a timeout or Ctrl-C ends it.
		for len(fake.Instances(testRegion)) == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, err := b.Create(first, spec); err == nil {
		t.Fatal("the first Create succeeded though every answer of RunInstances was lost")
	}
	fake.ClearFaults()
	inst, err := b.Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("Create again: %v", err)
	}
	if n := len(fake.Instances(testRegion)); n != 1 {
		t.Fatalf("%d instances launched, want 1: the second Create's RunInstances did not reuse the first one's client token", n)
	}
	if inst.UID != spec.UID {
		t.Errorf("Create = uid %q, want %q", inst.UID, spec.UID)
	}
}

// The instance a lost launch made is terminated before the retried Create launches again: EC2 refuses the
// UID's token with IdempotentInstanceTerminated since January 2025 (issue 35, item 11), and Create launches
// with the next token of the UID's sequence instead of retrying the refused one until its timeout.
func TestCreateAfterItsInstanceWasTerminated(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	spec := testSpec(fake, "terminated-launch")
	first, err := b.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range fake.Instances(testRegion) {
		fake.SetInstanceState(testRegion, in.ID, ec2fake.StateTerminated)
	}
	// A bound for the test alone: without the fix, the refused token is retried until the context ends.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	again, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create after its instance was terminated: %v", err)
	}
	if again.ID != first.ID || len(liveInstancesOf(fake)) != 1 {
		t.Fatalf("Create = %s with %d live instances, want %s and one", again.ID, len(liveInstancesOf(fake)), first.ID)
	}
}

func liveInstancesOf(fake *ec2fake.Server) []ec2fake.Instance {
	var live []ec2fake.Instance
	for _, in := range fake.Instances(testRegion) {
		if in.State != ec2fake.StateTerminated {
			live = append(live, in)
		}
	}
	return live
}
