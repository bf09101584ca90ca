package aws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
)

// A proxy's own instance role (Options.CreateInstanceRole): a role and an instance profile of the same name,
// made for the proxy alone, whose inline policy allows exactly what its guest calls on its own parameters
// (instanceRolePolicy), so that no condition on tags is needed to keep one proxy from another's secrets. IAM is
// global: the name carries the region (instanceRoleName). The role is made after the proxy's security group
// and removed before it, so that whatever a crash leaves of it is listed, with the group, as a leftover whose
// delete removes it too (list.go#Backend.listLeftovers).

// InstanceRolePrefix starts the name of every role and instance profile the backend makes: the caller policy
// (CallerPolicyFile) allows its IAM actions on these names only.
const InstanceRolePrefix = "egress-proxy-"

// maxRoleName is IAM's longest role name ("IAM and AWS STS quotas": 64 characters).
const maxRoleName = 64

// instanceRolePolicyName is the name of the role's one inline policy.
const instanceRolePolicyName = "egress-proxy-own-parameters"

// instanceRoleName names the role and the instance profile of the proxy name in region: the prefix, the name
// and the region, or, where that is longer than a role name may be, as much of the prefix and name as fits and
// a hash of both that keeps it unique.
func instanceRoleName(region, name string) string {
	if n := InstanceRolePrefix + name + "-" + region; len(n) <= maxRoleName {
		return n
	}
	sum := sha256.Sum256([]byte(region + "/" + name))
	suffix := "-" + hex.EncodeToString(sum[:4])
	return (InstanceRolePrefix + name)[:maxRoleName-len(suffix)] + suffix
}

