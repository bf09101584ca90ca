package ec2fake

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The CloudWatch Logs JSON 1.1 API ("Amazon CloudWatch Logs API Reference"): a POST of a JSON body with
// X-Amz-Target: Logs_20140328.<Action>, signed for the service logs, answered with JSON; errors are 400 (500
// for ServiceUnavailableException) with {"__type": code, "message": words}. The fake serves what the aws
// backend (a proxy's own log group) and its guest (the access log's lines) call, and GetLogEvents for tests
// to read the lines back as a client does (R63 to R67).

const logsTargetPrefix = "Logs_20140328."

type logsHandler func(s *Server, rg *region, c *call) (any, *apiError)

// logsActions are the actions the fake serves; any other target is UnknownOperationException.
var logsActions = map[string]logsHandler{
	"CreateLogGroup":      (*Server).createLogGroup,
	"PutRetentionPolicy":  (*Server).putRetentionPolicy,
	"DeleteLogGroup":      (*Server).deleteLogGroup,
	"DescribeLogGroups":   (*Server).describeLogGroups,
	"TagResource":         (*Server).tagLogResource,
	"ListTagsForResource": (*Server).listLogTags,
	"CreateLogStream":     (*Server).createLogStream,
	"PutLogEvents":        (*Server).putLogEvents,
	"GetLogEvents":        (*Server).getLogEvents,
}

// PutLogEvents' limits (CloudWatch Logs API Reference: PutLogEvents; "CloudWatch Logs quotas").
const (
	// MaxLogBatchBytes is a batch's most: the sum of its messages in UTF-8 and LogEventOverhead per event.
	MaxLogBatchBytes = 1048576
	// LogEventOverhead is what each event counts for beyond its message.
	LogEventOverhead = 26
	// MaxLogEvents is the most events one batch holds.
	MaxLogEvents = 10000
	// MaxLogEventBytes is the largest event ("Each log event can be no larger than 1 MB").
	MaxLogEventBytes = 1048576
	// MaxLogBatchSpan is the longest time one batch's events span.
	MaxLogBatchSpan = 24 * time.Hour
	// MaxLogEventFuture and MaxLogEventAge bound an event's timestamp; events beyond them are rejected
	// (rejectedLogEventsInfo) while the others are taken.
	MaxLogEventFuture = 2 * time.Hour
	MaxLogEventAge    = 14 * 24 * time.Hour
)

// RetentionDays are the values PutRetentionPolicy takes (CloudWatch Logs API Reference: PutRetentionPolicy,
// retentionInDays: "Possible values are: 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096,
// 1827, 2192, 2557, 2922, 3288, and 3653").
var RetentionDays = []int32{1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653}

var (
	// logGroupNameRE is CreateLogGroup's logGroupName: 1 to 512 of a-z, A-Z, 0-9, _ - / . #.
	logGroupNameRE = regexp.MustCompile(`^[.\-_/#A-Za-z0-9]{1,512}$`)
	// logStreamNameRE is CreateLogStream's logStreamName: 1 to 512, no ':' and no '*'.
	logStreamNameRE = regexp.MustCompile(`^[^:*]{1,512}$`)
	// logTagKeyRE and logTagValueRE are TagResource's (and CreateLogGroup's) tag patterns.
	logTagKeyRE   = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]{1,128}$`)
	logTagValueRE = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]{0,256}$`)
)

// MaxLogGroupTags is the most tags a log group holds (TagResource, tags: "Maximum number of 50 items").
const MaxLogGroupTags = 50

// LogEvent is one event of a stream as the fake holds it.
type LogEvent struct {
	Timestamp, IngestionTime int64 // milliseconds since the epoch
	Message                  string
}

type logGroup struct {
	name      string
	created   time.Time
	retention int32 // 0: never expire
	tags      map[string]string
	streams   map[string]*logStream
}

type logStream struct {
	name    string
	created time.Time
	events  []LogEvent
}

