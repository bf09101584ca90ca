package aws

import (
	"context"
	"fmt"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
)

// pollUntil calls check with growing intervals until it reports done or fails with an error that is not
// Retryable; when ctx ends, the last error is wrapped for the diagnostic.
func (b *Backend) pollUntil(ctx context.Context, object, waitingFor string, check func(context.Context) (bool, error)) error {
	return backend.Retry(ctx, backend.Backoff{Initial: b.pollInitial, Max: b.pollMax, Factor: 1.5}, func(ctx context.Context) error {
		done, err := check(ctx)
		if err != nil {
			return err
		}
		if !done {
			return backend.Transient(object, "waiting for %s", waitingFor)
		}
		return nil
	})
}

// describeInstance reads one instance by id; nil when EC2 no longer lists it.
func (b *Backend) describeInstance(ctx context.Context, r *region, object, instanceID string) (*ec2types.Instance, error) {
	out, err := r.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{instanceID}})
	switch {
	case errorCode(err) == "InvalidInstanceID.NotFound":
		// Right after RunInstances, EC2's reads may not list the instance yet ("Eventual consistency"); a
		// terminated one is dropped from them after a while. Callers tell the two apart.
		return nil, nil
	case err != nil:
		return nil, classify(object, err)
	}
	for _, res := range out.Reservations {
		for i := range res.Instances {
			if res.Instances[i].State != nil {
				return &res.Instances[i], nil
			}
		}
	}
	return nil, nil
}

// stateName is the instance's state, "" for one EC2 no longer lists.
func stateName(in *ec2types.Instance) ec2types.InstanceStateName {
	if in == nil {
		return ""
	}
	return in.State.Name
}

// waitRunning waits until the instance runs, and returns it as the poll that saw it running described it.
// One that ends instead (terminated, or stopped by a Spot interruption) failed to start: Permanent, with what
// EC2 said.
func (b *Backend) waitRunning(ctx context.Context, r *region, object, instanceID string) (*ec2types.Instance, error) {
	var running *ec2types.Instance
	err := b.pollUntil(ctx, object, "the instance to run", func(ctx context.Context) (bool, error) {
		in, err := b.describeInstance(ctx, r, object, instanceID)
		if err != nil {
			return false, err
		}
		switch state := stateName(in); state {
		case ec2types.InstanceStateNameRunning:
			running = in
			return true, nil
		case ec2types.InstanceStateNameTerminated, ec2types.InstanceStateNameShuttingDown, ec2types.InstanceStateNameStopped:
			return false, backend.Permanent(object, "instance %s is %s instead of running: see its state reason in the EC2 console", instanceID, state)
		}
		return false, nil
	})
	return running, err
}

// waitTerminated waits until the instance is terminated or no longer listed.
func (b *Backend) waitTerminated(ctx context.Context, r *region, object, instanceID string) error {
	return b.pollUntil(ctx, object, "the instance to terminate", func(ctx context.Context) (bool, error) {
		in, err := b.describeInstance(ctx, r, object, instanceID)
		return err == nil && (in == nil || stateName(in) == ec2types.InstanceStateNameTerminated), err
	})
}

// waitApplied waits until the guest reports configID applied, in its applied parameter. A guest that reports
// it refused configID (Squid, nft or its guards said no) fails the wait at once, with its reason: the
// last good config keeps serving, and waiting longer would not change that.
func (b *Backend) waitApplied(ctx context.Context, r *region, name string, written parameters) error {
	configID := written.configID
	path := guest.ParameterPath(name, guest.ParameterApplied)
	object := parameterObject(r.name, path)
	return b.pollUntil(ctx, object, "the guest to apply config "+configID, func(ctx context.Context) (bool, error) {
		out, err := r.ssm.GetParameter(ctx, &ssm.GetParameterInput{Name: awssdk.String(path)})
		if errorCode(err) == "ParameterNotFound" {
			return false, nil // the guest has applied nothing yet
		}
		if err != nil {
			if ctx.Err() != nil {
				// The operation's time is up mid-poll: what the user should read is what was awaited, not
				// the cancelled request.
				return false, backend.Transient(object, "waiting for the guest to apply config %s", configID)
			}
			return false, classify(object, err)
		}
		applied := guest.ParseApplied(awssdk.ToString(out.Parameter.Value))
		// A refusal of this write: one of an earlier write of the same config (a drift put back) is no answer.
		if applied.Refused == configID && applied.RefusedMAC == guest.RefusedMAC(written.mac) {
			return false, &backend.Error{Class: backend.ClassPermanent, Object: instanceObject(r.name, name),
				Err: fmt.Errorf("its guest refused config %s (%s) and keeps serving config %s", configID, applied.Reason, applied.ConfigID),
				Advice: "The provider rendered this config, so a guest that refuses it runs other software than the proxy image expects: " +
					"read why in the instance's console output (EC2 GetConsoleOutput, lines from egress-proxy-agent), then replace the proxy."}
		}
		return applied.ConfigID == configID, nil
	})
}
