package aws

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// The proxy's access log in CloudWatch Logs (issue 40), opt-in since AWS charges for what it ingests and
// stores. The guest follows Squid's access log and sends its lines with PutLogEvents, signed with the instance
// role's credentials, to a stream named after the proxy (logStreamName), which it makes itself; the stream is
// in a group of the proxy's own, which Create makes (tagged like every other object, so that List and Delete
// find it) with a retention and Delete removes, or in a shared group the user names, which the provider never
// makes, changes or deletes. The instance role may make and write its own stream only (instancerole.go,
// InstanceRolePolicyFile). The log follows the proxy's instance: the setting is given to the guest in its
// user-data, so changing it replaces the proxy.

// CloudWatchLogs says where a proxy's access log goes in CloudWatch Logs.
type CloudWatchLogs struct {
	// LogGroup names a shared log group the user made, in the proxy's region; empty makes the proxy a group of
	// its own, LogGroupPrefix and its name.
	LogGroup string `json:"log_group,omitempty"`
	// RetentionDays is how long the proxy's own group keeps the lines, one of LogRetentionDays; 0 takes
	// DefaultLogRetentionDays. A shared group's retention is its owner's: it must be 0 with LogGroup.
	RetentionDays int32 `json:"retention_days,omitempty"`
}

// LogGroupPrefix starts the name of every log group the backend makes; the caller policy (CallerPolicyFile)
// allows its CloudWatch Logs actions on these names only, and a shared group may not take one.
const LogGroupPrefix = "/egress-proxy/"

// DefaultLogRetentionDays is the retention of a proxy's own log group when none is given: a month of lines to
// look back on, not kept (and charged) forever as a group without retention would be.
const DefaultLogRetentionDays int32 = 30

// LogRetentionDays are the retentions CloudWatch Logs takes (CloudWatch Logs API Reference: PutRetentionPolicy,
// retentionInDays).
var LogRetentionDays = []int32{1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653}

// logGroupNameRE is CreateLogGroup's rule for a group's name: 1 to 512 of a-z, A-Z, 0-9, _ - / . #.
var logGroupNameRE = regexp.MustCompile(`^[.\-_/#A-Za-z0-9]{1,512}$`)

// ValidateLogGroupName accepts the name of a shared log group: CloudWatch Logs' rules (CreateLogGroup: 1 to 512
// characters of a-z, A-Z, 0-9, '_', '-', '/', '.', '#', not beginning "aws/"), and not under LogGroupPrefix,
// where the proxies' own groups are.
func ValidateLogGroupName(name string) error {
	switch {
	case !logGroupNameRE.MatchString(name):
		return fmt.Errorf("log group name %q must be 1 to 512 characters of letters, digits, '_', '-', '/', '.' and '#' (CloudWatch Logs' rule)", name)
	case strings.HasPrefix(name, "aws/"):
		return fmt.Errorf("log group name %q may not begin with aws/, which CloudWatch Logs keeps for AWS's own groups", name)
	case strings.HasPrefix(name, LogGroupPrefix):
		return fmt.Errorf("log group name %q is under %s, where each proxy's own group is: leave log_group out to give the proxy its own, or name a group elsewhere", name, LogGroupPrefix)
	}
	return nil
}

// ValidateLogRetention accepts a retention CloudWatch Logs takes.
func ValidateLogRetention(days int32) error {
	if !slices.Contains(LogRetentionDays, days) {
		return fmt.Errorf("retention of %d days is not one CloudWatch Logs takes: one of %v", days, LogRetentionDays)
	}
	return nil
}

func (c *CloudWatchLogs) validate() error {
	if c == nil {
		return nil
	}
	if c.LogGroup != "" {
		if c.RetentionDays != 0 {
			return fmt.Errorf("a retention is set on the proxy's own log group only: a shared group's (%s) is its owner's", c.LogGroup)
		}
		return ValidateLogGroupName(c.LogGroup)
	}
	if c.RetentionDays != 0 {
		return ValidateLogRetention(c.RetentionDays)
	}
	return nil
}

// ownLogGroup names the proxy's own log group.
func ownLogGroup(proxy string) string { return LogGroupPrefix + proxy }

// logTarget is the group and stream the proxy's guest writes to.
func logTarget(proxy string, c *CloudWatchLogs) (group, stream string) {
	group = c.LogGroup
	if group == "" {
		group = ownLogGroup(proxy)
	}
	return group, logStreamName(proxy)
}

// logStreamName names the proxy's stream, in its own group or a shared one: the proxy's name, unique among
// the proxies of a region, so that each proxy's role may write its own stream only.
func logStreamName(proxy string) string { return proxy }

func logGroupObject(region, group string) string {
	return fmt.Sprintf("aws CloudWatch Logs group %s in region %s", group, region)
}

// findLogGroup is the group of that exact name, with its ARN as TagResource and ListTagsForResource take it,
// or "" when there is none: one DescribeLogGroups of one group, since the exact name sorts first among those
// it begins, so that a proxy without CloudWatch Logs costs its delete one call and no error.
func (b *Backend) findLogGroup(ctx context.Context, r *region, group string) (string, error) {
	out, err := r.logs.DescribeLogGroups(ctx, &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: awssdk.String(group), Limit: awssdk.Int32(1)})
	if err != nil {
		return "", classify(logGroupObject(r.name, group), err)
	}
	if len(out.LogGroups) == 0 || awssdk.ToString(out.LogGroups[0].LogGroupName) != group {
		return "", nil
	}
	return awssdk.ToString(out.LogGroups[0].LogGroupArn), nil
}

