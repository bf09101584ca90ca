package aws

import (
	"slices"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	cwltypes "github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// logsSpec is a proxy with its own instance role and CloudWatch Logs as c says.
func logsSpec(fake *ec2fake.Server, name string, c *CloudWatchLogs) backend.Spec {
	spec := testSpec(fake, name)
	o := spec.Placement.Options.(*Options) //nolint:forcetypeassert // testSpec's own options
	o.IAMInstanceProfile, o.CreateInstanceRole, o.CloudWatchLogs = "", true, c
	return spec
}

// describedGroup reads a group back as a client does: its retention and tags, ok false when there is none.
func describedGroup(t *testing.T, logs *cloudwatchlogs.Client, group string) (days int32, tags map[string]string, ok bool) {
	t.Helper()
	out, err := logs.DescribeLogGroups(t.Context(), &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: awssdk.String(group)})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range out.LogGroups {
		if awssdk.ToString(g.LogGroupName) == group {
			got, err := logs.ListTagsForResource(t.Context(), &cloudwatchlogs.ListTagsForResourceInput{ResourceArn: g.LogGroupArn})
			if err != nil {
				t.Fatal(err)
			}
			return awssdk.ToInt32(g.RetentionInDays), got.Tags, true
		}
	}
	return 0, nil, false
}

// A proxy's own log group is made tagged like its other objects, with its retention (the default or the one
// given), read back into its options, and deleted with the proxy; a shared group is neither made nor deleted,
// and each proxy's role may make and write its own stream, in its own group or the shared one, and no other.
func TestCloudWatchLogsGroups(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		logs      *CloudWatchLogs
		group     string
		retention int32 // 0: the group is not the proxy's own
	}{
		"own group, default retention": {logs: &CloudWatchLogs{}, group: "/egress-proxy/logs-a", retention: DefaultLogRetentionDays},
		"own group, a week":            {logs: &CloudWatchLogs{RetentionDays: 7}, group: "/egress-proxy/logs-a", retention: 7},
		"shared group":                 {logs: &CloudWatchLogs{LogGroup: "team/proxies"}, group: "team/proxies"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, ec2fake.Options{})
			ctx := t.Context()
			admin := cloudwatchlogs.NewFromConfig(fake.AdminAWSConfig(testRegion))
			if tc.retention == 0 {
				if _, err := admin.CreateLogGroup(ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: awssdk.String(tc.group)}); err != nil {
					t.Fatal(err)
				}
			}
			spec, other := logsSpec(fake, "logs-a", tc.logs), logsSpec(fake, "logs-b", tc.logs)
			inst, err := b.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Create(ctx, other); err != nil {
				t.Fatal(err)
			}
			days, tags, ok := describedGroup(t, admin, tc.group)
			switch {
			case !ok:
				t.Fatalf("no log group %s", tc.group)
			case tc.retention != 0 && (days != tc.retention || tags[backend.LabelOwner] != spec.Owner || tags[backend.LabelUID] != spec.UID || !managed(tags) || tags[tagName] != spec.Name):
				t.Errorf("the proxy's group: retention %d, tags %v; want %d days and the proxy's tags", days, tags, tc.retention)
			case tc.retention == 0 && (days != 0 || len(tags) != 0):
				t.Errorf("the shared group was changed: retention %d, tags %v", days, tags)
			}
			got, err := b.Get(ctx, inst.ID)
			if err != nil {
				t.Fatal(err)
			}
			if o, _ := got.Placement.Options.(*Options); o == nil || o.CloudWatchLogs == nil || *o.CloudWatchLogs != *tc.logs {
				t.Errorf("read back %+v, want cloudwatch_logs %+v", got.Placement.Options, tc.logs)
			}

			// The instance's role, as the guest signs: its own stream, not its neighbour's.
			var instanceID string
			for _, in := range fake.Instances(testRegion) {
				if in.Tags[tagName] == spec.Name {
					instanceID = in.ID
				}
			}
			k, sk, tok := fake.InstanceCredentials(testRegion, instanceID, 3600e9)
			cfg := fake.AWSConfig(testRegion)
			cfg.Credentials = credentials.NewStaticCredentialsProvider(k, sk, tok)
			guest := cloudwatchlogs.NewFromConfig(cfg, func(o *cloudwatchlogs.Options) { o.RetryMaxAttempts = 1 })
			event := []cwltypes.InputLogEvent{{Timestamp: awssdk.Int64(fake.Now().UnixMilli()), Message: awssdk.String("{}")}}
			for _, proxy := range []string{spec.Name, other.Name} {
				group, stream := logTarget(proxy, tc.logs)
				_, createErr := guest.CreateLogStream(ctx, &cloudwatchlogs.CreateLogStreamInput{LogGroupName: &group, LogStreamName: &stream})
				if createErr != nil {
					if _, err := admin.CreateLogStream(ctx, &cloudwatchlogs.CreateLogStreamInput{LogGroupName: &group, LogStreamName: &stream}); err != nil {
						t.Fatal(err)
					}
				}
				_, putErr := guest.PutLogEvents(ctx, &cloudwatchlogs.PutLogEventsInput{LogGroupName: &group, LogStreamName: &stream, LogEvents: event})
				own := proxy == spec.Name
				for what, err := range map[string]error{"CreateLogStream": createErr, "PutLogEvents": putErr} {
					if own && err != nil {
						t.Errorf("%s to its own stream %s/%s: %v", what, group, stream, err)
					}
					if !own && (err == nil || !strings.Contains(err.Error(), "not authorized to perform: logs:"+what)) {
						t.Errorf("%s to another proxy's stream %s/%s: %v, want refused", what, group, stream, err)
					}
				}
			}

			if err := b.Delete(ctx, inst.ID); err != nil {
				t.Fatal(err)
			}
			_, _, ok = describedGroup(t, admin, tc.group)
			if ok != (tc.retention == 0) {
				t.Errorf("after the delete, the group %s is there: %v; want it gone only when it was the proxy's own", tc.group, ok)
			}
			if tc.retention != 0 {
				if _, _, ok := describedGroup(t, admin, ownLogGroup(other.Name)); !ok {
					t.Errorf("the delete took the other proxy's group")
				}
			}
		})
	}
}

