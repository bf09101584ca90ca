package aws

import (
	"context"
	"encoding/json"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
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

// instanceState reads one instance's state by id; "" when EC2 no longer lists it.
func (b *Backend) instanceState(ctx context.Context, r *region, object, instanceID string) (ec2types.InstanceStateName, error) {
	out, err := r.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{instanceID}})
	switch {
	case errorCode(err) == "InvalidInstanceID.NotFound":
		// Right after RunInstances, EC2's reads may not list the instance yet ("Eventual consistency"); a
		// terminated one is dropped from them after a while. Callers tell the two apart.
		return "", nil
	case err != nil:
		return "", classify(object, err)
	}
	for _, res := range out.Reservations {
		for _, in := range res.Instances {
			if in.State != nil {
				return in.State.Name, nil
			}
		}
	}
	return "", nil
}

// waitRunning waits until the instance runs. One that ends instead (terminated, or stopped by a Spot
// interruption) failed to start: Permanent, with what EC2 said.
func (b *Backend) waitRunning(ctx context.Context, r *region, object, instanceID string) error {
	return b.pollUntil(ctx, object, "the instance to run", func(ctx context.Context) (bool, error) {
		state, err := b.instanceState(ctx, r, object, instanceID)
		switch {
		case err != nil:
			return false, err
		case state == ec2types.InstanceStateNameRunning:
			return true, nil
		case state == ec2types.InstanceStateNameTerminated, state == ec2types.InstanceStateNameShuttingDown,
			state == ec2types.InstanceStateNameStopped:
			return false, backend.Permanent(object, "instance %s is %s instead of running: see its state reason in the EC2 console", instanceID, state)
		}
		return false, nil
	})
}

// waitTerminated waits until the instance is terminated or no longer listed.
func (b *Backend) waitTerminated(ctx context.Context, r *region, object, instanceID string) error {
	return b.pollUntil(ctx, object, "the instance to terminate", func(ctx context.Context) (bool, error) {
		state, err := b.instanceState(ctx, r, object, instanceID)
		return err == nil && (state == "" || state == ec2types.InstanceStateNameTerminated), err
	})
}

// waitApplied waits until the guest reports configID applied, in its applied parameter.
func (b *Backend) waitApplied(ctx context.Context, r *region, name, configID string) error {
	path := proxyconf.AWSParameterPath(name, proxyconf.AWSParameterApplied)
	object := parameterObject(r.name, path)
	return b.pollUntil(ctx, object, "the guest to apply config "+configID, func(ctx context.Context) (bool, error) {
		out, err := r.ssm.GetParameter(ctx, &ssm.GetParameterInput{Name: awssdk.String(path)})
		if errorCode(err) == "ParameterNotFound" {
			return false, nil // the guest has applied nothing yet
		}
		if err != nil {
			return false, classify(object, err)
		}
		var applied struct {
			ConfigID string `json:"config_id"`
		}
		value := awssdk.ToString(out.Parameter.Value)
		if json.Unmarshal([]byte(value), &applied) != nil {
			applied.ConfigID = value
		}
		return applied.ConfigID == configID, nil
	})
}
