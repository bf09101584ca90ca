package guest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/imdsfake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// The access log shipped to CloudWatch Logs, proved on the proxy image's own Squid as TestAgentOnRealSquid
// proves the config: the guest boots in a network namespace with IMDSv2 (imdsfake) and ec2fake's SSM and
// CloudWatch Logs behind a recording proxy, signing with the credentials of a role whose policy allows its own
// parameters and its own log stream only, as the backend's own instance role does. The proxy's group exists
// (the backend makes it); the agent makes the stream.
//
// It proves: each request through Squid becomes one event of the stream, in the order Squid logged them, the
// line's own time as the event's timestamp: as many events as requests, with the decision and host of each;
// a CloudWatch Logs that fails (a run of ServiceUnavailableException) delays lines and loses none; an agent
// restarted goes on after the last batch taken, sending no line twice; and every call is signed with the
// role session's token.
func TestAgentShipsAccessLogOnRealSquid(t *testing.T) {
	tree := testutil.GuestRootPrerequisites(t)
	ctx := testutil.GuestContext(t, 10*time.Minute)
	start := time.Now()

	const region, name, role, instanceID = "eu-west-1", "logs-proxy", "egress-proxy-logs", "i-0a1b2c3d4e5f60719"
	group := "/egress-proxy/" + name
	prefix := "arn:aws:ssm:" + region + ":" + ec2fake.DefaultAccountID + ":parameter/egress-proxy/" + name + "/"
	policy := fmt.Sprintf(`{"Version": "2012-10-17", "Statement": [
		{"Effect": "Allow", "Action": "ssm:GetParameters", "Resource": %q},
		{"Effect": "Allow", "Action": "ssm:PutParameter", "Resource": %q},
		{"Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"], "Resource": %q}]}`,
		prefix+"*", prefix+guest.ParameterApplied, "arn:aws:logs:"+region+":"+ec2fake.DefaultAccountID+":log-group:"+group+":log-stream:"+name)
	fake := ec2fake.New(t, ec2fake.Options{Regions: []string{region}, Roles: []ec2fake.Role{{Name: role, Policy: policy}}})
	admin := cloudwatchlogs.NewFromConfig(fake.AdminAWSConfig(region))
	if _, err := admin.CreateLogGroup(ctx, &cloudwatchlogs.CreateLogGroupInput{LogGroupName: aws.String(group)}); err != nil {
		t.Fatal(err)
	}
	params := paramWriter{t: t, ctx: ctx, c: ssm.NewFromConfig(fake.AWSConfig(region)), name: name}

	const lifetime = time.Hour
	imds := imdsfake.New(imdsfake.Options{Role: role, CredentialLifetime: lifetime,
		NewCredentials: func(int) (string, string, string) { return fake.InstanceProfileCredentials(role, instanceID, lifetime) }})
	imds.SetMetadata("network/interfaces/macs/"+guestMAC+"/public-ipv4s", publicIP)
	imds.SetMetadata("network/interfaces/macs/"+guestMAC+"/local-ipv4s", guestIP)
	userData, err := guest.RenderUserDataWith(
		guest.UserDataOptions{Region: region, ParameterPrefix: guest.ParameterPath(name, ""), Logs: &guest.LogsTarget{Group: group, Stream: name}},
		guest.Overrides{WatchInterval: 2, TokenTTL: 60, PlainSSMEndpoint: "http://" + ssmIP, PlainLogsEndpoint: "http://" + ssmIP, LogsFlush: 1})
	if err != nil {
		t.Fatal(err)
	}
	imds.SetUserData(userData)

	ns, peer := testNetns(t)
	testutil.ServeInNetns(t, ns, "169.254.169.254:80", imds.Handler())
	calls := &ssmRecorder{}
	testutil.ServeInNetns(t, peer, ssmIP+":80", calls.proxyTo(t, fake.URL()))
	testutil.ServeInNetns(t, peer, upstreamIP+":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "upstream "+r.Host)
	}))

	r := params.render(proxyconf.Settings{Port: proxyconf.DefaultPort, AllowedClientCIDRs: []string{"198.18.0.0/24"},
		AllowedDestinations: []string{"allowed.example"}, LogFormat: proxyconf.LogFormatJSON})
	params.put(r)
	upper := t.TempDir()
	writeGuestFiles(t, upper)
	proxy := testutil.ProxyClient{Dial: testutil.DialFromNetns(peer, clientIP, guestIP+":3128")}
	g := testutil.BootGuest(t, tree, upper, ns, "logs")
	g.WaitFor(ctx, t, "the guest reports its config applied", func() bool { return params.applied() == r.id })

	// The stream as a client reads it, oldest first: the events of the test's requests (Squid's other lines,
	// such as the agent's own check that it listens, are not the test's).
	type event struct {
		ts               int64
		decision, host   string
		time             float64
		message, problem string
	}
	readBack := func() []event {
		var out []event
		var token *string
		for {
			page, err := admin.GetLogEvents(ctx, &cloudwatchlogs.GetLogEventsInput{LogGroupName: aws.String(group), LogStreamName: aws.String(name),
				StartFromHead: aws.Bool(true), NextToken: token})
			if err != nil {
				return nil // the stream is not made yet
			}
			for _, e := range page.Events {
				var line struct {
					Time           float64 `json:"time"`
					Decision, Host string
				}
				ev := event{ts: aws.ToInt64(e.Timestamp), message: aws.ToString(e.Message)}
				if err := json.Unmarshal([]byte(ev.message), &line); err != nil {
					ev.problem = err.Error()
				}
				ev.decision, ev.host, ev.time = line.Decision, line.Host, line.Time
				if strings.HasSuffix(ev.host, ".example") || ev.problem != "" {
					out = append(out, ev)
				}
			}
			if token != nil && aws.ToString(page.NextForwardToken) == *token {
				return out
			}
			token = page.NextForwardToken
		}
	}
	var want []string
	send := func(n int, url string, status int, decision string) {
		t.Helper()
		for range n {
			if got := proxy.Get(ctx, t, url, false); got != status {
				t.Fatalf("%s through the guest's Squid = %d, want %d\n%s", url, got, status, g.Log())
			}
			want = append(want, decision+" "+strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"))
		}
	}
	check := func(when string) {
		t.Helper()
		g.WaitFor(ctx, t, when+": the stream holds a line per request", func() bool { return len(readBack()) >= len(want) })
		got := readBack()
		var seen []string
		for i, e := range got {
			seen = append(seen, e.decision+" "+e.host)
			if e.problem != "" {
				t.Errorf("%s: event %d is not a JSON line (%s): %s", when, i, e.problem, e.message)
			}
			if e.ts != int64(e.time*1000) && (i == 0 || e.ts != got[i-1].ts) {
				t.Errorf("%s: event %d's timestamp %d is not its line's time %.3f", when, i, e.ts, e.time)
			}
			if i > 0 && e.ts < got[i-1].ts {
				t.Errorf("%s: event %d is earlier than the one before", when, i)
			}
		}
		if !slices.Equal(seen, want) {
			t.Errorf("%s: the stream's events are %d lines %v, want one per request in order, %d: %v", when, len(seen), seen, len(want), want)
		}
	}

	send(3, "http://allowed.example/", http.StatusOK, "allow")
	send(2, "http://denied.example/", http.StatusForbidden, "deny")
	send(1, "http://allowed.example/", http.StatusOK, "allow")
	check("first requests")
	t.Logf("the first requests' lines are in CloudWatch Logs %s after start", time.Since(start).Round(time.Second))

	// CloudWatch Logs fails for a while: the lines wait, in order, and none is lost or sent twice.
	fake.AddFault(ec2fake.Fault{Action: "PutLogEvents", Code: "ServiceUnavailableException", Times: 3})
	send(2, "http://denied.example/", http.StatusForbidden, "deny")
	send(2, "http://allowed.example/", http.StatusOK, "allow")
	check("after CloudWatch Logs failed three times")
	if !strings.Contains(g.FullLog(), "ServiceUnavailableException") {
		t.Errorf("the agent did not log CloudWatch Logs' failures:\n%s", g.Log())
	}

	// The agent restarts: it goes on after the last batch taken, and sends nothing twice.
	if out, err := g.Exec(t, "systemctl", "restart", guest.AgentUnit); err != nil {
		t.Fatalf("restarting the agent: %v\n%s", err, out)
	}
	send(1, "http://denied.example/", http.StatusForbidden, "deny")
	send(1, "http://allowed.example/", http.StatusOK, "allow")
	check("after the agent restarted")

	g.Stop(t)
	var puts, streams int
	for _, c := range calls.all() {
		if !strings.HasPrefix(c.target, "Logs_20140328.") {
			continue
		}
		if c.token == "" || !strings.Contains(c.signedHeaders, "x-amz-security-token") {
			t.Errorf("%s was not signed with the role session's token", c.target)
		}
		switch c.target {
		case "Logs_20140328.PutLogEvents":
			puts++
		case "Logs_20140328.CreateLogStream":
			streams++
		default:
			t.Errorf("the agent called %s", c.target)
		}
	}
	if streams != 1 || puts < 3 {
		t.Errorf("the agent made the stream %d times and sent %d batches, want once and at least 3", streams, puts)
	}
	t.Logf("done in %s", time.Since(start).Round(time.Second))
}
