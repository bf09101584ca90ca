package ec2fake

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	cwltypes "github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"
)

// The rules of CloudWatch Logs (README.md, R63 to R68), one test each, driving the fake through the real
// CloudWatch Logs client.

func logsClient(h *harness) *cloudwatchlogs.Client {
	return h.logsAs(h.s.AWSConfig(h.region))
}

func (h *harness) logsAs(cfg aws.Config) *cloudwatchlogs.Client {
	return cloudwatchlogs.NewFromConfig(cfg, func(o *cloudwatchlogs.Options) { o.RetryMaxAttempts = 1 })
}

// events is n events of message m from start, a millisecond apart.
func events(start time.Time, n int, m string) []cwltypes.InputLogEvent {
	out := make([]cwltypes.InputLogEvent, n)
	for i := range out {
		out[i] = cwltypes.InputLogEvent{Timestamp: aws.Int64(start.UnixMilli() + int64(i)), Message: aws.String(m)}
	}
	return out
}

// readAll reads a stream from its head as a client does, page by page, until the forward token repeats.
func readAll(h *harness, c *cloudwatchlogs.Client, group, stream string) []string {
	var out []string
	var token *string
	for {
		page, err := c.GetLogEvents(h.ctx, &cloudwatchlogs.GetLogEventsInput{LogGroupName: aws.String(group), LogStreamName: aws.String(stream),
			StartFromHead: aws.Bool(true), NextToken: token, Limit: aws.Int32(3)})
		h.ok("GetLogEvents", err)
		if err != nil {
			return out
		}
		for _, e := range page.Events {
			out = append(out, aws.ToString(e.Message))
		}
		if token != nil && aws.ToString(page.NextForwardToken) == *token {
			return out
		}
		token = page.NextForwardToken
	}
}