// ensureLogGroup makes, or finds again, the proxy's own log group, tagged like its other objects, and sets
// its retention; nothing for a proxy without CloudWatch Logs or with a shared group. A group of the name the
// provider did not make, or another owner's, is refused; this owner's leftover (a gone proxy of the name) is
// adopted and tagged as this proxy's.
func (b *Backend) ensureLogGroup(ctx context.Context, r *region, spec backend.Spec, o Options) error {
	c := o.CloudWatchLogs
	if c == nil || c.LogGroup != "" {
		return nil
	}
	group := ownLogGroup(spec.Name)
	obj := logGroupObject(r.name, group)
	days := c.RetentionDays
	if days == 0 {
		days = DefaultLogRetentionDays
	}
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		_, err := r.logs.CreateLogGroup(ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: awssdk.String(group), Tags: groupTags(spec, time.Now())})
		if errorCode(err) == "ResourceAlreadyExistsException" {
			arn, err := b.findLogGroup(ctx, r, group)
			if err != nil || arn == "" {
				return err // gone since: the retry makes it
			}
			out, err := r.logs.ListTagsForResource(ctx, &cloudwatchlogs.ListTagsForResourceInput{ResourceArn: awssdk.String(arn)})
			if err != nil {
				return classify(obj, err)
			}
			if !managed(out.Tags) || out.Tags[tagName] != spec.Name {
				return backend.Permanent(obj, "exists and was not made by this provider for this proxy: delete or rename it, or name it as a shared log_group")
			}
			if err := (backend.Ownership{Owner: spec.Owner}).Check(obj, out.Tags[backend.LabelOwner], ""); err != nil {
				return err
			}
			if out.Tags[backend.LabelUID] != spec.UID {
				if _, err := r.logs.TagResource(ctx, &cloudwatchlogs.TagResourceInput{ResourceArn: awssdk.String(arn), Tags: objectTags(spec)}); err != nil {
					return classify(obj, err)
				}
			}
		} else if err != nil {
			return classify(obj, err)
		}
		_, err = r.logs.PutRetentionPolicy(ctx, &cloudwatchlogs.PutRetentionPolicyInput{LogGroupName: awssdk.String(group), RetentionInDays: awssdk.Int32(days)})
		return classify(obj, err)
	})
}

// deleteLogGroup deletes the proxy's own log group, with its lines, when there is one and it is this owner's;
// a group of the name the provider did not make, or another owner's, is left as it is. A shared group is never
// touched: the proxy's stream stays in it, with its lines, for as long as its owner keeps them. forSuccessor
// (the delete half of a replacement) keeps the group for the successor of the same name, unless the name is
// the one derived from the proxy's UID (backend.NameFromUID), which the successor does not share.
func (b *Backend) deleteLogGroup(ctx context.Context, r *region, name string, forSuccessor bool) error {
	group := ownLogGroup(name)
	obj := logGroupObject(r.name, group)
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		arn, err := b.findLogGroup(ctx, r, group)
		if err != nil || arn == "" {
			return err
		}
		out, err := r.logs.ListTagsForResource(ctx, &cloudwatchlogs.ListTagsForResourceInput{ResourceArn: awssdk.String(arn)})
		if errorCode(err) == "ResourceNotFoundException" {
			return nil
		}
		if err != nil {
			return classify(obj, err)
		}
		if !managed(out.Tags) || out.Tags[tagName] != name || !sameOwner(ctx, out.Tags) {
			return nil
		}
		if forSuccessor && backend.NameFromUID(out.Tags[backend.LabelUID]) != name {
			return nil
		}
		_, err = r.logs.DeleteLogGroup(ctx, &cloudwatchlogs.DeleteLogGroupInput{LogGroupName: awssdk.String(group)})
		if errorCode(err) == "ResourceNotFoundException" {
			return nil
		}
		return classify(obj, err)
	})
}

// ownLogGroups are the owner's proxies' own log groups whose proxy is not among skip, by proxy name with their
// tags: one paged DescribeLogGroups under LogGroupPrefix, and one ListTagsForResource per group left (the
// groups have no filter by tag), so that a group whose proxy is gone is listed as a leftover.
func (b *Backend) ownLogGroups(ctx context.Context, r *region, owner string, skip map[string]bool) (map[string]map[string]string, error) {
	found := map[string]map[string]string{}
	pages := cloudwatchlogs.NewDescribeLogGroupsPaginator(r.logs, &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: awssdk.String(LogGroupPrefix)})
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify("aws CloudWatch Logs groups in region "+r.name, err)
		}
		for _, g := range out.LogGroups {
			group := awssdk.ToString(g.LogGroupName)
			name := strings.TrimPrefix(group, LogGroupPrefix)
			if skip[name] || strings.Contains(name, "/") {
				continue
			}
			tags, err := r.logs.ListTagsForResource(ctx, &cloudwatchlogs.ListTagsForResourceInput{ResourceArn: g.LogGroupArn})
			if errorCode(err) == "ResourceNotFoundException" {
				continue // deleted since it was listed
			}
			if err != nil {
				return nil, classify(logGroupObject(r.name, group), err)
			}
			if managed(tags.Tags) && tags.Tags[backend.LabelOwner] == owner && tags.Tags[tagName] == name {
				found[name] = tags.Tags
			}
		}
	}
	return found, nil
}
