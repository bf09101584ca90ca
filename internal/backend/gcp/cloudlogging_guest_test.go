package gcp

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/loggingfake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// Cloud Logging's public endpoint in the guest's namespace: an address of its own on the namespace's loopback
// (Secret Manager's has 169.254.169.254:443), which the guest's /etc/hosts gives the endpoint's name.
const (
	loggingHost = "logging.googleapis.com"
	loggingIP   = "169.254.169.252"
)

// The access log shipped to Cloud Logging from the proxy image's own Squid, booted as in
// TestGuestStartupScriptOnRealSquid: the proxy is made through the backend with cloud logging on and a
// service account, the guest's shipper writes to the Cloud Logging fake over TLS with the token the metadata
// server hands the VM, and the entries the fake holds are the lines Squid logged, one for one: as many, with
// the same host, decision and status, as jsonPayload on the VM's gce_instance resource. The fake refuses the
// shipper's first writes (429), which it must retry. Then Prometheus metrics are turned on in place on the
// same guest (checkMetricsInGuest), and cloud logging and metrics are turned off in place (Update, Reconfigure): the guest
// stops its shipper and the metrics programs.
func TestGuestShipsAccessLogToCloudLogging(t *testing.T) {
	tree := testutil.GuestRootPrerequisites(t)
	ctx := testutil.GuestContext(t, 10*time.Minute)

	fake, sm, b := newTestWithSecrets(t, computefake.Options{})
	b.guestPollInitial, b.guestPollMax = defaultGuestPollInitial, defaultGuestPollMax
	const email = "proxy@" + testProject + ".iam.gserviceaccount.com"
	// The logging fake takes the token the metadata server hands the VM (Secret Manager's, for its account),
	// and the account holds the role the docs name, on the project.
	logs := loggingfake.New()
	t.Cleanup(logs.Close)
	logs.AddPrincipal(sm.ServiceAccountToken(email), "serviceAccount:"+email)
	logs.GrantRole(testProject, "serviceAccount:"+email, LogWriterRole)
	logs.Throttle(2)

	spec := testSpec("uid-cloud-logging", "us-central1-a")
	spec.Placement.Options = &Options{ServiceAccount: email, CloudLogging: true}
	spec.Proxy.AllowedClientCIDRs = []string{"198.18.0.0/24"}
	spec.Proxy.AllowedDestinations = []string{"allowed.example"}
	spec.Proxy.LogFormat = proxyconf.LogFormatJSON
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	fake.MetadataInstance(testProject, "us-central1-a", spec.Name)
	in := fake.Instance(testProject, "us-central1-a", spec.Name)
	configID, _ := metadataValue(in, gcpguest.MetadataConfigID)
	if got, _ := metadataValue(in, gcpguest.MetadataCloudLogging); got != CloudLogID(spec.Name) {
		t.Fatalf("metadata %s = %q, want %q", gcpguest.MetadataCloudLogging, got, CloudLogID(spec.Name))
	}

	ns, peer := testNetns(t)
	testutil.ServeInNetns(t, ns, "169.254.169.254:80", fake.MetadataHandler())
	smCert := serveTLSInNetns(t, ns, "169.254.169.254:443", secretManagerHost, sm.Handler())
	testutil.IPIn(t, ns, "addr", "add", loggingIP+"/32", "dev", "lo")
	logCert := serveTLSInNetns(t, ns, loggingIP+":443", loggingHost, logs.Handler())
	testutil.ServeInNetns(t, peer, upstreamIP+":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "upstream "+r.Host)
	}))
	upper := t.TempDir()
	writeGuestFiles(t, upper, inst.EgressAddress)
	testutil.WriteGuestFiles(t, upper, map[string]string{"etc/ssl/certs/ca-certificates.crt": smCert + logCert})
	client := testutil.ProxyClient{Dial: testutil.DialFromNetns(peer, clientIP, guestIP+":3128"), User: "u", Password: "correct-horse-battery"}

	guest := testutil.BootGuest(t, tree, upper, ns, "cloudlog")
	applied := func() string {
		return fake.GuestAttribute(testProject, "us-central1-a", spec.Name, gcpguest.GuestAttributeNamespace+"/"+gcpguest.GuestAttributeApplied)
	}
	guest.WaitFor(ctx, t, "the guest reports config "+configID+" applied", func() bool { return applied() == configID })

	type want struct {
		url      string
		auth     bool
		status   int
		decision string
	}
	requests := []want{
		{"http://allowed.example/", true, http.StatusOK, "allow"},
		{"http://allowed.example/", true, http.StatusOK, "allow"},
		{"http://allowed.example/", true, http.StatusOK, "allow"},
		{"http://denied.example/", true, http.StatusForbidden, "deny"},
		{"http://denied.example/", true, http.StatusForbidden, "deny"},
		{"http://allowed.example/", false, http.StatusProxyAuthRequired, "deny"},
	}
	for _, r := range requests {
		if got := client.Get(ctx, t, r.url, r.auth); got != r.status {
			t.Errorf("%s through the guest's Squid = %d, want %d\n%s", r.url, got, r.status, guest.Log())
		}
	}

	// Every line Squid logged, as host/decision/status, and the same of every entry the fake holds.
	fromLog := func() []string {
		var out []string
		for _, l := range strings.Split(statIn(t, upper, proxyconf.AccessLogPath).Content, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, summary(t, []byte(l)))
			}
		}
		slices.Sort(out)
		return out
	}
	fromEntries := func() []string {
		var out []string
		for _, e := range logs.Entries(testProject, CloudLogID(spec.Name)) {
			out = append(out, summary(t, e.JSONPayload))
		}
		slices.Sort(out)
		return out
	}
	wantRequests := func(lines []string) bool {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, ".example ") {
				n++
			}
		}
		return n == len(requests)
	}
	guest.WaitFor(ctx, t, "the access log's lines of the 6 requests in Cloud Logging", func() bool { return wantRequests(fromEntries()) })
	logged, shipped := fromLog(), fromEntries()
	if !slices.Equal(logged, shipped) {
		t.Errorf("Cloud Logging holds\n%s\nwant the access log's lines\n%s", strings.Join(shipped, "\n"), strings.Join(logged, "\n"))
	}
	for _, r := range requests {
		host := strings.Split(strings.TrimPrefix(r.url, "http://"), "/")[0]
		line := fmt.Sprintf("%s %s %d", host, r.decision, r.status)
		if !slices.Contains(shipped, line) {
			t.Errorf("no entry %q in Cloud Logging:\n%s", line, strings.Join(shipped, "\n"))
		}
	}
	entries := logs.Entries(testProject, CloudLogID(spec.Name))
	wantRes := map[string]string{"project_id": testProject, "instance_id": strconv.FormatUint(in.GetId(), 10), "zone": "us-central1-a"}
	for _, e := range entries {
		if e.Resource.Type != "gce_instance" || !equalMaps(e.Resource.Labels, wantRes) || e.TextPayload != nil || e.Timestamp == e.ReceiveTimestamp {
			t.Errorf("entry %+v: want jsonPayload on gce_instance %v, with the time Squid logged", e, wantRes)
			break
		}
	}
	// The first writes were refused (429) and retried; every later one went through.
	var statuses []int
	for _, r := range logs.Requests() {
		statuses = append(statuses, r.Status)
	}
	if len(statuses) < 3 || statuses[0] != http.StatusTooManyRequests || statuses[1] != http.StatusTooManyRequests || statuses[len(statuses)-1] != http.StatusOK {
		t.Errorf("writes answered %v, want two 429s, retried until written", statuses)
	}

	t.Logf("%d lines logged and shipped; writes answered %v", len(shipped), statuses)

	// The shipper's user is in group proxy to read Squid's log, which would let it read the password file and
	// the TLS key too: /etc/squid is empty where it runs.
	mine, err := guest.Exec(t, "sh", "-c", "nsenter -t \"$(systemctl show -p MainPID --value "+gcpguest.CloudLoggingUnit+")\" -m -- ls -A /etc/squid")
	if err != nil || strings.TrimSpace(mine) != "" {
		t.Errorf("/etc/squid as the shipper sees it (%v): %q, want it empty", err, mine)
	}
	if all, _ := guest.Exec(t, "ls", "-A", "/etc/squid"); !strings.Contains(all, "squid.conf") {
		t.Errorf("/etc/squid in the guest: %q, want squid.conf there", all)
	}

	// Prometheus metrics on the same guest (metrics_guest_test.go): on, counted, moved in place.
	checkMetricsInGuest(ctx, t, b, guest, peer, inst, &spec, client)

	// Off in place, with metrics: the metadata keys go, the guest's watcher stops the shipper and the metrics
	// programs, and the VM stays.
	spec.Placement.Options = &Options{ServiceAccount: email}
	if _, err := b.Update(ctx, inst.ID, spec); err != nil {
		t.Fatal(err)
	}
	spec.Proxy.Metrics = nil
	if _, err := b.Reconfigure(ctx, inst.ID, spec.Proxy); err != nil {
		t.Fatal(err)
	}
	checkMetricsOffInGuest(ctx, t, guest, peer)
	if _, has := metadataValue(fake.Instance(testProject, "us-central1-a", spec.Name), gcpguest.MetadataCloudLogging); has {
		t.Fatal("Update left the cloud logging key in metadata")
	}
	guest.WaitFor(ctx, t, "the guest stops its shipper", func() bool {
		out, _ := guest.Exec(t, "systemctl", "is-active", gcpguest.CloudLoggingUnit)
		return strings.TrimSpace(out) == "inactive"
	})
	guest.Stop(t)
}

// summary is an access log line's host, decision and status.
func summary(t *testing.T, line []byte) string {
	t.Helper()
	var f struct {
		Host, Decision string
		Status         int
	}
	if err := json.Unmarshal(line, &f); err != nil {
		t.Fatalf("not a JSON line: %q: %v", line, err)
	}
	return fmt.Sprintf("%s %s %d", f.Host, f.Decision, f.Status)
}