func TestDocumentedLogsRules(t *testing.T) {
	t.Parallel()
	for name, r := range map[string]rule{
		"R63 log groups": {run: func(h *harness) {
			c := logsClient(h)
			_, err := c.CreateLogGroup(h.ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String("/egress-proxy/p1"), Tags: map[string]string{"owner": "team-a"}})
			h.ok("create", err)
			_, err = c.CreateLogGroup(h.ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String("/egress-proxy/p1")})
			h.failsWith("the same name again", err, http.StatusBadRequest, "ResourceAlreadyExistsException")
			for what, n := range map[string]string{"empty": "", "a colon": "a:b", "a space": "a b", "513 characters": strings.Repeat("a", 513)} {
				_, err = c.CreateLogGroup(h.ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String(n)})
				h.failsWith("a name with "+what, err, http.StatusBadRequest, "InvalidParameterException")
			}
			_, err = c.CreateLogGroup(h.ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String("aws/mine")})
			h.fails("a name beginning aws/", err, "InvalidParameterException", "can't start with the string aws/")
			_, err = c.CreateLogGroup(h.ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String("g"), Tags: map[string]string{"aws:x": "y"}})
			h.failsWith("a tag key beginning aws:", err, http.StatusBadRequest, "InvalidParameterException")
			many := map[string]string{}
			for i := range MaxLogGroupTags + 1 {
				many[strings.Repeat("k", i+1)] = "v"
			}
			_, err = c.CreateLogGroup(h.ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String("g"), Tags: many})
			h.failsWith("51 tags", err, http.StatusBadRequest, "InvalidParameterException")
			_, err = c.CreateLogGroup(h.ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String("g"), KmsKeyId: aws.String("arn:aws:kms:eu-west-1:123456789012:key/x")})
			h.failsWith("a KMS key", err, http.StatusNotImplemented, "NotImplemented")
			_, err = c.DeleteLogGroup(h.ctx, &cloudwatchlogs.DeleteLogGroupInput{LogGroupName: aws.String("/egress-proxy/p1")})
			h.ok("delete", err)
			_, err = c.DeleteLogGroup(h.ctx, &cloudwatchlogs.DeleteLogGroupInput{LogGroupName: aws.String("/egress-proxy/p1")})
			h.failsWith("delete again", err, http.StatusBadRequest, "ResourceNotFoundException")
			if names := h.s.LogGroupNames(h.region); len(names) != 0 {
				h.t.Errorf("groups left: %v", names)
			}
			_, err = logsClient(h.in("us-east-1")).DeleteLogGroup(h.ctx, &cloudwatchlogs.DeleteLogGroupInput{LogGroupName: aws.String("/egress-proxy/p1")})
			h.failsWith("another region's", err, http.StatusBadRequest, "ResourceNotFoundException")
		}},
		"R64 retention": {run: func(h *harness) {
			c := logsClient(h)
			_, err := c.CreateLogGroup(h.ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String("g")})
			h.ok("create", err)
			for _, days := range []int32{0, 2, 31, 3650, -1} {
				_, err = c.PutRetentionPolicy(h.ctx, &cloudwatchlogs.PutRetentionPolicyInput{LogGroupName: aws.String("g"), RetentionInDays: aws.Int32(days)})
				h.failsWith("retention of a value not documented", err, http.StatusBadRequest, "InvalidParameterException")
			}
			for _, days := range RetentionDays {
				_, err = c.PutRetentionPolicy(h.ctx, &cloudwatchlogs.PutRetentionPolicyInput{LogGroupName: aws.String("g"), RetentionInDays: aws.Int32(days)})
				h.ok("a documented retention", err)
			}
			_, err = c.PutRetentionPolicy(h.ctx, &cloudwatchlogs.PutRetentionPolicyInput{LogGroupName: aws.String("g"), RetentionInDays: aws.Int32(30)})
			h.ok("30 days", err)
			out, err := c.DescribeLogGroups(h.ctx, &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: aws.String("g")})
			h.ok("describe", err)
			if len(out.LogGroups) != 1 || aws.ToInt32(out.LogGroups[0].RetentionInDays) != 30 {
				h.t.Errorf("described %+v, want g with 30 days", out.LogGroups)
			}
			_, err = c.PutRetentionPolicy(h.ctx, &cloudwatchlogs.PutRetentionPolicyInput{LogGroupName: aws.String("none"), RetentionInDays: aws.Int32(30)})
			h.failsWith("a group that does not exist", err, http.StatusBadRequest, "ResourceNotFoundException")
		}},
		"R65 describe by prefix, in pages": {run: func(h *harness) {
			c := logsClient(h)
			for _, n := range []string{"/egress-proxy/b", "/egress-proxy/a", "/egress-proxy/c", "/other/a"} {
				_, err := c.CreateLogGroup(h.ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String(n)})
				h.ok("create "+n, err)
			}
			var got []string
			pages := cloudwatchlogs.NewDescribeLogGroupsPaginator(c, &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: aws.String("/egress-proxy/"), Limit: aws.Int32(2)})
			for pages.HasMorePages() {
				out, err := pages.NextPage(h.ctx)
				h.ok("a page", err)
				if err != nil {
					return
				}
				for _, g := range out.LogGroups {
					got = append(got, aws.ToString(g.LogGroupName))
					if want := "arn:aws:logs:" + h.region + ":" + h.s.AccountID() + ":log-group:" + aws.ToString(g.LogGroupName); aws.ToString(g.LogGroupArn) != want || aws.ToString(g.Arn) != want+":*" {
						h.t.Errorf("ARNs %s and %s, want %s and with :*", aws.ToString(g.LogGroupArn), aws.ToString(g.Arn), want)
					}
				}
			}
			if want := []string{"/egress-proxy/a", "/egress-proxy/b", "/egress-proxy/c"}; !slices.Equal(got, want) {
				h.t.Errorf("described %v, want %v", got, want)
			}
			_, err := c.DescribeLogGroups(h.ctx, &cloudwatchlogs.DescribeLogGroupsInput{Limit: aws.Int32(51)})
			h.failsWith("a limit over 50", err, http.StatusBadRequest, "InvalidParameterException")
			_, err = c.DescribeLogGroups(h.ctx, &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: aws.String("/a"), LogGroupNamePattern: aws.String("a")})
			h.failsWith("a prefix and a pattern", err, http.StatusBadRequest, "InvalidParameterException")
		}},
		"R66 tags by ARN": {run: func(h *harness) {
			c := logsClient(h)
			_, err := c.CreateLogGroup(h.ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String("g"), Tags: map[string]string{"a": "1"}})
			h.ok("create", err)
			arn := "arn:aws:logs:" + h.region + ":" + h.s.AccountID() + ":log-group:g"
			_, err = c.TagResource(h.ctx, &cloudwatchlogs.TagResourceInput{ResourceArn: aws.String(arn), Tags: map[string]string{"a": "2", "b": "3"}})
			h.ok("tag", err)
			out, err := c.ListTagsForResource(h.ctx, &cloudwatchlogs.ListTagsForResourceInput{ResourceArn: aws.String(arn)})
			h.ok("list", err)
			if err == nil && (len(out.Tags) != 2 || out.Tags["a"] != "2" || out.Tags["b"] != "3") {
				h.t.Errorf("tags %v, want a=2 b=3", out.Tags)
			}
			_, err = c.ListTagsForResource(h.ctx, &cloudwatchlogs.ListTagsForResourceInput{ResourceArn: aws.String(arn + "x")})
			h.failsWith("a group that does not exist", err, http.StatusBadRequest, "ResourceNotFoundException")
			_, err = c.ListTagsForResource(h.ctx, &cloudwatchlogs.ListTagsForResourceInput{ResourceArn: aws.String("arn:aws:logs:us-east-1:" + h.s.AccountID() + ":log-group:g")})
			h.failsWith("another region's ARN", err, http.StatusBadRequest, "InvalidParameterException")
		}},
		"R67 streams and events": {run: func(h *harness) {
			c := logsClient(h)
			now := h.s.Now()
			put := func(evs []cwltypes.InputLogEvent) (*cloudwatchlogs.PutLogEventsOutput, error) {
				return c.PutLogEvents(h.ctx, &cloudwatchlogs.PutLogEventsInput{LogGroupName: aws.String("g"), LogStreamName: aws.String("s"), LogEvents: evs})
			}
			_, err := put(events(now, 1, "x"))
			h.fails("a group that does not exist", err, "ResourceNotFoundException", "The specified log group does not exist.")
			_, err = c.CreateLogGroup(h.ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String("g")})
			h.ok("create the group", err)
			_, err = put(events(now, 1, "x"))
			h.fails("a stream that does not exist", err, "ResourceNotFoundException", "The specified log stream does not exist.")
			for what, n := range map[string]string{"a colon": "a:b", "an asterisk": "a*", "empty": ""} {
				_, err = c.CreateLogStream(h.ctx, &cloudwatchlogs.CreateLogStreamInput{LogGroupName: aws.String("g"), LogStreamName: aws.String(n)})
				h.failsWith("a stream name with "+what, err, http.StatusBadRequest, "InvalidParameterException")
			}
			_, err = c.CreateLogStream(h.ctx, &cloudwatchlogs.CreateLogStreamInput{LogGroupName: aws.String("none"), LogStreamName: aws.String("s")})
			h.failsWith("a stream in a group that does not exist", err, http.StatusBadRequest, "ResourceNotFoundException")
			_, err = c.CreateLogStream(h.ctx, &cloudwatchlogs.CreateLogStreamInput{LogGroupName: aws.String("g"), LogStreamName: aws.String("s")})
			h.ok("create the stream", err)
			_, err = c.CreateLogStream(h.ctx, &cloudwatchlogs.CreateLogStreamInput{LogGroupName: aws.String("g"), LogStreamName: aws.String("s")})
			h.failsWith("the stream again", err, http.StatusBadRequest, "ResourceAlreadyExistsException")

			// The batch's own limits: nothing of a refused batch is taken.
			over := MaxLogBatchBytes/2 - LogEventOverhead + 1 // two of them are a byte too many
			for what, evs := range map[string][]cwltypes.InputLogEvent{
				"no events":                  {},
				"10,001 events":              events(now, MaxLogEvents+1, "x"),
				"an empty message":           events(now, 1, ""),
				"a byte over the batch size": events(now, 2, strings.Repeat("é", over/2)+strings.Repeat("a", over%2)),
				"out of order":               append(events(now.Add(time.Second), 1, "later"), events(now, 1, "earlier")...),
				"spanning over 24 hours":     append(events(now.Add(-25*time.Hour), 1, "old"), events(now, 1, "new")...),
				"an event over 1 MB":         events(now, 1, strings.Repeat("a", MaxLogEventBytes+1)),
			} {
				_, err = put(evs)
				h.failsWith(what, err, http.StatusBadRequest, "InvalidParameterException")
			}
			if got := h.s.LogEvents(h.region, "g", "s"); len(got) != 0 {
				h.t.Errorf("refused batches left %d events", len(got))
			}
			// At the limits: taken whole, in order, counted in UTF-8 bytes with 26 per event.
			exact := MaxLogBatchBytes/2 - LogEventOverhead
			_, err = put(events(now, 2, strings.Repeat("é", exact/2)+strings.Repeat("a", exact%2)))
			h.ok("two events that fill the batch exactly", err)
			_, err = put(events(now, MaxLogEvents, "y"))
			h.ok("10,000 events", err)
			_, err = put(append(events(now.Add(-23*time.Hour), 1, "a day ago"), events(now, 1, "now")...))
			h.ok("a batch within 24 hours", err)
			// Too new, too old: rejected, the rest taken.
			out, err := put([]cwltypes.InputLogEvent{
				{Timestamp: aws.Int64(now.Add(-15 * 24 * time.Hour).UnixMilli()), Message: aws.String("too old")},
				{Timestamp: aws.Int64(now.UnixMilli()), Message: aws.String("kept")},
				{Timestamp: aws.Int64(now.Add(3 * time.Hour).UnixMilli()), Message: aws.String("too new")},
			})
			h.ok("a batch with events too old and too new", err)
			if err == nil && (out.RejectedLogEventsInfo == nil || aws.ToInt32(out.RejectedLogEventsInfo.TooOldLogEventEndIndex) != 0 ||
				aws.ToInt32(out.RejectedLogEventsInfo.TooNewLogEventStartIndex) != 2 || out.RejectedLogEventsInfo.ExpiredLogEventEndIndex != nil) {
				h.t.Errorf("rejected %+v, want too old up to 0 and too new from 2", out.RejectedLogEventsInfo)
			}
			got := readAll(h, c, "g", "s")
			if len(got) != 2+MaxLogEvents+2+1 || got[len(got)-1] != "kept" || got[len(got)-2] != "now" || got[len(got)-3] != "a day ago" {
				h.t.Errorf("read back %d events, ending %q", len(got), got[max(len(got)-3, 0):])
			}
			// Retention: an event older than the group keeps is expired.
			_, err = c.PutRetentionPolicy(h.ctx, &cloudwatchlogs.PutRetentionPolicyInput{LogGroupName: aws.String("g"), RetentionInDays: aws.Int32(1)})
			h.ok("retention", err)
			out, err = put(append(events(now.Add(-2*24*time.Hour), 1, "expired"), events(now, 1, "fresh")...))
			h.ok("a batch with an expired event", err)
			if err == nil && (out.RejectedLogEventsInfo == nil || aws.ToInt32(out.RejectedLogEventsInfo.ExpiredLogEventEndIndex) != 0) {
				h.t.Errorf("rejected %+v, want expired up to 0", out.RejectedLogEventsInfo)
			}
		}},
		"R68 what a CloudWatch Logs request needs": {opts: Options{CallerPolicies: []string{`{"Version": "2012-10-17", "Statement": [
			{"Effect": "Allow", "Action": ["logs:CreateLogGroup", "logs:DeleteLogGroup", "logs:PutRetentionPolicy", "logs:ListTagsForResource"], "Resource": "arn:aws:logs:*:*:log-group:/egress-proxy/*"},
			{"Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"], "Resource": "arn:aws:logs:*:*:log-group:/egress-proxy/p1:log-stream:p1"},
			{"Effect": "Allow", "Action": "logs:DescribeLogGroups", "Resource": "arn:aws:logs:*:*:log-group:*"}]}`}}, run: func(h *harness) {
			c := logsClient(h)
			admin := h.logsAs(h.s.AdminAWSConfig(h.region))
			_, err := c.CreateLogGroup(h.ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String("/egress-proxy/p1")})
			h.ok("a group the policy names", err)
			_, err = c.CreateLogGroup(h.ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String("/egress-proxy/p2"), Tags: map[string]string{"a": "b"}})
			h.fails("tags at creation without logs:TagResource", err, "AccessDeniedException", "is not authorized to perform: logs:TagResource on resource: arn:aws:logs:"+h.region+":"+h.s.AccountID()+":log-group:/egress-proxy/p2")
			_, err = c.CreateLogGroup(h.ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String("/other")})
			h.failsWith("a group the policy does not name", err, http.StatusBadRequest, "AccessDeniedException")
			_, err = c.DescribeLogGroups(h.ctx, &cloudwatchlogs.DescribeLogGroupsInput{})
			h.ok("describe", err)
			_, err = c.CreateLogStream(h.ctx, &cloudwatchlogs.CreateLogStreamInput{LogGroupName: aws.String("/egress-proxy/p1"), LogStreamName: aws.String("p1")})
			h.ok("its own stream", err)
			_, err = admin.CreateLogStream(h.ctx, &cloudwatchlogs.CreateLogStreamInput{LogGroupName: aws.String("/egress-proxy/p1"), LogStreamName: aws.String("p2")})
			h.ok("another stream, by the administrator", err)
			_, err = c.PutLogEvents(h.ctx, &cloudwatchlogs.PutLogEventsInput{LogGroupName: aws.String("/egress-proxy/p1"), LogStreamName: aws.String("p1"), LogEvents: events(h.s.Now(), 1, "x")})
			h.ok("events to its own stream", err)
			_, err = c.PutLogEvents(h.ctx, &cloudwatchlogs.PutLogEventsInput{LogGroupName: aws.String("/egress-proxy/p1"), LogStreamName: aws.String("p2"), LogEvents: events(h.s.Now(), 1, "x")})
			h.fails("events to another stream", err, "AccessDeniedException", "is not authorized to perform: logs:PutLogEvents on resource: arn:aws:logs:"+h.region+":"+h.s.AccountID()+":log-group:/egress-proxy/p1:log-stream:p2")
			_, err = c.GetLogEvents(h.ctx, &cloudwatchlogs.GetLogEventsInput{LogGroupName: aws.String("/egress-proxy/p1"), LogStreamName: aws.String("p1")})
			h.failsWith("reading back, not allowed", err, http.StatusBadRequest, "AccessDeniedException")
			_, err = c.DeleteLogGroup(h.ctx, &cloudwatchlogs.DeleteLogGroupInput{LogGroupName: aws.String("/egress-proxy/p1")})
			h.ok("delete", err)
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r.run(newHarness(t, r.opts))
		})
	}
}

// TestLogsUnknownAction: an action of CloudWatch Logs the fake does not serve is UnknownOperationException
// (R1).
func TestLogsUnknownAction(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	_, err := logsClient(h).DescribeLogStreams(h.ctx, &cloudwatchlogs.DescribeLogStreamsInput{LogGroupName: aws.String("g")})
	h.failsWith("DescribeLogStreams", err, http.StatusBadRequest, "UnknownOperationException")
}
