package loggingfake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The documented limits (README.md, each with its rule).
const (
	// maxRequestBytes is the largest entries.write body (L6).
	maxRequestBytes = 10485760
	// maxEntryBytes is the largest entry (L5), measured on its JSON form.
	maxEntryBytes = 256 * 1024
	// maxFuture is how far ahead of the server's clock a timestamp may be (L7).
	maxFuture = 24 * time.Hour
	// retention is the default bucket's retention: older entries are accepted but not stored (L7).
	retention = 30 * 24 * time.Hour
	// maxLabels is the most labels an entry may carry; longer keys and values are truncated (L8).
	maxLabels, maxLabelKey, maxLabelValue = 64, 512, 64 * 1024
	// writesPerMinute is the project's write request quota (L10).
	writesPerMinute = 120000
	// maxResourceNames is the most projects one write may send entries to (L13).
	maxResourceNames = 1000
)

// The fields of the documented JSON representations (L1). Fields the fake does not model are listed apart:
// a request using them is refused as unimplemented rather than accepted unchecked.
var (
	requestFields       = []string{"logName", "resource", "labels", "entries", "partialSuccess", "dryRun"}
	entryFields         = []string{"logName", "resource", "textPayload", "jsonPayload", "timestamp", "receiveTimestamp", "severity", "insertId", "labels", "trace", "spanId", "traceSampled"}
	entryFieldsUnserved = []string{"protoPayload", "httpRequest", "operation", "sourceLocation", "split", "errorGroups", "apphub", "apphubDestination", "apphubSource", "otel"}
	resourceFields      = []string{"type", "labels"}
)

// resourceTypes are the monitored resource types the fake knows, with their labels ("Monitored resource
// types": gce_instance, global).
var resourceTypes = map[string][]string{
	"gce_instance": {"project_id", "instance_id", "zone"},
	"global":       {"project_id"},
}

// severities are LogSeverity's names and numbers.
var severities = map[string]int{"DEFAULT": 0, "DEBUG": 100, "INFO": 200, "NOTICE": 300, "WARNING": 400, "ERROR": 500,
	"CRITICAL": 600, "ALERT": 700, "EMERGENCY": 800}

// logNameRE: projects/[PROJECT_ID]/logs/[LOG_ID], LOG_ID URL-encoded (L2). A project ID is 6 to 30
// characters of lowercase letters, digits and hyphens ("Creating and managing projects"); the fake also
// takes the test's shorter ones.
var logNameRE = regexp.MustCompile(`^projects/([a-z][a-z0-9-]{0,29})/logs/([^/]+)$`)

// logIDRE is what a LOG_ID may hold once decoded (L2).
var logIDRE = regexp.MustCompile(`^[A-Za-z0-9/_.-]+$`)

// parseLogName checks a log name (L2) and returns its project and decoded LOG_ID.
func parseLogName(name string) (project, logID string, e *apiError) {
	// For backward compatibility a leading slash is removed.
	name = strings.TrimPrefix(name, "/")
	for _, other := range []string{"organizations/", "billingAccounts/", "folders/"} {
		if strings.HasPrefix(name, other) {
			return "", "", newAPIError(http.StatusNotImplemented, "UNIMPLEMENTED", "the fake serves only projects' logs, not "+name)
		}
	}
	m := logNameRE.FindStringSubmatch(name)
	if m == nil {
		return "", "", invalid("Invalid log name %q: a log name is projects/[PROJECT_ID]/logs/[LOG_ID], with [LOG_ID] URL-encoded.", name)
	}
	id, err := url.PathUnescape(m[2])
	if err != nil || !logIDRE.MatchString(id) || len(id) >= 512 {
		return "", "", invalid("Invalid log name %q: [LOG_ID] must be less than 512 characters of letters, digits, '/', '_', '-' and '.', URL-encoded.", name)
	}
	return m[1], id, nil
}