// ec2TrustPolicy lets EC2 take the role for the instances of its profile ("IAM roles for Amazon EC2").
const ec2TrustPolicy = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}`

type policyDoc struct {
	Version   string            `json:"Version"`
	Statement []policyStatement `json:"Statement"`
}

type policyStatement struct {
	Sid       string                       `json:"Sid"`
	Effect    string                       `json:"Effect"`
	Action    string                       `json:"Action"`
	Resource  []string                     `json:"Resource"`
	Condition map[string]map[string]string `json:"Condition,omitempty"`
}

// instanceRolePolicy is the inline policy of the proxy's own role: the actions of the documented instance role
// policy (InstanceRolePolicyFile), each on this proxy's parameters alone, with no condition on tags: reading
// them (ssm:GetParameters on parameter/egress-proxy/<name>/*), reporting what it applied (ssm:PutParameter on
// its applied parameter), and, with a customer-managed key, decrypting its secrets through SSM
// (kms:Decrypt with the encryption context of its own parameters), and, with CloudWatch Logs, making and writing
// its own log stream (logs:CreateLogStream and logs:PutLogEvents on that stream alone, in its own group or the
// shared one). The paths follow guest.ParameterPath.
func instanceRolePolicy(region, account, name, kmsKeyID string, logs *CloudWatchLogs) string {
	partition := partitionOf(region)
	parameterARN := func(path string) string {
		return "arn:" + partition + ":ssm:" + region + ":" + account + ":parameter/" + strings.TrimPrefix(path, "/")
	}
	own := parameterARN(guest.ParameterPath(name, "*"))
	doc := policyDoc{Version: "2012-10-17", Statement: []policyStatement{
		{Sid: "ReadOnlyItsOwnParameters", Effect: "Allow", Action: "ssm:GetParameters", Resource: []string{own}},
		{Sid: "ReportOnlyItsOwnApplied", Effect: "Allow", Action: "ssm:PutParameter",
			Resource: []string{parameterARN(guest.ParameterPath(name, guest.ParameterApplied))}},
	}}
	if kmsKeyID != "" {
		doc.Statement = append(doc.Statement, policyStatement{Sid: "DecryptOnlyItsOwnSecrets", Effect: "Allow", Action: "kms:Decrypt",
			Resource: kmsKeyResources(partition, region, account, kmsKeyID),
			Condition: map[string]map[string]string{"StringLike": {
				"kms:EncryptionContext:PARAMETER_ARN": own,
				"kms:ViaService":                      "ssm." + region + "." + guest.DNSSuffix(region),
			}}})
	}
	if logs != nil {
		group, stream := logTarget(name, logs)
		streamARN := "arn:" + partition + ":logs:" + region + ":" + account + ":log-group:" + group + ":log-stream:" + stream
		for _, action := range []string{"logs:CreateLogStream", "logs:PutLogEvents"} {
			doc.Statement = append(doc.Statement, policyStatement{Sid: "OnlyItsOwnLogStream" + strings.TrimPrefix(action, "logs:"), Effect: "Allow",
				Action: action, Resource: []string{streamARN}})
		}
	}
	b, _ := json.Marshal(doc) // strings only: never fails
	return string(b)
}

// kmsKeyResources are the ARNs a decrypt with the key kmsKeyID is authorized on: the key's own for a key id
// or ARN; for an alias, any key of the account and region (KMS authorizes the key behind the alias, which the
// provider does not look up) and the alias's ARN, the encryption context condition still binding the decrypt
// to this proxy's parameters.
func kmsKeyResources(partition, region, account, keyID string) []string {
	prefix := "arn:" + partition + ":kms:" + region + ":" + account + ":"
	switch {
	case strings.HasPrefix(keyID, "arn:") && strings.Contains(keyID, ":alias/"):
		return []string{prefix + "key/*", keyID}
	case strings.HasPrefix(keyID, "arn:"):
		return []string{keyID}
	case strings.HasPrefix(keyID, "alias/"):
		return []string{prefix + "key/*", prefix + keyID}
	}
	return []string{prefix + "key/" + keyID}
}

func instanceRoleObject(name string) string { return "aws IAM role " + name }

// ensureInstanceRole makes, or finds again, the proxy's role with its inline policy and its instance profile
// holding it, and returns the profile's name. A role of the name that this provider did not make, or another
// owner's, is refused; a leftover of the same owner (a gone proxy of the name) is adopted. IAM answers
// from one global endpoint; what it made moments ago may not be known to EC2 yet, which the launch retries
// (propagation.go).
func (b *Backend) ensureInstanceRole(ctx context.Context, r *region, spec backend.Spec, o Options) (string, error) {
	name := instanceRoleName(r.name, spec.Name)
	obj := instanceRoleObject(name)
	account, err := b.account(ctx, r)
	if err != nil {
		return "", err
	}
	tags := iamTags(objectTags(spec))
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		_, err := r.iam.CreateRole(ctx, &iam.CreateRoleInput{
			RoleName: awssdk.String(name), AssumeRolePolicyDocument: awssdk.String(ec2TrustPolicy), Tags: tags,
			Description: awssdk.String(fmt.Sprintf("egress proxy %s in %s: reads its own parameters", spec.Name, r.name)),
		})
		if errorCode(err) != "EntityAlreadyExists" {
			return classify(obj, err)
		}
		out, err := r.iam.GetRole(ctx, &iam.GetRoleInput{RoleName: awssdk.String(name)})
		if err != nil {
			return classify(obj, err)
		}
		have := roleTags(out.Role.Tags)
		if !managed(have) {
			return backend.Permanent(obj, "a role of this name already exists and was not made by this provider: delete it, or choose another proxy name")
		}
		if err := (backend.Ownership{Owner: spec.Owner}).Check(obj, have[backend.LabelOwner], have[backend.LabelUID]); err != nil {
			return err
		}
		if have[backend.LabelUID] == spec.UID {
			return nil
		}
		// A leftover of a gone proxy of this name and owner (Create found no live instance of the name), or
		// a retried create whose answer was lost: adopted, as the security group is.
		_, err = r.iam.TagRole(ctx, &iam.TagRoleInput{RoleName: awssdk.String(name), Tags: tags})
		return classify(obj, err)
	})
	if err != nil {
		return "", err
	}
	policy := instanceRolePolicy(r.name, account, spec.Name, o.KMSKeyID, o.CloudWatchLogs)
	w := b.propagationWindow()
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		_, err := r.iam.PutRolePolicy(ctx, &iam.PutRolePolicyInput{RoleName: awssdk.String(name),
			PolicyName: awssdk.String(instanceRolePolicyName), PolicyDocument: awssdk.String(policy)})
		return w.classifyIAM(obj, err)
	})
	if err != nil {
		return "", err
	}
	profileObj := "aws IAM instance profile " + name
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		_, err := r.iam.CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: awssdk.String(name), Tags: tags})
		switch errorCode(err) {
		case "":
		case "EntityAlreadyExists":
			// Made by an earlier attempt (a profile is made only once its role is): it holds this role, or
			// none yet.
			out, err := r.iam.GetInstanceProfile(ctx, &iam.GetInstanceProfileInput{InstanceProfileName: awssdk.String(name)})
			if err != nil {
				return classify(profileObj, err)
			}
			if roles := out.InstanceProfile.Roles; len(roles) > 0 {
				if held := awssdk.ToString(roles[0].RoleName); held != name {
					return backend.Permanent(profileObj, "holds the role %s, not the proxy's own %s: delete the profile, then apply again", held, name)
				}
				return nil
			}
		default:
			return classify(profileObj, err)
		}
		_, err = r.iam.AddRoleToInstanceProfile(ctx, &iam.AddRoleToInstanceProfileInput{InstanceProfileName: awssdk.String(name), RoleName: awssdk.String(name)})
		if errorCode(err) == "LimitExceeded" {
			// A retry after a lost answer: the role is in; the next pass of the loop's GetInstanceProfile says so.
			return backend.Transient(profileObj, "already holds a role: %v", err)
		}
		return w.classifyIAM(profileObj, err)
	})
	return name, err
}

// iamRegion is the region IAM's global endpoint of region's partition is signed for ("AWS Identity and
// Access Management endpoints and quotas").
func iamRegion(region string) string {
	switch partitionOf(region) {
	case "aws-cn":
		return "cn-north-1"
	case "aws-us-gov":
		return "us-gov-west-1"
	}
	return "us-east-1"
}

// deleteOwnInstanceRole deletes the proxy's own role when it has one: the instance in was launched with it,
// or, with no instance left, the proxy's settings say it was made with one (a create that did not finish, an
// instance terminated behind the provider's back). A proxy with an instance profile of the user's makes no
// IAM call.
func (b *Backend) deleteOwnInstanceRole(ctx context.Context, r *region, proxy string, in *ec2types.Instance) error {
	made := ownsInstanceRole(r.name, proxy, in)
	if in == nil {
		st, ok, _, err := b.readStoredSpec(ctx, r, proxy)
		if err != nil {
			return err
		}
		made = ok && st.CreateInstanceRole
	}
	if !made {
		return nil
	}
	return b.deleteInstanceRole(ctx, r, proxy)
}

// classifyIAM is classify, but IAM's NoSuchEntity for what this create made moments ago is Transient while the
// window lasts: IAM is eventually consistent ("Changes that I make are not always immediately visible"), and
// a call right after CreateRole or CreateInstanceProfile may not see it yet.
func (w window) classifyIAM(object string, err error) error {
	if errorCode(err) == "NoSuchEntity" && time.Now().Before(w.until) {
		return backend.NewError(backend.ClassTransient, object, fmt.Errorf("not visible to IAM yet (made moments ago): %w", err))
	}
	return classify(object, err)
}

// ownsInstanceRole reports whether the instance was launched with the profile the backend makes for the
// proxy name in region.
func ownsInstanceRole(region, name string, in *ec2types.Instance) bool {
	if in == nil || in.IamInstanceProfile == nil {
		return false
	}
	arn := awssdk.ToString(in.IamInstanceProfile.Arn)
	return arn[strings.LastIndex(arn, "/")+1:] == instanceRoleName(region, name)
}

// deleteInstanceRole removes the proxy's instance profile and role, once no instance uses them: the role out
// of the profile, the profile, the role's inline policy, the role. Missing parts are no error; a role of the
// name that this provider did not make, or another owner's, is left alone.
func (b *Backend) deleteInstanceRole(ctx context.Context, r *region, proxy string) error {
	name := instanceRoleName(r.name, proxy)
	obj := instanceRoleObject(name)
	var tags map[string]string // nil: no role, and so no profile, which is made only with one
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		out, err := r.iam.GetRole(ctx, &iam.GetRoleInput{RoleName: awssdk.String(name)})
		if errorCode(err) == "NoSuchEntity" {
			return nil
		}
		if err != nil {
			return classify(obj, err)
		}
		tags = roleTags(out.Role.Tags)
		return nil
	})
	if err != nil || tags == nil {
		return err
	}
	if !managed(tags) || tags[tagName] != proxy || !sameOwner(ctx, tags) {
		return nil
	}
	profileObj := "aws IAM instance profile " + name
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		out, err := r.iam.GetInstanceProfile(ctx, &iam.GetInstanceProfileInput{InstanceProfileName: awssdk.String(name)})
		if errorCode(err) == "NoSuchEntity" {
			return nil
		}
		if err != nil {
			return classify(profileObj, err)
		}
		for _, role := range out.InstanceProfile.Roles {
			_, err := r.iam.RemoveRoleFromInstanceProfile(ctx, &iam.RemoveRoleFromInstanceProfileInput{
				InstanceProfileName: awssdk.String(name), RoleName: role.RoleName})
			if err != nil && errorCode(err) != "NoSuchEntity" {
				return classify(profileObj, err)
			}
		}
		_, err = r.iam.DeleteInstanceProfile(ctx, &iam.DeleteInstanceProfileInput{InstanceProfileName: awssdk.String(name)})
		return ignoreCodes(classify(profileObj, err), err, "NoSuchEntity")
	})
	if err != nil {
		return err
	}
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		_, err := r.iam.DeleteRolePolicy(ctx, &iam.DeleteRolePolicyInput{RoleName: awssdk.String(name), PolicyName: awssdk.String(instanceRolePolicyName)})
		if err != nil && errorCode(err) != "NoSuchEntity" {
			return classify(obj, err)
		}
		_, err = r.iam.DeleteRole(ctx, &iam.DeleteRoleInput{RoleName: awssdk.String(name)})
		if errorCode(err) == "DeleteConflict" {
			// Another inline policy, or a profile, added behind the provider's back: said, not retried for the
			// whole timeout.
			return &backend.Error{Class: backend.ClassPermanent, Object: obj, Err: err,
				Advice: "Remove what was added to the role (its other inline policies, the instance profiles holding it), then run the operation again."}
		}
		return ignoreCodes(classify(obj, err), err, "NoSuchEntity")
	})
}

// ignoreCodes is classified, or nil when raw's error code is one of codes.
func ignoreCodes(classified, raw error, codes ...string) error {
	if slices.Contains(codes, errorCode(raw)) {
		return nil
	}
	return classified
}

// iamTags are m as IAM tags, sorted by key.
func iamTags(m map[string]string) []iamtypes.Tag {
	var out []iamtypes.Tag
	for _, t := range ec2Tags(m) {
		out = append(out, iamtypes.Tag{Key: t.Key, Value: t.Value})
	}
	return out
}

func roleTags(tags []iamtypes.Tag) map[string]string {
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		m[awssdk.ToString(t.Key)] = awssdk.ToString(t.Value)
	}
	return m
}