// A log group left without its proxy (a delete that stopped after the instance went) is listed as a leftover
// of its name, and deleting that id removes it; another owner's, or one the provider did not make, is neither
// listed nor adopted.
func TestCloudWatchLogsLeftoverAndOthers(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	ctx := t.Context()
	admin := cloudwatchlogs.NewFromConfig(fake.AdminAWSConfig(testRegion))
	left := testSpec(fake, "left")
	mk := func(group string, tags map[string]string) {
		t.Helper()
		if _, err := admin.CreateLogGroup(ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: awssdk.String(group), Tags: tags}); err != nil {
			t.Fatal(err)
		}
	}
	mk(ownLogGroup("left"), groupTags(left, fake.Now()))
	theirs := testSpec(fake, "theirs")
	theirs.Owner = "team-b"
	mk(ownLogGroup("theirs"), groupTags(theirs, fake.Now()))
	mk(ownLogGroup("handmade"), nil)

	listed, err := b.ListByTag(ctx, backend.Selector{Owner: left.Owner})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range listed {
		names = append(names, in.Name)
	}
	if !slices.Equal(names, []string{"left"}) || listed[0].State != backend.StateFailed || !strings.Contains(strings.Join(listed[0].Notes, " "), "CloudWatch Logs group") ||
		listed[0].UID != left.UID || listed[0].CreatedAt.IsZero() {
		t.Fatalf("ListByTag = %+v, want the leftover group of left alone", listed)
	}
	if err := b.Delete(ctx, listed[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := describedGroup(t, admin, ownLogGroup("left")); ok {
		t.Error("deleting the leftover left its log group")
	}

	// A proxy of a name whose group is not this owner's, or not the provider's: refused, its group kept.
	for _, name := range []string{"theirs", "handmade"} {
		spec := logsSpec(fake, name, &CloudWatchLogs{})
		_, err := b.Create(ctx, spec)
		if backend.ClassOf(err) != backend.ClassPermanent {
			t.Errorf("Create %s over a group not its own = %v, want Permanent", name, err)
		}
		if _, _, ok := describedGroup(t, admin, ownLogGroup(name)); !ok {
			t.Errorf("the refused create of %s took the group", name)
		}
		if len(fake.Instances(testRegion)) != 0 {
			t.Errorf("the refused create of %s launched an instance", name)
		}
	}
}

// The options' rules, as the provider's plan checks them too.
func TestCloudWatchLogsOptions(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		logs    *CloudWatchLogs
		wantErr string
	}{
		"off":                          {},
		"own group":                    {logs: &CloudWatchLogs{}},
		"own group, a documented days": {logs: &CloudWatchLogs{RetentionDays: 3653}},
		"own group, days not taken":    {logs: &CloudWatchLogs{RetentionDays: 31}, wantErr: "not one CloudWatch Logs takes"},
		"shared group":                 {logs: &CloudWatchLogs{LogGroup: "/team/proxy-logs#1"}},
		"shared group with retention":  {logs: &CloudWatchLogs{LogGroup: "team", RetentionDays: 7}, wantErr: "its owner's"},
		"shared group, a colon":        {logs: &CloudWatchLogs{LogGroup: "team:a"}, wantErr: "1 to 512 characters"},
		"shared group, too long":       {logs: &CloudWatchLogs{LogGroup: strings.Repeat("a", 513)}, wantErr: "1 to 512 characters"},
		"shared group, aws/":           {logs: &CloudWatchLogs{LogGroup: "aws/lambda"}, wantErr: "aws/"},
		"shared group, the proxies'":   {logs: &CloudWatchLogs{LogGroup: "/egress-proxy/other"}, wantErr: "each proxy's own group"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := tc.logs.validate()
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// A replacement keeps the proxy's own log group and its lines for the successor of its name, which adopts it
// (its UID, its retention); the successor's destroy deletes it.
func TestCloudWatchLogsKeptForTheSuccessor(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	ctx := t.Context()
	admin := cloudwatchlogs.NewFromConfig(fake.AdminAWSConfig(testRegion))
	first := logsSpec(fake, "kept", &CloudWatchLogs{RetentionDays: 7})
	inst, err := b.Create(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	group := awssdk.String(ownLogGroup("kept"))
	if _, err := admin.CreateLogStream(ctx, &cloudwatchlogs.CreateLogStreamInput{LogGroupName: group, LogStreamName: awssdk.String("kept")}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.PutLogEvents(ctx, &cloudwatchlogs.PutLogEventsInput{LogGroupName: group, LogStreamName: awssdk.String("kept"),
		LogEvents: []cwltypes.InputLogEvent{{Timestamp: awssdk.Int64(fake.Now().UnixMilli()), Message: awssdk.String("the first proxy's line")}}}); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteForReplacement(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := describedGroup(t, admin, *group); !ok {
		t.Fatal("the replacement deleted the proxy's log group")
	}
	second := logsSpec(fake, "kept", &CloudWatchLogs{RetentionDays: 14})
	second.UID = "uid-kept-2"
	inst, err = b.Create(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	days, tags, ok := describedGroup(t, admin, *group)
	if !ok || days != 14 || tags[backend.LabelUID] != second.UID {
		t.Errorf("the successor's group: %v, %d days, tags %v; want it adopted, 14 days, the successor's UID", ok, days, tags)
	}
	if events := fake.LogEvents(testRegion, *group, "kept"); len(events) != 1 || events[0].Message != "the first proxy's line" {
		t.Errorf("the kept group's lines: %+v", events)
	}
	if err := b.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := describedGroup(t, admin, *group); ok {
		t.Error("the successor's destroy left the log group")
	}
}

// A proxy whose name is derived from its UID gets another name when replaced: its group is not kept, since no
// successor would adopt it.
func TestCloudWatchLogsNotKeptForAnotherName(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	ctx := t.Context()
	spec := logsSpec(fake, "", &CloudWatchLogs{})
	spec.Name = backend.NameFromUID(spec.UID)
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if names := fake.LogGroupNames(testRegion); !slices.Equal(names, []string{ownLogGroup(spec.Name)}) {
		t.Fatalf("log groups %v, want the proxy's", names)
	}
	if err := b.DeleteForReplacement(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if names := fake.LogGroupNames(testRegion); len(names) != 0 {
		t.Errorf("the replacement of a proxy named after its UID kept %v", names)
	}
}