func logsErr(code, format string, args ...any) *apiError {
	status := http.StatusBadRequest
	switch code {
	case "ServiceUnavailableException":
		status = http.StatusInternalServerError
	case "NotImplemented":
		status = http.StatusNotImplemented
	}
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func (s *Server) logGroupARN(rg *region, name string) string {
	return "arn:aws:logs:" + rg.name + ":" + s.opts.AccountID + ":log-group:" + name
}

func (s *Server) logStreamARN(rg *region, group, stream string) string {
	return s.logGroupARN(rg, group) + ":log-stream:" + stream
}

// checkLogGroupName applies CreateLogGroup's naming rules (R63).
func checkLogGroupName(name *string) *apiError {
	if name == nil || !logGroupNameRE.MatchString(*name) {
		return logsErr("InvalidParameterException", "1 validation error detected: Value '%s' at 'logGroupName' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\.\\-_/#A-Za-z0-9]+ and have length between 1 and 512", deref(name))
	}
	return nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// group finds a log group by name: ResourceNotFoundException when there is none.
func (rg *region) logGroup(name *string) (*logGroup, *apiError) {
	if e := checkLogGroupName(name); e != nil {
		return nil, e
	}
	g := rg.logGroups[*name]
	if g == nil {
		return nil, logsErr("ResourceNotFoundException", "The specified log group does not exist.")
	}
	return g, nil
}

// checkLogTags applies the tag rules of CreateLogGroup and TagResource (R63): at most 50 with what the group
// holds, keys and values of their patterns, no key beginning aws:.
func checkLogTags(have, add map[string]string) *apiError {
	n := len(have)
	for k, v := range add {
		if !logTagKeyRE.MatchString(k) || !logTagValueRE.MatchString(v) {
			return logsErr("InvalidParameterException", "1 validation error detected: Value '%s' at 'tags' failed to satisfy constraint: Map keys must satisfy constraint: [Member must have length between 1 and 128, Member must satisfy regular expression pattern: ^([\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]+)$]", k)
		}
		if strings.HasPrefix(strings.ToLower(k), "aws:") {
			return logsErr("InvalidParameterException", "Tag keys cannot start with the prefix 'aws:'.")
		}
		if _, ok := have[k]; !ok {
			n++
		}
	}
	if n > MaxLogGroupTags {
		return logsErr("InvalidParameterException", "A log group can have at most %d tags.", MaxLogGroupTags)
	}
	return nil
}

// createLogGroup makes a log group (R63): a name of its rules, not beginning aws/, unique in the region
// (ResourceAlreadyExistsException), the standard class; a KMS key, another class or deletion protection are
// not modelled.
func (s *Server) createLogGroup(rg *region, c *call) (any, *apiError) {
	var in struct {
		LogGroupName              *string           `json:"logGroupName"`
		Tags                      map[string]string `json:"tags"`
		KmsKeyID                  *string           `json:"kmsKeyId"`
		LogGroupClass             *string           `json:"logGroupClass"`
		DeletionProtectionEnabled *bool             `json:"deletionProtectionEnabled"`
	}
	if e := decode(c.body, &in); e != nil {
		return nil, e
	}
	if in.KmsKeyID != nil || (in.LogGroupClass != nil && *in.LogGroupClass != "STANDARD") || (in.DeletionProtectionEnabled != nil && *in.DeletionProtectionEnabled) {
		return nil, logsErr("NotImplemented", "ec2fake does not model log groups with a KMS key, another class than STANDARD or deletion protection")
	}
	if e := checkLogGroupName(in.LogGroupName); e != nil {
		return nil, e
	}
	if strings.HasPrefix(*in.LogGroupName, "aws/") {
		return nil, logsErr("InvalidParameterException", "Log group names can't start with the string aws/")
	}
	if e := checkLogTags(nil, in.Tags); e != nil {
		return nil, e
	}
	if rg.logGroups[*in.LogGroupName] != nil {
		return nil, logsErr("ResourceAlreadyExistsException", "The specified log group already exists")
	}
	tags := map[string]string{}
	for k, v := range in.Tags {
		tags[k] = v
	}
	rg.logGroups[*in.LogGroupName] = &logGroup{name: *in.LogGroupName, created: s.now(), tags: tags, streams: map[string]*logStream{}}
	return struct{}{}, nil
}

// putRetentionPolicy sets a group's retention to one of RetentionDays (R64).
func (s *Server) putRetentionPolicy(rg *region, c *call) (any, *apiError) {
	var in struct {
		LogGroupName    *string `json:"logGroupName"`
		RetentionInDays *int32  `json:"retentionInDays"`
	}
	if e := decode(c.body, &in); e != nil {
		return nil, e
	}
	if in.RetentionInDays == nil || !slices.Contains(RetentionDays, *in.RetentionInDays) {
		v := "null"
		if in.RetentionInDays != nil {
			v = strconv.Itoa(int(*in.RetentionInDays))
		}
		return nil, logsErr("InvalidParameterException", "1 validation error detected: Value '%s' at 'retentionInDays' failed to satisfy constraint: Member must satisfy enum value set: %v", v, RetentionDays)
	}
	g, e := rg.logGroup(in.LogGroupName)
	if e != nil {
		return nil, e
	}
	g.retention = *in.RetentionInDays
	return struct{}{}, nil
}

// deleteLogGroup deletes a group with its streams and events (R63).
func (s *Server) deleteLogGroup(rg *region, c *call) (any, *apiError) {
	var in struct {
		LogGroupName *string `json:"logGroupName"`
	}
	if e := decode(c.body, &in); e != nil {
		return nil, e
	}
	if _, e := rg.logGroup(in.LogGroupName); e != nil {
		return nil, e
	}
	delete(rg.logGroups, *in.LogGroupName)
	return struct{}{}, nil
}

// logGroupOut is the LogGroup shape DescribeLogGroups answers: arn ends with ":*", logGroupArn does not.
type logGroupOut struct {
	LogGroupName      string `json:"logGroupName"`
	CreationTime      int64  `json:"creationTime"`
	RetentionInDays   *int32 `json:"retentionInDays,omitempty"`
	MetricFilterCount int32  `json:"metricFilterCount"`
	Arn               string `json:"arn"`
	LogGroupArn       string `json:"logGroupArn"`
	StoredBytes       int64  `json:"storedBytes"`
	LogGroupClass     string `json:"logGroupClass"`
}

// describeLogGroups lists the region's groups in name order, those beginning with logGroupNamePrefix when
// given, limit (1 to 50, default 50) a page, nextToken the name the next page starts from (R65).
func (s *Server) describeLogGroups(rg *region, c *call) (any, *apiError) {
	var in struct {
		LogGroupNamePrefix    *string  `json:"logGroupNamePrefix"`
		Limit                 *int32   `json:"limit"`
		NextToken             *string  `json:"nextToken"`
		LogGroupNamePattern   *string  `json:"logGroupNamePattern"`
		AccountIdentifiers    []string `json:"accountIdentifiers"`
		IncludeLinkedAccounts *bool    `json:"includeLinkedAccounts"`
		LogGroupClass         *string  `json:"logGroupClass"`
		LogGroupIdentifiers   []string `json:"logGroupIdentifiers"`
	}
	if e := decode(c.body, &in); e != nil {
		return nil, e
	}
	if in.LogGroupNamePattern != nil && in.LogGroupNamePrefix != nil {
		return nil, logsErr("InvalidParameterException", "LogGroup name prefix and LogGroup name pattern are mutually exclusive parameters.")
	}
	if in.LogGroupNamePattern != nil || in.AccountIdentifiers != nil || in.IncludeLinkedAccounts != nil || in.LogGroupClass != nil || in.LogGroupIdentifiers != nil {
		return nil, logsErr("NotImplemented", "ec2fake models DescribeLogGroups by name prefix only")
	}
	if in.LogGroupNamePrefix != nil && !logGroupNameRE.MatchString(*in.LogGroupNamePrefix) {
		return nil, logsErr("InvalidParameterException", "1 validation error detected: Value '%s' at 'logGroupNamePrefix' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\.\\-_/#A-Za-z0-9]+", *in.LogGroupNamePrefix)
	}
	limit := int32(50)
	if in.Limit != nil {
		if *in.Limit < 1 || *in.Limit > 50 {
			return nil, logsErr("InvalidParameterException", "1 validation error detected: Value '%d' at 'limit' failed to satisfy constraint: Member must have value between 1 and 50", *in.Limit)
		}
		limit = *in.Limit
	}
	var names []string
	for n := range rg.logGroups {
		if (in.LogGroupNamePrefix == nil || strings.HasPrefix(n, *in.LogGroupNamePrefix)) && (in.NextToken == nil || n >= *in.NextToken) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := struct {
		LogGroups []logGroupOut `json:"logGroups"`
		NextToken *string       `json:"nextToken,omitempty"`
	}{LogGroups: []logGroupOut{}}
	for i, n := range names {
		if int32(i) == limit {
			out.NextToken = &names[i]
			break
		}
		g := rg.logGroups[n]
		o := logGroupOut{LogGroupName: n, CreationTime: g.created.UnixMilli(), Arn: s.logGroupARN(rg, n) + ":*",
			LogGroupArn: s.logGroupARN(rg, n), LogGroupClass: "STANDARD"}
		if g.retention != 0 {
			r := g.retention
			o.RetentionInDays = &r
		}
		for _, st := range g.streams {
			for _, ev := range st.events {
				o.StoredBytes += int64(len(ev.Message))
			}
		}
		out.LogGroups = append(out.LogGroups, o)
	}
	return out, nil
}

// logGroupByARN finds the group a resourceArn names (R66): a log group's ARN, without ":*".
func (s *Server) logGroupByARN(rg *region, arn *string) (*logGroup, *apiError) {
	prefix := s.logGroupARN(rg, "")
	if arn == nil || !strings.HasPrefix(*arn, prefix) {
		return nil, logsErr("InvalidParameterException", "Invalid resourceArn: %s", deref(arn))
	}
	name := strings.TrimPrefix(*arn, prefix)
	if !logGroupNameRE.MatchString(name) {
		return nil, logsErr("InvalidParameterException", "Invalid resourceArn: %s", *arn)
	}
	g := rg.logGroups[name]
	if g == nil {
		return nil, logsErr("ResourceNotFoundException", "The specified resource does not exist.")
	}
	return g, nil
}

// tagLogResource adds or overwrites a group's tags (R66).
func (s *Server) tagLogResource(rg *region, c *call) (any, *apiError) {
	var in struct {
		ResourceArn *string           `json:"resourceArn"`
		Tags        map[string]string `json:"tags"`
	}
	if e := decode(c.body, &in); e != nil {
		return nil, e
	}
	g, e := s.logGroupByARN(rg, in.ResourceArn)
	if e != nil {
		return nil, e
	}
	if len(in.Tags) == 0 {
		return nil, logsErr("InvalidParameterException", "1 validation error detected: Value null at 'tags' failed to satisfy constraint: Member must not be null")
	}
	if e := checkLogTags(g.tags, in.Tags); e != nil {
		return nil, e
	}
	for k, v := range in.Tags {
		g.tags[k] = v
	}
	return struct{}{}, nil
}

// listLogTags answers a group's tags (R66).
func (s *Server) listLogTags(rg *region, c *call) (any, *apiError) {
	var in struct {
		ResourceArn *string `json:"resourceArn"`
	}
	if e := decode(c.body, &in); e != nil {
		return nil, e
	}
	g, e := s.logGroupByARN(rg, in.ResourceArn)
	if e != nil {
		return nil, e
	}
	tags := map[string]string{}
	for k, v := range g.tags {
		tags[k] = v
	}
	return map[string]any{"tags": tags}, nil
}

// createLogStream makes a stream in a group (R67): a name of 1 to 512 characters without ':' or '*', unique
// in its group.
func (s *Server) createLogStream(rg *region, c *call) (any, *apiError) {
	var in struct {
		LogGroupName  *string `json:"logGroupName"`
		LogStreamName *string `json:"logStreamName"`
	}
	if e := decode(c.body, &in); e != nil {
		return nil, e
	}
	if in.LogStreamName == nil || !logStreamNameRE.MatchString(*in.LogStreamName) {
		return nil, logsErr("InvalidParameterException", "1 validation error detected: Value '%s' at 'logStreamName' failed to satisfy constraint: Member must satisfy regular expression pattern: [^:*]* and have length between 1 and 512", deref(in.LogStreamName))
	}
	g, e := rg.logGroup(in.LogGroupName)
	if e != nil {
		return nil, e
	}
	if g.streams[*in.LogStreamName] != nil {
		return nil, logsErr("ResourceAlreadyExistsException", "The specified log stream already exists")
	}
	g.streams[*in.LogStreamName] = &logStream{name: *in.LogStreamName, created: s.now()}
	return struct{}{}, nil
}

// logStream finds a group's stream: ResourceNotFoundException for either missing.
func (rg *region) logStream(group, stream *string) (*logGroup, *logStream, *apiError) {
	g, e := rg.logGroup(group)
	if e != nil {
		return nil, nil, e
	}
	if stream == nil || !logStreamNameRE.MatchString(*stream) {
		return nil, nil, logsErr("InvalidParameterException", "1 validation error detected: Value '%s' at 'logStreamName' failed to satisfy constraint: Member must satisfy regular expression pattern: [^:*]*", deref(stream))
	}
	st := g.streams[*stream]
	if st == nil {
		return nil, nil, logsErr("ResourceNotFoundException", "The specified log stream does not exist.")
	}
	return g, st, nil
}

// putLogEvents takes a batch of events into a stream (R67): 1 to MaxLogEvents events, each a message of at
// least one character and at most MaxLogEventBytes, MaxLogBatchBytes in all counting LogEventOverhead per
// event, in chronological order, the valid ones spanning at most MaxLogBatchSpan, else
// InvalidParameterException and nothing taken. Events more than MaxLogEventFuture ahead of the fake's clock,
// older than MaxLogEventAge or than the group's retention are rejected (rejectedLogEventsInfo: the index of
// the first too new, of the last too old and of the last expired) and the others taken. The sequence token is
// ignored, as the service now does.
func (s *Server) putLogEvents(rg *region, c *call) (any, *apiError) {
	var in struct {
		LogGroupName  *string `json:"logGroupName"`
		LogStreamName *string `json:"logStreamName"`
		LogEvents     []struct {
			Timestamp *int64  `json:"timestamp"`
			Message   *string `json:"message"`
		} `json:"logEvents"`
		SequenceToken *string        `json:"sequenceToken"`
		Entity        map[string]any `json:"entity"`
	}
	if e := decode(c.body, &in); e != nil {
		return nil, e
	}
	if in.Entity != nil {
		return nil, logsErr("NotImplemented", "ec2fake does not model PutLogEvents' entity")
	}
	if n := len(in.LogEvents); n < 1 || n > MaxLogEvents {
		return nil, logsErr("InvalidParameterException", "1 validation error detected: Value at 'logEvents' failed to satisfy constraint: Member must have length between 1 and %d", MaxLogEvents)
	}
	size := 0
	for i, ev := range in.LogEvents {
		if ev.Timestamp == nil || ev.Message == nil || *ev.Message == "" {
			return nil, logsErr("InvalidParameterException", "1 validation error detected: Value at 'logEvents.%d.member' failed to satisfy constraint: timestamp and message are required, message of length at least 1", i+1)
		}
		if !utf8.ValidString(*ev.Message) {
			return nil, logsErr("InvalidParameterException", "Log event %d is not valid UTF-8", i)
		}
		if len(*ev.Message) > MaxLogEventBytes {
			return nil, logsErr("InvalidParameterException", "Log event too large: %d bytes exceeds limit of %d", len(*ev.Message), MaxLogEventBytes)
		}
		if i > 0 && *ev.Timestamp < *in.LogEvents[i-1].Timestamp {
			return nil, logsErr("InvalidParameterException", "Log events in a single PutLogEvents request must be in chronological order.")
		}
		size += len(*ev.Message) + LogEventOverhead
	}
	if size > MaxLogBatchBytes {
		return nil, logsErr("InvalidParameterException", "Upload too large: %d bytes exceeds limit of %d", size, MaxLogBatchBytes)
	}
	g, st, e := rg.logStream(in.LogGroupName, in.LogStreamName)
	if e != nil {
		return nil, e
	}
	now := s.now()
	newest, oldest := now.Add(MaxLogEventFuture).UnixMilli(), now.Add(-MaxLogEventAge).UnixMilli()
	expired := int64(-1) << 62
	if g.retention != 0 {
		expired = now.Add(-time.Duration(g.retention) * 24 * time.Hour).UnixMilli()
	}
	var info struct {
		TooNew  *int32 `json:"tooNewLogEventStartIndex,omitempty"`
		TooOld  *int32 `json:"tooOldLogEventEndIndex,omitempty"`
		Expired *int32 `json:"expiredLogEventEndIndex,omitempty"`
	}
	var valid []LogEvent
	for i, ev := range in.LogEvents {
		idx := int32(i)
		switch ts := *ev.Timestamp; {
		case ts > newest:
			if info.TooNew == nil {
				info.TooNew = &idx
			}
		case ts < expired:
			info.Expired = &idx
		case ts < oldest:
			info.TooOld = &idx
		default:
			valid = append(valid, LogEvent{Timestamp: ts, IngestionTime: now.UnixMilli(), Message: *ev.Message})
		}
	}
	if len(valid) > 1 && time.Duration(valid[len(valid)-1].Timestamp-valid[0].Timestamp)*time.Millisecond > MaxLogBatchSpan {
		return nil, logsErr("InvalidParameterException", "The batch of log events in a single PutLogEvents request cannot span more than 24 hours.")
	}
	st.events = append(st.events, valid...)
	out := map[string]any{}
	if info.TooNew != nil || info.TooOld != nil || info.Expired != nil {
		out["rejectedLogEventsInfo"] = info
	}
	return out, nil
}

// getLogEvents reads a stream's events (R67), for tests to read back what a guest sent: from the oldest with
// startFromHead, else the newest limit (1 to 10,000, default 10,000); the forward token f/<index> reads on
// from where a page ended, and answers itself again at the end of the stream, as the service does. Time
// bounds are not modelled.
func (s *Server) getLogEvents(rg *region, c *call) (any, *apiError) {
	var in struct {
		LogGroupName       *string `json:"logGroupName"`
		LogGroupIdentifier *string `json:"logGroupIdentifier"`
		LogStreamName      *string `json:"logStreamName"`
		StartFromHead      *bool   `json:"startFromHead"`
		Limit              *int32  `json:"limit"`
		NextToken          *string `json:"nextToken"`
		StartTime          *int64  `json:"startTime"`
		EndTime            *int64  `json:"endTime"`
		Unmask             *bool   `json:"unmask"`
	}
	if e := decode(c.body, &in); e != nil {
		return nil, e
	}
	if in.LogGroupIdentifier != nil || in.StartTime != nil || in.EndTime != nil || (in.Unmask != nil && *in.Unmask) {
		return nil, logsErr("NotImplemented", "ec2fake models GetLogEvents by group name, without time bounds or unmasking")
	}
	_, st, e := rg.logStream(in.LogGroupName, in.LogStreamName)
	if e != nil {
		return nil, e
	}
	limit := MaxLogEvents
	if in.Limit != nil {
		if *in.Limit < 1 || *in.Limit > MaxLogEvents {
			return nil, logsErr("InvalidParameterException", "1 validation error detected: Value '%d' at 'limit' failed to satisfy constraint: Member must have value between 1 and %d", *in.Limit, MaxLogEvents)
		}
		limit = int(*in.Limit)
	}
	from := max(len(st.events)-limit, 0)
	if in.StartFromHead != nil && *in.StartFromHead {
		from = 0
	}
	if in.NextToken != nil {
		n, err := strconv.Atoi(strings.TrimPrefix(*in.NextToken, "f/"))
		if err != nil || !strings.HasPrefix(*in.NextToken, "f/") || n < 0 || n > len(st.events) {
			return nil, logsErr("InvalidParameterException", "The specified nextToken is invalid.")
		}
		from = n
	}
	to := min(from+limit, len(st.events))
	type eventOut struct {
		Timestamp     int64  `json:"timestamp"`
		Message       string `json:"message"`
		IngestionTime int64  `json:"ingestionTime"`
	}
	events := make([]eventOut, 0, to-from)
	for _, ev := range st.events[from:to] {
		events = append(events, eventOut{ev.Timestamp, ev.Message, ev.IngestionTime})
	}
	return map[string]any{"events": events, "nextForwardToken": fmt.Sprintf("f/%d", to), "nextBackwardToken": fmt.Sprintf("b/%d", from)}, nil
}

// checkLogsAction refuses an action CloudWatch Logs has not, or that the caller's policies do not allow (R51,
// R68). The caller holds s.mu.
func (s *Server) checkLogsAction(c *call) *apiError {
	if _, ok := logsActions[c.action]; !ok {
		return logsErr("UnknownOperationException", "")
	}
	return s.authorizeCall(c)
}

// LogEvents are the events of a stream, oldest first, for tests that look behind a guest's back; nil when
// the group or stream does not exist.
func (s *Server) LogEvents(region, group, stream string) []LogEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.regions[region]
	if rg == nil || rg.logGroups[group] == nil || rg.logGroups[group].streams[stream] == nil {
		return nil
	}
	return slices.Clone(rg.logGroups[group].streams[stream].events)
}

// LogGroupNames are the region's log groups, sorted.
func (s *Server) LogGroupNames(region string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	rg := s.regions[region]
	if rg == nil {
		return nil
	}
	var names []string
	for n := range rg.logGroups {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
