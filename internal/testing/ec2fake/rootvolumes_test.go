package ec2fake

import (
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
)

// The rule of root volume replacement (README.md, R77), driving the fake through the real EC2 client.

func (h *harness) replaceRoot(instanceID, image, token string, deleteOld bool) (*ec2.CreateReplaceRootVolumeTaskOutput, error) {
	in := &ec2.CreateReplaceRootVolumeTaskInput{InstanceId: aws.String(instanceID), DeleteReplacedRootVolume: aws.Bool(deleteOld)}
	if image != "" {
		in.ImageId = aws.String(image)
	}
	if token != "" {
		in.ClientToken = aws.String(token)
	}
	return h.ec2.CreateReplaceRootVolumeTask(h.ctx, in)
}

// taskOf reads the instance's tasks back, moving them on by one poll, and returns the one of id.
func (h *harness) taskOf(instanceID, id string) ec2types.ReplaceRootVolumeTask {
	h.t.Helper()
	out, err := h.ec2.DescribeReplaceRootVolumeTasks(h.ctx, &ec2.DescribeReplaceRootVolumeTasksInput{
		Filters: []ec2types.Filter{{Name: aws.String("instance-id"), Values: []string{instanceID}}}})
	h.ok("DescribeReplaceRootVolumeTasks", err)
	for _, t := range out.ReplaceRootVolumeTasks {
		if aws.ToString(t.ReplaceRootVolumeTaskId) == id {
			return t
		}
	}
	h.t.Fatalf("task %s of %s not listed: %+v", id, instanceID, out.ReplaceRootVolumeTasks)
	return ec2types.ReplaceRootVolumeTask{}
}

func (h *harness) rootVolume(id string) string {
	h.t.Helper()
	in, err := h.describe(id)
	h.ok("DescribeInstances", err)
	if len(in.BlockDeviceMappings) != 1 {
		h.t.Fatalf("instance %s has block devices %+v", id, in.BlockDeviceMappings)
	}
	return aws.ToString(in.BlockDeviceMappings[0].Ebs.VolumeId)
}