// strictObject decodes an object's members, refusing names not in known (L1) and those in unserved (the
// fake's own 501). at names the object in messages, as the API does ("entries[0]").
func strictObject(raw json.RawMessage, at string, known, unserved []string) (map[string]json.RawMessage, *apiError) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, invalid("Invalid JSON payload received. Expected an object at '%s'.", at)
	}
	for k := range m {
		switch {
		case slices.Contains(unserved, k):
			return nil, newAPIError(http.StatusNotImplemented, "UNIMPLEMENTED", fmt.Sprintf("the fake does not model %s.%s", at, k))
		case !slices.Contains(known, k):
			e := invalid("Invalid JSON payload received. Unknown name %q at '%s': Cannot find field.", k, at)
			e.details = []map[string]any{{"@type": "type.googleapis.com/google.rpc.BadRequest",
				"fieldViolations": []map[string]string{{"field": at, "description": fmt.Sprintf("Invalid JSON payload received. Unknown name %q at '%s': Cannot find field.", k, at)}}}}
			return nil, e
		}
	}
	return m, nil
}

// field decodes one member into v, refusing a value of the wrong JSON type (L1).
func field(m map[string]json.RawMessage, name, at string, v any) *apiError {
	raw, ok := m[name]
	if !ok || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return invalid("Invalid value at '%s.%s': %v", at, name, err)
	}
	return nil
}

func decodeResource(raw json.RawMessage, at string) (*MonitoredResource, *apiError) {
	m, e := strictObject(raw, at, resourceFields, nil)
	if e != nil {
		return nil, e
	}
	r := &MonitoredResource{}
	if e := field(m, "type", at, &r.Type); e != nil {
		return nil, e
	}
	if e := field(m, "labels", at, &r.Labels); e != nil {
		return nil, e
	}
	return r, nil
}

// write is entries.write. It answers how many entries the request carried.
func (s *Server) write(r *http.Request, member string) (int, *apiError) {
	// L6: the body's size, read up to one byte past the limit.
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes+1))
	if err != nil {
		return 0, invalid("reading the body: %v", err)
	}
	if len(body) > maxRequestBytes {
		return 0, invalid("Request payload size exceeds the limit: %d bytes.", maxRequestBytes)
	}
	// Strings are UTF-8 (the JSON mapping of proto3); encoding/json would replace bad bytes silently.
	if !utf8.Valid(body) {
		return 0, invalid("Invalid JSON payload received. Invalid UTF-8 in the body.")
	}
	top, e := strictObject(body, "", requestFields, nil)
	if e != nil {
		return 0, e
	}
	var (
		defName        string
		defLabels      map[string]string
		rawEntries     []json.RawMessage
		partial, dryRn bool
	)
	for name, v := range map[string]any{"logName": &defName, "labels": &defLabels, "entries": &rawEntries, "partialSuccess": &partial, "dryRun": &dryRn} {
		if e := field(top, name, "", v); e != nil {
			return 0, e
		}
	}
	var defResource *MonitoredResource
	if raw, ok := top["resource"]; ok {
		if defResource, e = decodeResource(raw, "resource"); e != nil {
			return 0, e
		}
	}
	// L15: entries are required.
	if len(rawEntries) == 0 {
		return 0, invalid("entries: at least one log entry is required.")
	}
	if defName != "" {
		if _, _, e := parseLogName(defName); e != nil {
			return len(rawEntries), e
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var (
		ok       []Entry
		failures = map[string]map[string]any{}
		first    *apiError
		projects = map[string]bool{}
	)
	fail := func(i int, e *apiError) {
		if first == nil {
			first = e
		}
		failures[strconv.Itoa(i)] = map[string]any{"code": grpcCode(e.status), "message": e.message}
	}
	for i, raw := range rawEntries {
		at := fmt.Sprintf("entries[%d]", i)
		en, project, e := s.decodeEntry(raw, at, defName, defResource, defLabels, now)
		if e != nil && e.code == http.StatusNotImplemented {
			return len(rawEntries), e
		}
		if e == nil {
			projects[project] = true
			// L9: the permission on each project receiving entries.
			if !s.may(member, project, "logging.logEntries.create") {
				e = denied("logging.logEntries.create", "projects/"+project)
			}
		}
		if e != nil {
			fail(i, e)
			continue
		}
		ok = append(ok, en)
	}
	// L13.
	if len(projects) > maxResourceNames {
		return len(rawEntries), invalid("A request may write to at most %d projects, organizations, billing accounts or folders; this one writes to %d.", maxResourceNames, len(projects))
	}
	// L10: the quota counts every write request of each project it names, in the last minute.
	for p := range projects {
		recent := s.writes[p][:0]
		for _, t := range s.writes[p] {
			if now.Sub(t) < time.Minute {
				recent = append(recent, t)
			}
		}
		s.writes[p] = append(recent, now)
		if len(s.writes[p]) > writesPerMinute || s.throttle > 0 {
			if s.throttle > 0 {
				s.throttle--
			}
			return len(rawEntries), newAPIError(http.StatusTooManyRequests, "RESOURCE_EXHAUSTED",
				fmt.Sprintf("Quota exceeded for quota metric 'Write requests' and limit 'Write requests per minute' of service 'logging.googleapis.com' for consumer 'project_number:%s'.", projectNumber(p)),
				map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com",
					"metadata": map[string]string{"service": "logging.googleapis.com", "quota_metric": "logging.googleapis.com/write_requests", "quota_limit": "WriteRequestsPerMinutePerProject"}})
		}
	}
	// L12: without partialSuccess one failed entry fails them all; with it the valid ones are written.
	if first != nil && !partial {
		ok = nil
	}
	if !dryRn {
		for i := range ok {
			s.seq++
			if ok[i].InsertID == "" {
				ok[i].InsertID = fmt.Sprintf("%016x%04d", now.UnixNano(), s.seq%10000)
			}
			p, _, _ := parseLogName(ok[i].LogName)
			s.entries[p] = append(s.entries[p], ok[i])
		}
	}
	if first != nil {
		out := newAPIError(first.code, first.status, first.message)
		// Failed requests for which no entry is written carry no per-entry errors when partialSuccess is
		// asked for; otherwise the failed entries' errors, keyed by index.
		if !partial || len(ok) > 0 {
			out.details = []map[string]any{{"@type": "type.googleapis.com/google.logging.v2.WriteLogEntriesPartialErrors", "logEntryErrors": failures}}
		}
		out.details = append(out.details, first.details...)
		return len(rawEntries), out
	}
	return len(rawEntries), nil
}

