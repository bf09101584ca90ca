package aws

import (
	"context"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
)

// TagInstance is the tag that binds a proxy's parameters to its instance: its value is the instance's ARN,
// which is what a request signed with the instance role's credentials carries as ec2:SourceInstanceARN. A
// role several proxies share is scoped to each instance's own parameters by the condition
// "ssm:resourceTag/egress-proxy-instance" = "${ec2:SourceInstanceARN}" (the documented policy), so that root
// on one proxy reads no other proxy's secrets and marks no other proxy's config applied.
const TagInstance = "egress-proxy-instance"

// appliedPlaceholder is the applied parameter's value before the guest's first report: the parameter
// exists, tagged, so the role's condition admits the guest's PutParameter to it (a new parameter has no
// tags to meet a condition).
const appliedPlaceholder = "-"

// bindParameters tags the parameters the guest reads and writes (those of written: the config and its
// parts, the secrets, and applied) with the instance's ARN and the proxy's own tags (an applied parameter a
// killed replacement left is this proxy's now), making the applied parameter first when there is none. For
// a freshly launched instance (fresh) an applied parameter left by a former instance of the name is reset:
// what that one applied says nothing of this one. A retried create binds again, alike.
func (b *Backend) bindParameters(ctx context.Context, r *region, spec backend.Spec, instanceID string, fresh bool, written parameters) error {
	arn, err := b.instanceARN(ctx, r, instanceID)
	if err != nil {
		return err
	}
	applied := guest.ParameterPath(spec.Name, guest.ParameterApplied)
	tags := objectTags(spec)
	tags[TagInstance] = arn
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		in := &ssm.PutParameterInput{
			Name: awssdk.String(applied), Value: awssdk.String(appliedPlaceholder), Type: ssmtypes.ParameterTypeString,
			Tags: ssmTags(tags), Description: awssdk.String("egress proxy " + spec.Name + ": applied"),
		}
		_, err := r.ssm.PutParameter(ctx, in)
		if errorCode(err) == "ParameterAlreadyExists" {
			if !fresh {
				return nil
			}
			in.Tags, in.Overwrite = nil, awssdk.Bool(true)
			_, err = r.ssm.PutParameter(ctx, in)
		}
		return classify(parameterObject(r.name, applied), err)
	})
	if err != nil {
		return err
	}
	bound := []string{guest.ParameterConfig, guest.ParameterSecrets, guest.ParameterApplied}
	for i := range written.parts {
		bound = append(bound, guest.PartName(guest.ParameterConfig, i+1))
	}
	for _, p := range bound {
		path := guest.ParameterPath(spec.Name, p)
		err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
			_, err := r.ssm.AddTagsToResource(ctx, &ssm.AddTagsToResourceInput{
				ResourceType: ssmtypes.ResourceTypeForTaggingParameter, ResourceId: awssdk.String(path), Tags: ssmTags(tags),
			})
			return classify(parameterObject(r.name, path), err)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// instanceARN is the ARN of the instance of id, as requests signed with its role's credentials carry it
// (ec2:SourceInstanceARN).
func (b *Backend) instanceARN(ctx context.Context, r *region, instanceID string) (string, error) {
	account, err := b.account(ctx, r)
	if err != nil {
		return "", err
	}
	return "arn:" + partitionOf(r.name) + ":ec2:" + r.name + ":" + account + ":instance/" + instanceID, nil
}

// account is the id of the account the region's credentials are of, asked once.
func (b *Backend) account(ctx context.Context, r *region) (string, error) {
	r.accountOnce.Lock()
	defer r.accountOnce.Unlock()
	if r.accountID != "" {
		return r.accountID, nil
	}
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		out, err := r.sts.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
		if err != nil {
			return classify("aws account of region "+r.name, err)
		}
		r.accountID = awssdk.ToString(out.Account)
		return nil
	})
	return r.accountID, err
}

// partitionOf is the ARN partition of a region: China's and GovCloud's are their own.
func partitionOf(region string) string {
	switch {
	case strings.HasPrefix(region, "cn-"):
		return "aws-cn"
	case strings.HasPrefix(region, "us-gov-"):
		return "aws-us-gov"
	}
	return "aws"
}
