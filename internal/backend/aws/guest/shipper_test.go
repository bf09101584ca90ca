package guest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// The agent's shipper against ec2fake's CloudWatch Logs, whose PutLogEvents refuses a batch over its documented
// limits: a log of more lines than one batch holds (1 MB, with 26 bytes a line), then of lines large enough that
// a few fill a batch, and one line longer than the agent sends (cut), all arrive, once each, in the file's order, in
// batches none of which CloudWatch Logs refused; then the file is rotated as logrotate does (renamed, a new one
// made) and the new file's lines follow, through two batches refused as invalid (halved until one is taken). The agent runs as on the instance, its Shipper in a thread, signing
// with a role session's credentials; only Squid and systemd are not there.
func TestShipperBatchesWithinLimits(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	const region, group, stream, role = "eu-west-1", "/egress-proxy/ship", "ship", "egress-proxy-ship"
	fake := ec2fake.New(t, ec2fake.Options{Regions: []string{region}, Roles: []ec2fake.Role{{Name: role}}})
	ctx := t.Context()
	admin := cloudwatchlogs.NewFromConfig(fake.AdminAWSConfig(region))
	if _, err := admin.CreateLogGroup(ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String(group)}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log")
	start := fake.Now().Add(-time.Hour)
	var want []string
	line := func(i int, pad int) string {
		// A JSON line with its own time, a millisecond apart, as Squid writes them.
		return fmt.Sprintf(`{"time":%.3f,"host":"h%d.example","pad":"%s"}`, float64(start.UnixMilli()+int64(i))/1000, i, strings.Repeat("x", pad))
	}
	var b strings.Builder
	// About 90 bytes a line: 10,000 of them are 900,000 bytes, 1,160,000 with the 26 bytes each counts for, so
	// their batches are cut by size, not by count, only when the overhead is counted.
	for i := range 12000 {
		l := line(i, 35)
		b.WriteString(l + "\n")
		want = append(want, l)
	}
	for i := 12000; i < 12040; i++ {
		l := line(i, 60000)
		b.WriteString(l + "\n")
		want = append(want, l)
	}
	long := line(12040, 100000)
	b.WriteString(long + "\n")
	want = append(want, long[:65536])
	if err := os.WriteFile(logPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	agentPy, err := os.ReadFile("agent.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agent.py"), agentPy, 0o600); err != nil {
		t.Fatal(err)
	}
	k, sk, tok := fake.InstanceProfileCredentials(role, "i-0a1b2c3d4e5f6071a", time.Hour)
	cfg := fmt.Sprintf(`{"region": %q, "state_dir": %q, "logs": {"group": %q, "stream": %q, "endpoint": %q, "path": %q, "flush": 0}}`,
		region, dir, group, stream, fake.URL(), logPath)
	code := fmt.Sprintf(`import sys, json
sys.path.insert(0, sys.argv[1])
import agent
class Creds:
    def get(self, force=False):
        return (%q, %q, %q)
agent.Shipper(json.loads(sys.argv[2]), Creds()).run()
`, k, sk, tok)
	cmd := exec.CommandContext(ctx, py, "-c", code, dir, cfg)
	// Read while the agent runs (the failure messages): exec writes into it from a goroutine of its own.
	var out testutil.LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	read := func() []string {
		var got []string
		var token *string
		for {
			page, err := admin.GetLogEvents(ctx, &cloudwatchlogs.GetLogEventsInput{LogGroupName: aws.String(group), LogStreamName: aws.String(stream),
				StartFromHead: aws.Bool(true), NextToken: token})
			if err != nil {
				return nil // no stream yet
			}
			for _, e := range page.Events {
				got = append(got, aws.ToString(e.Message))
			}
			if token != nil && aws.ToString(page.NextForwardToken) == *token {
				return got
			}
			token = page.NextForwardToken
		}
	}
	// refusals is how many batches CloudWatch Logs may have refused as invalid: those the test makes it refuse.
	refusals := 0
	waitFor := func(what string, n int) []string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if got := read(); len(got) >= n {
				return got
			}
			invalid := 0
			for _, r := range fake.Requests() {
				if r.Action == "PutLogEvents" && r.Code == "InvalidParameterException" {
					invalid++
				}
			}
			if invalid > refusals {
				t.Fatalf("%s: CloudWatch Logs refused a batch\n%s", what, out.String())
			}
			select {
			case <-wctx.Done():
				t.Fatalf("%s: %d events, want %d\n%s", what, len(read()), n, out.String())
			case <-tick.C:
			}
		}
	}
	got := waitFor("the first file", len(want))
	if !slices.Equal(got, want) {
		t.Errorf("the stream holds %d events, want the file's %d lines in order, the long one cut", len(got), len(want))
	}

	// logrotate: the file renamed, a new one made, which the agent reads from its start. And CloudWatch Logs
	// refuses the first two batches as invalid, which no retry mends: the agent halves the batch until one is
	// taken, and loses nothing.
	refusals = 2
	fake.AddFault(ec2fake.Fault{Action: "PutLogEvents", Code: "InvalidParameterException", Times: refusals})
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	var more strings.Builder
	for i := 20000; i < 20005; i++ {
		l := line(i, 10)
		more.WriteString(l + "\n")
		want = append(want, l)
	}
	if err := os.WriteFile(logPath, []byte(more.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := waitFor("after the rotation", len(want)); !slices.Equal(got, want) {
		t.Errorf("after the rotation the stream holds %d events, want %d, in order", len(got), len(want))
	}

	var puts, refused int
	for _, r := range fake.Requests() {
		if r.Service == "logs" && r.Action == "PutLogEvents" {
			puts++
			if r.Code != "" {
				refused++
			}
		}
	}
	// 12,000 small lines are two batches at least, 40 of 60 KB two more (1 MB a batch).
	if puts < 4 || refused != 1+refusals {
		t.Errorf("%d PutLogEvents, %d refused; want at least 4, refused the first (the stream did not exist yet) and the %d the test refused\n%s",
			puts, refused, refusals, out.String())
	}
	if !strings.Contains(out.String(), "trying 2 lines at most") || !strings.Contains(out.String(), "trying 1 lines at most") {
		t.Errorf("the agent did not halve the refused batch:\n%s", out.String())
	}
}
