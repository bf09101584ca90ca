package ec2fake

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// harness drives one fake through the real SDK clients of one region, each call made once (no retries), so
// that a test reads the fake's answer itself.
type harness struct {
	t      *testing.T
	s      *Server
	ctx    context.Context
	region string
	ec2    *ec2.Client
	ssm    *ssm.Client
	sts    *sts.Client
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	return (&harness{t: t, s: New(t, opts), ctx: t.Context()}).in("eu-west-1")
}

// in is the harness for another region of the same fake.
func (h *harness) in(region string) *harness {
	cfg := h.s.AWSConfig(region)
	return h.with(region, cfg)
}

func (h *harness) with(region string, cfg aws.Config, apiOptions ...func(*middleware.Stack) error) *harness {
	out := *h
	out.region = region
	out.ec2 = ec2.NewFromConfig(cfg, func(o *ec2.Options) {
		o.RetryMaxAttempts = 1
		o.APIOptions = append(o.APIOptions, apiOptions...)
	})
	out.ssm = ssm.NewFromConfig(cfg, func(o *ssm.Options) {
		o.RetryMaxAttempts = 1
		o.APIOptions = append(o.APIOptions, apiOptions...)
	})
	out.sts = sts.NewFromConfig(cfg, func(o *sts.Options) {
		o.RetryMaxAttempts = 1
		o.APIOptions = append(o.APIOptions, apiOptions...)
	})
	return &out
}

func codeOf(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func statusOf(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// fails checks that err is the service's error code (and, when words is set, that its message has them).
func (h *harness) fails(what string, err error, code, words string) {
	h.t.Helper()
	if err == nil {
		h.t.Errorf("%s: succeeded, want %s", what, code)
		return
	}
	if codeOf(err) != code || !strings.Contains(err.Error(), words) {
		h.t.Errorf("%s: %v, want %s with %q", what, err, code, words)
	}
}

// failsWith also checks the HTTP status.
func (h *harness) failsWith(what string, err error, status int, code string) {
	h.t.Helper()
	h.fails(what, err, code, "")
	if err != nil && statusOf(err) != status {
		h.t.Errorf("%s: HTTP status %d, want %d", what, statusOf(err), status)
	}
}

func (h *harness) ok(what string, err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatalf("%s: %v", what, err)
	}
}

// launch is a RunInstances the fake accepts, in the default subnet, changed by edit.
func (h *harness) launch(edit func(*ec2.RunInstancesInput)) (*ec2.RunInstancesOutput, error) {
	in := &ec2.RunInstancesInput{
		ImageId: aws.String(h.debianAMI("amd64")), InstanceType: ec2types.InstanceTypeT3Micro,
		MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
	}
	if edit != nil {
		edit(in)
	}
	return h.ec2.RunInstances(h.ctx, in)
}

// launchErr is launch's error alone.
func (h *harness) launchErr(edit func(*ec2.RunInstancesInput)) error {
	_, err := h.launch(edit)
	return err
}

// mustLaunch launches one instance and returns its id.
func (h *harness) mustLaunch(edit func(*ec2.RunInstancesInput)) string {
	h.t.Helper()
	out, err := h.launch(edit)
	h.ok("RunInstances", err)
	return aws.ToString(out.Instances[0].InstanceId)
}

func (h *harness) debianAMI(arch string) string {
	for i, r := range h.s.opts.Regions {
		if r == h.region {
			return DebianAMI(i, arch)
		}
	}
	h.t.Fatalf("region %s not served", h.region)
	return ""
}

// describe returns one instance as DescribeInstances answers it.
func (h *harness) describe(id string) (ec2types.Instance, error) {
	out, err := h.ec2.DescribeInstances(h.ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		return ec2types.Instance{}, err
	}
	return out.Reservations[0].Instances[0], nil
}

func (h *harness) state(id string) string {
	h.t.Helper()
	in, err := h.describe(id)
	h.ok("DescribeInstances "+id, err)
	return string(in.State.Name)
}

// running launches an instance and polls it to running.
func (h *harness) running(edit func(*ec2.RunInstancesInput)) string {
	h.t.Helper()
	id := h.mustLaunch(edit)
	h.s.Settle()
	if st := h.state(id); st != StateRunning {
		h.t.Fatalf("instance %s is %s after Settle", id, st)
	}
	return id
}

// assume opens a role session with in and returns a harness signing with its temporary credentials.
func (h *harness) assume(in *sts.AssumeRoleInput) *harness {
	h.t.Helper()
	out, err := h.sts.AssumeRole(h.ctx, in)
	h.ok("AssumeRole "+aws.ToString(in.RoleArn), err)
	cfg := h.s.AWSConfig(h.region)
	c := out.Credentials
	cfg.Credentials = credentials.NewStaticCredentialsProvider(aws.ToString(c.AccessKeyId), aws.ToString(c.SecretAccessKey), aws.ToString(c.SessionToken))
	return h.with(h.region, cfg)
}

func tags(kv ...string) []ec2types.Tag {
	var out []ec2types.Tag
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, ec2types.Tag{Key: aws.String(kv[i]), Value: aws.String(kv[i+1])})
	}
	return out
}

func flt(name string, values ...string) ec2types.Filter {
	return ec2types.Filter{Name: aws.String(name), Values: values}
}

// withFormParam is an SDK option that adds a form parameter to each request after the SDK serialized it,
// as a hand-built or misspelt request would carry.
func withFormParam(kv string) func(*middleware.Stack) error {
	return func(st *middleware.Stack) error {
		return st.Serialize.Add(middleware.SerializeMiddlewareFunc("ec2fakeExtraParam", func(ctx context.Context, in middleware.SerializeInput, next middleware.SerializeHandler) (middleware.SerializeOutput, middleware.Metadata, error) {
			if req, ok := in.Request.(*smithyhttp.Request); ok {
				b, err := io.ReadAll(req.GetStream())
				if err != nil {
					return middleware.SerializeOutput{}, middleware.Metadata{}, err
				}
				req, err = req.SetStream(bytes.NewReader(append(b, []byte("&"+kv)...)))
				if err != nil {
					return middleware.SerializeOutput{}, middleware.Metadata{}, err
				}
				in.Request = req
			}
			return next.HandleSerialize(ctx, in)
		}), middleware.After)
	}
}

func instanceIDs(out *ec2.DescribeInstancesOutput) []string {
	var ids []string
	for _, r := range out.Reservations {
		ids = append(ids, instanceIDsOf(r.Instances)...)
	}
	return ids
}

func instanceIDsOf(list []ec2types.Instance) []string {
	var ids []string
	for _, in := range list {
		ids = append(ids, aws.ToString(in.InstanceId))
	}
	return ids
}

func tagMap(ts []ec2types.Tag) map[string]string {
	out := map[string]string{}
	for _, t := range ts {
		out[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return out
}
