package loggingfake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// One case per rule of README.md, named by its number there, over plain HTTP with the JSON a client sends.

const (
	writer = "writer-token"
	reader = "reader-token"
	nobody = "nobody-token"
)

func newFake(t *testing.T) *Server {
	t.Helper()
	s := New()
	t.Cleanup(s.Close)
	s.AddPrincipal(writer, "serviceAccount:vm@p.iam.gserviceaccount.com")
	s.AddPrincipal(reader, "user:admin@example.com")
	s.AddPrincipal(nobody, "serviceAccount:other@p.iam.gserviceaccount.com")
	s.GrantRole("p", "serviceAccount:vm@p.iam.gserviceaccount.com", LogWriterRole)
	s.GrantRole("p", "user:admin@example.com", ViewerRole)
	return s
}

type answer struct {
	status int
	body   string
}

func post(t *testing.T, s *Server, token, path string, body any) answer {
	t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(http.MethodPost, s.URL+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	out, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: string(out)}
}

func (a answer) want(t *testing.T, what string, status int, words ...string) {
	t.Helper()
	if a.status != status {
		t.Errorf("%s: HTTP %d %s, want %d", what, a.status, a.body, status)
		return
	}
	for _, w := range words {
		if !strings.Contains(a.body, w) {
			t.Errorf("%s: %s, want it to say %q", what, a.body, w)
		}
	}
}

var gce = map[string]any{"type": "gce_instance", "labels": map[string]string{"project_id": "p", "instance_id": "123", "zone": "us-central1-a"}}

// entry is a valid entry with fields replaced or added by kv (a nil value removes one).
func entry(kv ...any) map[string]any {
	e := map[string]any{"logName": "projects/p/logs/egress-proxy", "resource": gce, "jsonPayload": map[string]any{"host": "a.example"}}
	for i := 0; i+1 < len(kv); i += 2 {
		k := fmt.Sprint(kv[i])
		if kv[i+1] == nil {
			delete(e, k)
		} else {
			e[k] = kv[i+1]
		}
	}
	return e
}

func write(entries ...map[string]any) map[string]any { return map[string]any{"entries": entries} }

