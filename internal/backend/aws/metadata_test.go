package aws

import (
	"testing"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// EC2's instance states in the contract's words ("Amazon EC2 instance state changes"); terminated never
// reaches the mapping: Get does not find a terminated instance and answers NotFound.
func TestStateOf(t *testing.T) {
	t.Parallel()
	for state, want := range map[ec2types.InstanceStateName]backend.State{
		ec2types.InstanceStateNamePending:      backend.StatePending,
		ec2types.InstanceStateNameRunning:      backend.StateRunning,
		ec2types.InstanceStateNameStopping:     backend.StateStopped,
		ec2types.InstanceStateNameStopped:      backend.StateStopped,
		ec2types.InstanceStateNameShuttingDown: backend.StateDeleting,
		ec2types.InstanceStateNameTerminated:   backend.StateDeleting,
		"something-new":                        backend.StateUnknown,
	} {
		if got := stateOf(&ec2types.InstanceState{Name: state}); got != want {
			t.Errorf("stateOf(%s) = %s, want %s", state, got, want)
		}
	}
	if got := stateOf(nil); got != backend.StateUnknown {
		t.Errorf("stateOf(nil) = %s, want %s", got, backend.StateUnknown)
	}
}

// userLabels keeps the user's tags only: not the provider's, not the name, not AWS's own.
func TestUserLabels(t *testing.T) {
	t.Parallel()
	got := userLabels(map[string]string{
		backend.LabelManagedBy: backend.ManagedByValue, backend.LabelUID: "u", backend.LabelOwner: "o",
		tagName: "p", "aws:cloudformation:stack-name": "s", "team": "net",
	})
	if len(got) != 1 || got["team"] != "net" {
		t.Errorf("userLabels = %v, want only team=net", got)
	}
}