func TestDocumentedRootVolumeRules(t *testing.T) {
	t.Parallel()
	for name, r := range map[string]rule{
		"R77 CreateReplaceRootVolumeTask: an image of the instance's architecture, on a running instance": {opts: Options{Images: []Image{NewerDebian}}, run: func(h *harness) {
			a := h.running(nil)
			before, err := h.describe(a)
			h.ok("DescribeInstances", err)
			oldVolume := h.rootVolume(a)
			_, err = h.replaceRoot(a, "", "", true)
			h.failsWith("to the launch state, not modelled", err, http.StatusNotImplemented, "NotImplemented")
			_, err = h.replaceRoot(a, h.debianAMI("arm64"), "", true)
			h.fails("an image of another architecture", err, "InvalidParameterCombination", "architecture")
			_, err = h.replaceRoot(a, "ami-0123456789abcdef0", "", true)
			h.fails("an image that does not exist", err, "InvalidAMIID.NotFound", "")
			_, err = h.replaceRoot("i-0123456789abcdef0", NewerDebian.ID, "", true)
			h.fails("an instance that does not exist", err, "InvalidInstanceID.NotFound", "")
			stopped := h.running(nil)
			h.s.SetInstanceState(h.region, stopped, StateStopped)
			_, err = h.replaceRoot(stopped, NewerDebian.ID, "", true)
			h.fails("a stopped instance", err, "IncorrectInstanceState", "")

			// A target of a group a load balancer forwards to fails its health checks while the instance reboots.
			c := h.elb()
			_, tgARN, _ := h.stack(c)
			_, err = c.RegisterTargets(h.ctx, &elb.RegisterTargetsInput{TargetGroupArn: aws.String(tgARN), Targets: []elbtypes.TargetDescription{{Id: aws.String(a)}}})
			h.ok("RegisterTargets", err)
			health := func() elbtypes.TargetHealthStateEnum {
				out, err := c.DescribeTargetHealth(h.ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: aws.String(tgARN)})
				h.ok("DescribeTargetHealth", err)
				return out.TargetHealthDescriptions[0].TargetHealth.State
			}

			made, err := h.replaceRoot(a, NewerDebian.ID, "roll-1", true)
			h.ok("CreateReplaceRootVolumeTask", err)
			id := aws.ToString(made.ReplaceRootVolumeTask.ReplaceRootVolumeTaskId)
			if made.ReplaceRootVolumeTask.TaskState != ec2types.ReplaceRootVolumeTaskStatePending || aws.ToString(made.ReplaceRootVolumeTask.ImageId) != NewerDebian.ID {
				h.t.Errorf("made %+v", made.ReplaceRootVolumeTask)
			}
			again, err := h.replaceRoot(a, NewerDebian.ID, "roll-1", true)
			h.ok("the same request with its client token", err)
			if got := aws.ToString(again.ReplaceRootVolumeTask.ReplaceRootVolumeTaskId); got != id {
				h.t.Errorf("the same token answered task %s, not %s", got, id)
			}
			_, err = h.replaceRoot(a, NewerDebian.ID, "roll-1", false)
			h.fails("the token with other parameters", err, "IdempotentParameterMismatch", "")
			_, err = h.replaceRoot(a, NewerDebian.ID, "roll-2", true)
			h.fails("a second task while one has not ended", err, "IncorrectState", "")

			if st := h.taskOf(a, id).TaskState; st != ec2types.ReplaceRootVolumeTaskStateInProgress {
				h.t.Errorf("after one poll: %s, want in-progress", st)
			}
			if got := health(); got != elbtypes.TargetHealthStateEnumUnhealthy {
				h.t.Errorf("rebooting onto its new root volume, its target is %s", got)
			}
			done := h.taskOf(a, id)
			if done.TaskState != ec2types.ReplaceRootVolumeTaskStateSucceeded || aws.ToString(done.CompleteTime) == "" {
				h.t.Errorf("after two polls: %+v", done)
			}
			if got := health(); got != elbtypes.TargetHealthStateEnumHealthy {
				h.t.Errorf("once replaced, its target is %s", got)
			}
			after, err := h.describe(a)
			h.ok("DescribeInstances", err)
			if after.State.Name != ec2types.InstanceStateNameRunning || aws.ToString(after.PrivateIpAddress) != aws.ToString(before.PrivateIpAddress) ||
				aws.ToString(after.PublicIpAddress) != aws.ToString(before.PublicIpAddress) {
				h.t.Errorf("the instance changed: before %+v, after %+v", before, after)
			}
			newVolume := h.rootVolume(a)
			if newVolume == oldVolume {
				h.t.Errorf("the block device mapping still names %s", oldVolume)
			}
			if _, kept := h.s.Volume(h.region, oldVolume); kept {
				h.t.Errorf("the replaced volume %s was kept, though DeleteReplacedRootVolume", oldVolume)
			}

			kept, err := h.replaceRoot(a, h.debianAMI("amd64"), "", false)
			h.ok("a second replacement, keeping the volume it replaces", err)
			keptID := aws.ToString(kept.ReplaceRootVolumeTask.ReplaceRootVolumeTaskId)
			h.taskOf(a, keptID)
			if st := h.taskOf(a, keptID).TaskState; st != ec2types.ReplaceRootVolumeTaskStateSucceeded {
				h.t.Fatalf("second task %s", st)
			}
			if v, ok := h.s.Volume(h.region, newVolume); !ok || v.InstanceID != "" {
				h.t.Errorf("the replaced volume %s without DeleteReplacedRootVolume: %+v, %v; want kept, detached", newVolume, v, ok)
			}

			_, err = h.ec2.DescribeReplaceRootVolumeTasks(h.ctx, &ec2.DescribeReplaceRootVolumeTasksInput{ReplaceRootVolumeTaskIds: []string{"replacevol-0123456789abcdef0"}})
			h.fails("a task that does not exist", err, "InvalidReplaceRootVolumeTaskId.NotFound", "")
			_, err = h.ec2.DescribeReplaceRootVolumeTasks(h.ctx, &ec2.DescribeReplaceRootVolumeTasksInput{Filters: []ec2types.Filter{{Name: aws.String("image-id"), Values: []string{"x"}}}})
			h.fails("a filter it does not take", err, "InvalidParameterValue", "The filter 'image-id' is invalid")
		}},
		"R77 what CreateReplaceRootVolumeTask needs": {opts: Options{Images: []Image{NewerDebian}, CallerPolicies: []string{`{"Version": "2012-10-17", "Statement": [
			{"Effect": "Allow", "Action": ["ec2:RunInstances", "ec2:CreateTags"], "Resource": "*"},
			{"Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"},
			{"Effect": "Allow", "Action": "ec2:CreateReplaceRootVolumeTask", "Resource": "arn:aws:ec2:*:*:instance/*",
			 "Condition": {"StringEquals": {"aws:ResourceTag/managed-by": "egress"}}},
			{"Effect": "Allow", "Action": "ec2:CreateReplaceRootVolumeTask", "Resource": ["arn:aws:ec2:*:*:replace-root-volume-task/*", "arn:aws:ec2:*::image/*"]}]}`}}, run: func(h *harness) {
			tagged := func(in *ec2.RunInstancesInput) {
				in.TagSpecifications = []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: []ec2types.Tag{{Key: aws.String("managed-by"), Value: aws.String("egress")}}}}
			}
			other, ours := h.running(nil), h.running(tagged)
			_, err := h.replaceRoot(other, NewerDebian.ID, "", true)
			h.fails("an instance without the tag", err, "UnauthorizedOperation", "ec2:CreateReplaceRootVolumeTask on resource: arn:aws:ec2:"+h.region+":"+h.s.AccountID()+":instance/"+other)
			_, err = h.replaceRoot(ours, NewerDebian.ID, "", true)
			h.ok("an instance of the tag", err)
			_, err = h.ec2.DescribeReplaceRootVolumeTasks(h.ctx, &ec2.DescribeReplaceRootVolumeTasksInput{})
			h.ok("DescribeReplaceRootVolumeTasks", err)
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r.run(newHarness(t, r.opts))
		})
	}
}