func TestDocumentedRules(t *testing.T) {
	t.Parallel()
	for name, run := range map[string]func(t *testing.T, s *Server){
		"L1 unknown names and wrong types": func(t *testing.T, s *Server) {
			post(t, s, writer, "/v2/entries:write", map[string]any{"entries": []any{entry()}, "partial": true}).
				want(t, "unknown request field", 400, "INVALID_ARGUMENT", `Unknown name \"partial\"`, "google.rpc.BadRequest")
			post(t, s, writer, "/v2/entries:write", write(entry("payload", "x"))).want(t, "unknown entry field", 400, `Unknown name \"payload\" at 'entries[0]'`)
			post(t, s, writer, "/v2/entries:write", write(entry("resource", map[string]any{"type": "global", "label": map[string]string{}}))).
				want(t, "unknown resource field", 400, `Unknown name \"label\"`)
			post(t, s, writer, "/v2/entries:write", write(entry("textPayload", 5, "jsonPayload", nil))).want(t, "a number for a string", 400, "Invalid value at 'entries[0].textPayload'")
			post(t, s, writer, "/v2/entries:write", write(entry("protoPayload", map[string]any{}))).want(t, "a field the fake does not model", 501, "UNIMPLEMENTED")
			post(t, s, writer, "/v2/entries:write", `{"entries":[{"logName":"projects/p/logs/x","resource":{"type":"global","labels":{"project_id":"p"}},"textPayload":"`+"\xff"+`"}]}`).
				want(t, "bad UTF-8", 400, "UTF-8")
		},
		"L2 log names": func(t *testing.T, s *Server) {
			for _, bad := range []string{"egress-proxy", "projects/p/logs/", "projects/p/logs/a b", "projects/p/logs/a/b", "projects/p/logs/a%2", "projects/p/logs/a:b",
				"projects/p/logs/" + strings.Repeat("x", 512), "projects/P/logs/x"} {
				post(t, s, writer, "/v2/entries:write", write(entry("logName", bad))).want(t, bad, 400, "INVALID_ARGUMENT")
			}
			post(t, s, writer, "/v2/entries:write", write(entry("logName", nil))).want(t, "no log name at all", 400, "no logName")
			for _, good := range []string{"projects/p/logs/A.z_0-9", "projects/p/logs/egress%2Fproxy", "/projects/p/logs/lead", "projects/p/logs/" + strings.Repeat("y", 511)} {
				post(t, s, writer, "/v2/entries:write", write(entry("logName", good))).want(t, good, 200)
			}
			post(t, s, writer, "/v2/entries:write", map[string]any{"logName": "projects/p/logs/dflt", "entries": []any{entry("logName", nil)}}).want(t, "the request's log name", 200)
			if got := s.Entries("p", "egress/proxy"); len(got) != 1 || got[0].LogName != "projects/p/logs/egress%2Fproxy" {
				t.Errorf("an encoded slash: %+v", got)
			}
			if len(s.Entries("p", "lead")) != 1 || len(s.Entries("p", "dflt")) != 1 {
				t.Error("a leading slash is removed, and the request's log name is the entries' default")
			}
			post(t, s, writer, "/v2/entries:write", write(entry("logName", "folders/1/logs/x"))).want(t, "a folder's log", 501)
		},
		"L3 monitored resource": func(t *testing.T, s *Server) {
			post(t, s, writer, "/v2/entries:write", write(entry("resource", nil))).want(t, "no resource", 400, "no monitored resource")
			post(t, s, writer, "/v2/entries:write", map[string]any{"resource": gce, "entries": []any{entry("resource", nil)}}).want(t, "the request's resource", 200)
			post(t, s, writer, "/v2/entries:write", write(entry("resource", map[string]any{"type": "vm"}))).want(t, "unknown type", 400, `unknown monitored resource type \"vm\"`)
			post(t, s, writer, "/v2/entries:write", write(entry("resource", map[string]any{"type": "gce_instance", "labels": map[string]string{"project_id": "p", "zone": "z"}}))).
				want(t, "a label missing", 400, "instance_id")
			post(t, s, writer, "/v2/entries:write", write(entry("resource", map[string]any{"type": "global", "labels": map[string]string{"project_id": "p", "zone": "z"}}))).
				want(t, "a label the type has not", 400, `has no label \"zone\"`)
		},
		"L4 payload": func(t *testing.T, s *Server) {
			post(t, s, writer, "/v2/entries:write", write(entry("textPayload", "x"))).want(t, "two payloads", 400, "more than one payload")
			post(t, s, writer, "/v2/entries:write", write(entry("jsonPayload", []int{1}))).want(t, "a JSON array", 400, "google.protobuf.Struct")
			post(t, s, writer, "/v2/entries:write", write(entry("jsonPayload", "x"))).want(t, "a JSON string", 400, "google.protobuf.Struct")
			post(t, s, writer, "/v2/entries:write", write(entry("jsonPayload", nil, "textPayload", "a line"), entry("jsonPayload", nil))).want(t, "text, and none", 200)
			if got := s.Entries("p", "egress-proxy"); len(got) != 2 || got[0].TextPayload == nil || *got[0].TextPayload != "a line" {
				t.Errorf("stored: %+v", got)
			}
		},
		"L5 entry size": func(t *testing.T, s *Server) {
			big := strings.Repeat("x", maxEntryBytes)
			post(t, s, writer, "/v2/entries:write", write(entry("jsonPayload", map[string]string{"x": big}))).want(t, "an entry over 256 KiB", 400, "exceeds maximum size of 256.0K", "WriteLogEntriesPartialErrors")
			post(t, s, writer, "/v2/entries:write", write(entry("jsonPayload", map[string]string{"x": big[:maxEntryBytes-400]}))).want(t, "an entry under 256 KiB", 200)
		},
		"L6 request size": func(t *testing.T, s *Server) {
			var entries []map[string]any
			for range 41 {
				entries = append(entries, entry("jsonPayload", map[string]string{"x": strings.Repeat("x", 250*1024)}))
			}
			post(t, s, writer, "/v2/entries:write", write(entries...)).want(t, "41 entries of 250 KiB", 400, "Request payload size exceeds the limit: 10485760 bytes.")
			post(t, s, writer, "/v2/entries:write", write(entries[:40]...)).want(t, "40 of them", 200)
		},
		"L7 timestamps": func(t *testing.T, s *Server) {
			now := time.Now()
			s.now = func() time.Time { return now }
			post(t, s, writer, "/v2/entries:write", write(entry("timestamp", "2026-13-01T00:00:00Z"))).want(t, "not a time", 400, "Invalid time format")
			post(t, s, writer, "/v2/entries:write", write(entry("timestamp", "1767225600.123"))).want(t, "seconds since the epoch", 400, "Invalid time format")
			post(t, s, writer, "/v2/entries:write", write(entry("timestamp", now.Add(25*time.Hour).Format(time.RFC3339)))).want(t, "25 hours ahead", 400, "in the future")
			post(t, s, writer, "/v2/entries:write", write(
				entry("timestamp", now.Add(23*time.Hour).Format(time.RFC3339), "insertId", "ahead"),
				entry("timestamp", now.Add(-31*24*time.Hour).Format(time.RFC3339Nano), "insertId", "old"),
				entry("insertId", "now"))).want(t, "23 hours ahead, 31 days old, none", 200)
			var ids []string
			for _, e := range s.Entries("p", "egress-proxy") {
				ids = append(ids, e.InsertID)
				if e.InsertID == "now" && e.Timestamp != now.UTC().Format(time.RFC3339Nano) {
					t.Errorf("an entry without a timestamp has %s, want the time received", e.Timestamp)
				}
			}
			if strings.Join(ids, ",") != "ahead,now" {
				t.Errorf("listable entries %v, want ahead,now: the 31-day-old one is accepted but not stored", ids)
			}
		},
		"L8 labels": func(t *testing.T, s *Server) {
			labels := map[string]string{}
			for i := range 65 {
				labels[fmt.Sprint("k", i)] = "v"
			}
			post(t, s, writer, "/v2/entries:write", write(entry("labels", labels))).want(t, "65 labels", 400, "at most 64 labels")
			delete(labels, "k0")
			delete(labels, "k64")
			post(t, s, writer, "/v2/entries:write", map[string]any{"labels": map[string]string{"k0": "req", "k1": "req"}, "entries": []any{entry("labels", labels)}}).
				want(t, "64 with the request's", 200)
			post(t, s, writer, "/v2/entries:write", write(entry("logName", "projects/p/logs/long", "labels", map[string]string{strings.Repeat("k", 600): strings.Repeat("v", 70000)}))).want(t, "long label", 200)
			got := s.Entries("p", "egress-proxy")
			if len(got) != 1 || got[0].Labels["k0"] != "req" || got[0].Labels["k1"] != "v" {
				t.Errorf("the request's labels join the entry's, which win: %v", got)
			}
			for k, v := range s.Entries("p", "long")[0].Labels {
				if len(k) != maxLabelKey || len(v) != maxLabelValue {
					t.Errorf("a long label is truncated to 512 B and 64 KiB, got %d and %d", len(k), len(v))
				}
			}
		},
		"L9 permission": func(t *testing.T, s *Server) {
			post(t, s, nobody, "/v2/entries:write", write(entry())).want(t, "without the role", 403, "PERMISSION_DENIED", "logging.logEntries.create", "IAM_PERMISSION_DENIED")
			post(t, s, writer, "/v2/entries:write", write(entry("logName", "projects/q/logs/x"))).want(t, "another project", 403, "projects/q")
			post(t, s, reader, "/v2/entries:write", write(entry())).want(t, "a viewer writing", 403)
			post(t, s, writer, "/v2/entries:list", map[string]any{"resourceNames": []string{"projects/p"}}).want(t, "a writer listing", 403, "logging.logEntries.list")
			if len(s.Entries("p", "egress-proxy")) != 0 {
				t.Error("a refused write stored entries")
			}
		},
		"L10 write quota": func(t *testing.T, s *Server) {
			s.Throttle(2)
			post(t, s, writer, "/v2/entries:write", write(entry())).want(t, "throttled", 429, "RESOURCE_EXHAUSTED", "RATE_LIMIT_EXCEEDED")
			post(t, s, writer, "/v2/entries:write", write(entry())).want(t, "throttled again", 429)
			post(t, s, writer, "/v2/entries:write", write(entry())).want(t, "after", 200)
			s.mu.Lock()
			now := time.Now()
			for range writesPerMinute {
				s.writes["p"] = append(s.writes["p"], now)
			}
			s.mu.Unlock()
			post(t, s, writer, "/v2/entries:write", write(entry())).want(t, "beyond 120,000 a minute", 429)
			if len(s.Entries("p", "egress-proxy")) != 1 {
				t.Error("a throttled write stored entries")
			}
		},
		"L11 authentication": func(t *testing.T, s *Server) {
			post(t, s, "", "/v2/entries:write", write(entry())).want(t, "no token", 401, "UNAUTHENTICATED")
			post(t, s, "unknown", "/v2/entries:write", write(entry())).want(t, "unknown token", 401, "invalid authentication credentials")
		},
		"L12 partial success": func(t *testing.T, s *Server) {
			bad := entry("logName", "bad")
			post(t, s, writer, "/v2/entries:write", write(entry(), bad)).want(t, "one bad entry", 400, "WriteLogEntriesPartialErrors", `"1":{"code":3`)
			if len(s.Entries("p", "egress-proxy")) != 0 {
				t.Error("without partialSuccess a bad entry kept none from being written")
			}
			post(t, s, writer, "/v2/entries:write", map[string]any{"partialSuccess": true, "entries": []any{entry(), bad}}).want(t, "partial", 400, `"1":{"code":3`)
			if len(s.Entries("p", "egress-proxy")) != 1 {
				t.Error("with partialSuccess the valid entry is written")
			}
			a := post(t, s, writer, "/v2/entries:write", map[string]any{"partialSuccess": true, "entries": []any{bad}})
			if a.want(t, "partial, none written", 400); strings.Contains(a.body, "WriteLogEntriesPartialErrors") {
				t.Errorf("a partial request that wrote nothing carries per-entry errors: %s", a.body)
			}
		},
		"L13 resource names per request": func(t *testing.T, s *Server) {
			var entries []map[string]any
			for i := range 1001 {
				p := fmt.Sprintf("p%d", i)
				s.GrantRole(p, "serviceAccount:vm@p.iam.gserviceaccount.com", LogWriterRole)
				entries = append(entries, entry("logName", "projects/"+p+"/logs/x"))
			}
			post(t, s, writer, "/v2/entries:write", write(entries...)).want(t, "1001 projects", 400, "at most 1000")
			post(t, s, writer, "/v2/entries:write", write(entries[:1000]...)).want(t, "1000 projects", 200)
		},
		"L14 dry run": func(t *testing.T, s *Server) {
			post(t, s, writer, "/v2/entries:write", map[string]any{"dryRun": true, "entries": []any{entry()}}).want(t, "dry run", 200)
			post(t, s, writer, "/v2/entries:write", map[string]any{"dryRun": true, "entries": []any{entry("logName", "x")}}).want(t, "dry run, bad", 400)
			if len(s.Entries("p", "egress-proxy")) != 0 {
				t.Error("a dry run stored entries")
			}
		},
		"L15 entries required": func(t *testing.T, s *Server) {
			post(t, s, writer, "/v2/entries:write", map[string]any{"logName": "projects/p/logs/x"}).want(t, "none", 400, "at least one")
		},
		"L16 list": func(t *testing.T, s *Server) {
			now := time.Now().UTC()
			var entries []map[string]any
			for i := range 120 {
				entries = append(entries, entry("timestamp", now.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), "insertId", fmt.Sprintf("%03d", i)))
			}
			post(t, s, writer, "/v2/entries:write", write(append(entries, entry("logName", "projects/p/logs/other"))...)).want(t, "write", 200)
			type page struct {
				Entries       []Entry
				NextPageToken string
			}
			read := func(body map[string]any) page {
				a := post(t, s, reader, "/v2/entries:list", body)
				a.want(t, "list", 200)
				var p page
				_ = json.Unmarshal([]byte(a.body), &p)
				return p
			}
			var ids []string
			req := map[string]any{"resourceNames": []string{"projects/p"}, "filter": `logName="projects/p/logs/egress-proxy"`}
			for {
				p := read(req)
				if len(p.Entries) > 50 {
					t.Fatalf("a page of %d entries, want the default of 50 at most", len(p.Entries))
				}
				for _, e := range p.Entries {
					ids = append(ids, e.InsertID)
				}
				if p.NextPageToken == "" {
					break
				}
				req["pageToken"] = p.NextPageToken
			}
			if len(ids) != 120 || ids[0] != "000" || ids[119] != "119" {
				t.Errorf("listed %d entries %v..., want 120 oldest first", len(ids), ids[:min(3, len(ids))])
			}
			if p := read(map[string]any{"resourceNames": []string{"projects/p"}, "orderBy": "timestamp desc", "pageSize": 1000}); len(p.Entries) != 121 || p.Entries[0].InsertID != "119" {
				t.Errorf("newest first, no filter: %d entries", len(p.Entries))
			}
			post(t, s, reader, "/v2/entries:list", map[string]any{"resourceNames": []string{"projects/p"}, "pageSize": 1001}).want(t, "pageSize 1001", 400)
			post(t, s, reader, "/v2/entries:list", map[string]any{"resourceNames": []string{"projects/p"}, "orderBy": "insertId"}).want(t, "another order", 400)
			post(t, s, reader, "/v2/entries:list", map[string]any{}).want(t, "no resource names", 400)
			post(t, s, reader, "/v2/entries:list", map[string]any{"resourceNames": []string{"projects/p"}, "filter": "severity>=ERROR"}).want(t, "a filter the fake does not model", 501)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			run(t, newFake(t))
		})
	}
}