// decodeEntry checks one entry against L1-L5, L7 and L8, fills in what the request's defaults give, and
// returns it with the project it goes to. The caller holds s.mu.
func (s *Server) decodeEntry(raw json.RawMessage, at, defName string, defResource *MonitoredResource, defLabels map[string]string, now time.Time) (Entry, string, *apiError) {
	var en Entry
	m, e := strictObject(raw, at, entryFields, entryFieldsUnserved)
	if e != nil {
		return en, "", e
	}
	var sev json.RawMessage
	var ts string
	for name, v := range map[string]any{"logName": &en.LogName, "textPayload": &en.TextPayload, "jsonPayload": &en.JSONPayload,
		"timestamp": &ts, "severity": &sev, "insertId": &en.InsertID, "labels": &en.Labels, "trace": &en.Trace,
		"spanId": &en.SpanID, "traceSampled": &en.TraceSampled} {
		if e := field(m, name, at, v); e != nil {
			return en, "", e
		}
	}
	// L2.
	if en.LogName == "" {
		en.LogName = defName
	}
	if en.LogName == "" {
		return en, "", invalid("%s: the log entry has no logName, and the request gives none.", at)
	}
	project, logID, e := parseLogName(en.LogName)
	if e != nil {
		return en, "", e
	}
	en.LogName = logName(project, logID)
	// L3: a resource, from the entry or the request, of a known type with its labels and no others.
	var res *MonitoredResource
	if rr, has := m["resource"]; has {
		if res, e = decodeResource(rr, at+".resource"); e != nil {
			return en, "", e
		}
	} else {
		res = defResource
	}
	if res == nil || res.Type == "" {
		return en, "", invalid("%s: the log entry has no monitored resource, and the request gives none.", at)
	}
	want, known := resourceTypes[res.Type]
	if !known {
		return en, "", invalid("%s: unknown monitored resource type %q.", at, res.Type)
	}
	for k := range res.Labels {
		if !slices.Contains(want, k) {
			return en, "", invalid("%s: monitored resource type %q has no label %q.", at, res.Type, k)
		}
	}
	for _, k := range want {
		if res.Labels[k] == "" {
			return en, "", invalid("%s: monitored resource type %q requires the label %q.", at, res.Type, k)
		}
	}
	en.Resource = MonitoredResource{Type: res.Type, Labels: res.Labels}
	// L4: one payload at most; jsonPayload is an object (google.protobuf.Struct).
	if en.TextPayload != nil && en.JSONPayload != nil {
		return en, "", invalid("%s: more than one payload: textPayload and jsonPayload are one of a kind (payload).", at)
	}
	if en.JSONPayload != nil {
		var obj map[string]any
		if err := json.Unmarshal(en.JSONPayload, &obj); err != nil || obj == nil {
			return en, "", invalid("Invalid value at '%s.jsonPayload' (type.googleapis.com/google.protobuf.Struct): not a JSON object.", at)
		}
		var c bytes.Buffer
		_ = json.Compact(&c, en.JSONPayload)
		en.JSONPayload = c.Bytes()
	}
	// Severity: a LogSeverity name or number.
	if sev != nil {
		var name string
		var num int
		switch {
		case json.Unmarshal(sev, &name) == nil:
			if _, ok := severities[name]; !ok {
				return en, "", invalid("Invalid value at '%s.severity' (type.googleapis.com/google.logging.type.LogSeverity), %q", at, name)
			}
			en.Severity = name
		case json.Unmarshal(sev, &num) == nil:
			for n, v := range severities {
				if v == num {
					en.Severity = n
				}
			}
			if en.Severity == "" {
				return en, "", invalid("Invalid value at '%s.severity' (type.googleapis.com/google.logging.type.LogSeverity), %d", at, num)
			}
		default:
			return en, "", invalid("Invalid value at '%s.severity'.", at)
		}
	}
	// L7: RFC 3339; not more than a day ahead; missing is now.
	t := now
	if ts != "" {
		var err error
		if t, err = time.Parse(time.RFC3339Nano, ts); err != nil {
			return en, "", invalid("Invalid value at '%s.timestamp' (type.googleapis.com/google.protobuf.Timestamp), Field 'timestamp', Invalid time format: %q", at, ts)
		}
		if t.Sub(now) > maxFuture {
			return en, "", invalid("%s: the log entry's timestamp %s is more than 1 day in the future.", at, ts)
		}
	}
	en.Timestamp = t.UTC().Format(time.RFC3339Nano)
	en.ReceiveTimestamp = now.UTC().Format(time.RFC3339Nano)
	// L8: the request's labels join the entry's, which win; at most 64; over-long keys and values truncated.
	for k, v := range defLabels {
		if en.Labels == nil {
			en.Labels = map[string]string{}
		}
		if _, has := en.Labels[k]; !has {
			en.Labels[k] = v
		}
	}
	if len(en.Labels) > maxLabels {
		return en, "", invalid("%s: a log entry may have at most %d labels; it has %d.", at, maxLabels, len(en.Labels))
	}
	for k, v := range en.Labels {
		if len(k) > maxLabelKey || len(v) > maxLabelValue {
			delete(en.Labels, k)
			en.Labels[truncate(k, maxLabelKey)] = truncate(v, maxLabelValue)
		}
	}
	// L5: the entry's size, as its JSON form measures it.
	b, _ := json.Marshal(en)
	if len(b) > maxEntryBytes {
		return en, "", invalid("Log entry with size %.1fK exceeds maximum size of %.1fK", float64(len(b))/1024, float64(maxEntryBytes)/1024)
	}
	return en, project, nil
}

// truncate cuts s to at most n bytes, on a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// listable says whether entries.list shows e: not one older than the retention when received (L7).
func (s *Server) listable(e Entry) bool {
	t, err1 := time.Parse(time.RFC3339Nano, e.Timestamp)
	rcv, err2 := time.Parse(time.RFC3339Nano, e.ReceiveTimestamp)
	return err1 == nil && err2 == nil && rcv.Sub(t) <= retention
}

// grpcCode is the google.rpc.Code of a status name, as per-entry errors carry it.
func grpcCode(status string) int {
	return map[string]int{"INVALID_ARGUMENT": 3, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "UNIMPLEMENTED": 12, "UNAUTHENTICATED": 16}[status]
}

// projectNumber stands in for the project's number in quota messages.
func projectNumber(project string) string {
	var h uint64 = 1469598103934665603
	for i := range len(project) {
		h = (h ^ uint64(project[i])) * 1099511628211
	}
	return strconv.FormatUint(100000000000+h%900000000000, 10)
}
