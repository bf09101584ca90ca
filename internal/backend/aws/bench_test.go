package aws

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// Requests per operation against the EC2 and SSM fake, which logs every request it receives, the SDK's own
// retries included: the counts are the backend's, the timings are not AWS's. Where a count is part of the
// design (the calls of each operation, one DescribeInstances a region for a list, no extra call for a create
// beside others) the benchmark fails when it changes, so the figures are checked and not only printed; the
// cheap ones are checked on every test run too (TestRequestCounts). The benchmarks are run by hand, one
// iteration each; -v lists the requests by action:
//
//	go test -run '^$' -bench . -benchtime 1x -v ./internal/backend/aws/

// benchRegions are the three regions BenchmarkListByTag200In3Regions spreads its proxies over.
var benchRegions = []string{testRegion, otherRegion, "ap-southeast-2"}

// newBenchBackend starts a fake and a backend of every region it serves, as newTest does for its two, with
// the documented caller policy.
func newBenchBackend(tb testing.TB, opts ec2fake.Options) (*ec2fake.Server, *Backend) {
	tb.Helper()
	opts.CallerPolicies = []string{documentedPolicy(tb, CallerPolicyFile)}
	fake := ec2fake.New(tb, opts)
	creds, err := fake.Credentials().Retrieve(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	regions := map[string]RegionConfig{}
	for _, name := range fake.RegionNames() {
		regions[name] = RegionConfig{AccessKey: creds.AccessKeyID, SecretKey: creds.SecretAccessKey,
			EC2Endpoint: fake.URL(), SSMEndpoint: fake.URL(), STSEndpoint: fake.URL(), ServiceQuotasEndpoint: fake.URL(), LogsEndpoint: fake.URL(), ELBEndpoint: fake.URL()}
	}
	b, err := New(Config{DefaultRegion: testRegion, Regions: regions})
	if err != nil {
		tb.Fatal(err)
	}
	b.pollInitial, b.pollMax = 2*time.Millisecond, 20*time.Millisecond
	b.retry = backend.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, Factor: 2}
	return fake, b
}

// benchSpec is proxy i of owner "bench" in region's first subnet, without a password, so that bcrypt does
// not weigh on the seeding.
func benchSpec(fake *ec2fake.Server, region string, i int, static bool) backend.Spec {
	uid := fmt.Sprintf("bench-%04d", i)
	return backend.Spec{
		Name: backend.NameFromUID(uid), UID: uid, Owner: "bench",
		Placement: backend.Placement{Backend: Kind, Target: region, Options: &Options{
			SubnetID: fake.Subnets(region)[0].ID, IAMInstanceProfile: "egress-proxy", StaticEgressIP: static,
		}},
		Proxy: testProxy(),
	}
}

// calls counts requests by "service:Action".
type calls map[string]int

func (c calls) total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// service is the calls to one service ("ec2", "ssm", "sts").
func (c calls) service(name string) int {
	n := 0
	for k, v := range c {
		if strings.HasPrefix(k, name+":") {
			n += v
		}
	}
	return n
}

// per lists the calls by action, sorted, each divided by per.
func (c calls) per(per int) string {
	lines := make([]string, 0, len(c))
	for _, k := range slices.Sorted(maps.Keys(c)) {
		lines = append(lines, fmt.Sprintf("%s %.2f", k, float64(c[k])/float64(per)))
	}
	return strings.Join(lines, ", ")
}

// meter takes the fake's requests since the last take.
type meter struct {
	fake *ec2fake.Server
	seen int
}

// take returns the requests since the last take, by service and action, and those answered with an error
// by region and code (a retry is a request of its own, counted in the first).
func (m *meter) take() (byAction calls, failed []ec2fake.Request) {
	log := m.fake.Requests()
	byAction = calls{}
	for _, r := range log[m.seen:] {
		byAction[r.Service+":"+r.Action]++
		if r.Code != "" {
			failed = append(failed, r)
		}
	}
	m.seen = len(log)
	return byAction, failed
}

// report reports the calls of op over per operations: in all and per service, as metrics named after op.
func report(b *testing.B, op string, c calls, per int) {
	b.Helper()
	b.ReportMetric(float64(c.total())/float64(per), "calls/"+op)
	for _, svc := range []string{"ec2", "ssm"} {
		b.ReportMetric(float64(c.service(svc))/float64(per), svc+"-calls/"+op)
	}
	b.Logf("%s: %.2f calls (%s)", op, float64(c.total())/float64(per), c.per(per))
}

// createAll creates specs, parallel at a time.
func createAll(tb testing.TB, be *Backend, specs []backend.Spec, parallel int) {
	tb.Helper()
	errs := make([]error, len(specs))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, spec := range specs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, errs[i] = be.Create(context.Background(), spec)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			tb.Fatalf("Create %s: %v", specs[i].Name, err)
		}
	}
}

// Each operation's requests on one proxy with the fake's default timing: an instance is pending to one
// DescribeInstances of its region and shutting down to one more, so waiting for either takes two polls.
//
// Create: Debian's AMI parameter (GetParameter), the name looked up (DescribeInstances), the subnet's VPC
// (DescribeSubnets), the group looked up, made and opened (DescribeSecurityGroups, CreateSecurityGroup,
// AuthorizeSecurityGroupIngress), five parameters written with their tags (PutParameter: the settings and
// the config, each a head and one part, and the secrets), the launch (RunInstances), the parameters bound
// to the instance (the applied one made, four tagged with its ARN: the config, its part, the secrets and
// applied; the account asked once: GetCallerIdentity), two polls until it runs (the second one's answer is
// the instance read back), and the settings, config and applied parameters read back in one call with the
// first part of each (GetParameters). static_egress_ip adds the proxy's address looked up, allocated and
// associated (DescribeAddresses, AllocateAddress, AssociateAddress) and the instance read again for its new
// public address (DescribeInstances).
// Get: the instance by name and the settings, config and applied parameters with their first parts (one
// GetParameters).
// Delete: the instance by name, its termination and two polls until it is terminated, the proxy's own
// addresses looked up (DescribeAddresses, also without static_egress_ip: a replacement may have kept one)
// and released, the group looked up and deleted, and every parameter the proxy may have, the nine parts the
// config and the settings may each have among them, deleted in three calls of at most ten names.
var apiRequestCases = []struct {
	name                string
	static              bool
	create, get, delete calls
}{
	{
		name: "plain",
		create: calls{"ssm:GetParameter": 1, "ssm:GetParameters": 1, "ec2:DescribeInstances": 3, "ssm:PutParameter": 6,
			"ssm:AddTagsToResource": 4, "sts:GetCallerIdentity": 1,
			"ec2:DescribeSubnets": 1, "ec2:DescribeSecurityGroups": 1, "ec2:CreateSecurityGroup": 1,
			"ec2:AuthorizeSecurityGroupIngress": 1, "ec2:RunInstances": 1},
		get: calls{"ec2:DescribeInstances": 1, "ssm:GetParameters": 1},
		delete: calls{"ec2:DescribeInstances": 3, "ec2:TerminateInstances": 1, "ec2:DescribeAddresses": 1,
			"ec2:DescribeSecurityGroups": 1, "ec2:DeleteSecurityGroup": 1, "ssm:DeleteParameters": 3, "logs:DescribeLogGroups": 1},
	},
	{
		name: "static_egress_ip", static: true,
		create: calls{"ssm:GetParameter": 1, "ssm:GetParameters": 1, "ec2:DescribeInstances": 4, "ssm:PutParameter": 6,
			"ssm:AddTagsToResource": 4, "sts:GetCallerIdentity": 1,
			"ec2:DescribeSubnets": 1, "ec2:DescribeSecurityGroups": 1, "ec2:CreateSecurityGroup": 1,
			"ec2:AuthorizeSecurityGroupIngress": 1, "ec2:RunInstances": 1,
			"ec2:DescribeAddresses": 1, "ec2:AllocateAddress": 1, "ec2:AssociateAddress": 1},
		get: calls{"ec2:DescribeInstances": 1, "ssm:GetParameters": 1},
		delete: calls{"ec2:DescribeInstances": 3, "ec2:TerminateInstances": 1, "ec2:DescribeAddresses": 1, "ec2:ReleaseAddress": 1,
			"ec2:DescribeSecurityGroups": 1, "ec2:DeleteSecurityGroup": 1, "ssm:DeleteParameters": 3, "logs:DescribeLogGroups": 1},
	},
}

// opCalls makes, reads and deletes one proxy on a fake of its own, and returns each operation's calls by
// name ("create", "get", "delete"). It fails tb on an operation's error and on a request answered with an
// error (a retry, which the counts would hide).
func opCalls(tb testing.TB, static bool) map[string]calls {
	tb.Helper()
	fake, be := newBenchBackend(tb, ec2fake.Options{})
	m := &meter{fake: fake}
	ctx := context.Background()
	var id backend.ProviderID
	ops := []struct {
		name string
		run  func() error
	}{
		{"create", func() error {
			inst, err := be.Create(ctx, benchSpec(fake, testRegion, 0, static))
			id = inst.ID
			return err
		}},
		{"get", func() error { _, err := be.Get(ctx, id); return err }},
		{"delete", func() error { return be.Delete(ctx, id) }},
	}
	out := map[string]calls{}
	for _, op := range ops {
		if err := op.run(); err != nil {
			tb.Fatalf("%s: %v", op.name, err)
		}
		got, failed := m.take()
		if len(failed) > 0 {
			tb.Errorf("%s: %d requests answered with an error, first %s %s: %s", op.name, len(failed), failed[0].Service, failed[0].Action, failed[0].Code)
		}
		out[op.name] = got
	}
	return out
}

// checkOpCalls fails tb where the calls of the operation named name are not want.
func checkOpCalls(tb testing.TB, name string, got map[string]calls, want calls) {
	tb.Helper()
	if !maps.Equal(got[name], want) {
		tb.Errorf("%s made %d calls (%s), want %d (%s)", name, got[name].total(), got[name].per(1), want.total(), want.per(1))
	}
}

// BenchmarkAPIRequests reports the requests of a Create, a Get (a refresh) and a Delete of one proxy, with
// and without static_egress_ip, and fails when they are not apiRequestCases' or when any was answered with an
// error (a retry).
//
//	go test -run '^$' -bench APIRequests -benchtime 1x -v ./internal/backend/aws/
func BenchmarkAPIRequests(b *testing.B) {
	for _, tc := range apiRequestCases {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				got := opCalls(b, tc.static)
				for _, op := range []struct {
					name string
					want calls
				}{{"create", tc.create}, {"get", tc.get}, {"delete", tc.delete}} {
					report(b, op.name, got[op.name], 1)
					checkOpCalls(b, op.name, got, op.want)
				}
			}
		})
	}
}

// seedList starts a fake of benchRegions holding n proxies of owner "bench", spread over the regions, and a
// backend of all three.
func seedList(tb testing.TB, n int) (*ec2fake.Server, *Backend) {
	tb.Helper()
	fake, be := newBenchBackend(tb, ec2fake.Options{Regions: benchRegions, MaxInstances: n, MaxVCPUs: n * defaultInstanceVCPUs})
	specs := make([]backend.Spec, n)
	for i := range specs {
		specs[i] = benchSpec(fake, benchRegions[i%len(benchRegions)], i, false)
	}
	createAll(tb, be, specs, 10)
	return fake, be
}

// listCalls lists the n proxies of owner "bench" and checks the design's count: one DescribeInstances, one
// DescribeSecurityGroups, one DescribeAddresses and one DescribeLogGroups (for the leftovers of unfinished
// creates, of replacements and of the proxies' own log groups) in each of benchRegions (a page holds listPageSize) and nothing else, the settings not read. It
// returns the calls by action and the DescribeInstances by region.
func listCalls(tb testing.TB, fake *ec2fake.Server, be *Backend, n int) (calls, map[string]int) {
	tb.Helper()
	m := &meter{fake: fake, seen: len(fake.Requests())}
	got, err := be.ListByTag(context.Background(), backend.Selector{Owner: "bench"})
	if err != nil || len(got) != n {
		tb.Fatalf("ListByTag = %d instances, %v; want %d", len(got), err, n)
	}
	perRegion := map[string]int{}
	for _, r := range fake.Requests()[m.seen:] {
		if r.Service == "ec2" && r.Action == "DescribeInstances" {
			perRegion[r.Region]++
		}
	}
	all, failed := m.take()
	want := map[string]int{}
	for _, region := range benchRegions {
		want[region] = 1
	}
	if !maps.Equal(perRegion, want) || all["ec2:DescribeSecurityGroups"] != len(benchRegions) || all["ec2:DescribeAddresses"] != len(benchRegions) ||
		all["logs:DescribeLogGroups"] != len(benchRegions) || all.total() != 4*len(benchRegions) || len(failed) > 0 {
		tb.Errorf("ListByTag of %d proxies made %s (DescribeInstances by region %v, %d answered with an error), want one DescribeInstances, DescribeSecurityGroups, DescribeAddresses and DescribeLogGroups in each of %v and nothing else",
			n, all.per(1), perRegion, len(failed), benchRegions)
	}
	return all, perRegion
}

// BenchmarkListByTag200In3Regions lists 200 proxies spread over three regions: one DescribeInstances, one
// DescribeSecurityGroups, one DescribeAddresses and one DescribeLogGroups a region, side by side, and nothing else. It fails on any other count.
//
//	go test -run '^$' -bench ListByTag200In3Regions -benchtime 1x -v ./internal/backend/aws/
func BenchmarkListByTag200In3Regions(b *testing.B) {
	const n = 200
	fake, be := seedList(b, n)
	for b.Loop() {
		all, perRegion := listCalls(b, fake, be, n)
		for _, region := range benchRegions {
			b.ReportMetric(float64(perRegion[region]), "DescribeInstances/"+region)
		}
		b.ReportMetric(float64(all.total()), "calls/list")
		b.Logf("ListByTag of %d proxies in %d regions: %d calls (%s)", n, len(benchRegions), all.total(), all.per(1))
	}
}

// The counts BenchmarkAPIRequests and BenchmarkListByTag200In3Regions check, checked on every test run as
// well: each operation's calls, and a list's one DescribeInstances a region (over a few proxies here; the
// benchmark lists 200, which takes seconds under the race detector).
func TestRequestCounts(t *testing.T) {
	t.Parallel()
	for _, tc := range apiRequestCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := opCalls(t, tc.static)
			checkOpCalls(t, "create", got, tc.create)
			checkOpCalls(t, "get", got, tc.get)
			checkOpCalls(t, "delete", got, tc.delete)
		})
	}
	t.Run("ListByTag", func(t *testing.T) {
		t.Parallel()
		const n = 6
		fake, be := seedList(t, n)
		listCalls(t, fake, be, n)
	})
	for name, tc := range checkCallCases {
		t.Run("Check/"+name, func(t *testing.T) {
			t.Parallel()
			if got := checkCalls(t, tc.deny); !maps.Equal(got, tc.want) {
				t.Errorf("Check made %d calls in its region (%s), want %d (%s)", got.total(), got.per(1), tc.want.total(), tc.want.per(1))
			}
		})
	}
}

// checkCallCases are Check's requests in one region: the caller's identity, the three quotas (On-Demand and
// Spot vCPUs, Elastic IPs), the vCPUs in use (one page of DescribeInstances) and the Elastic IPs allocated;
// without servicequotas:GetServiceQuota, the first quota's refusal and the account attributes instead. Before
// Check read Service Quotas it made 3: GetCallerIdentity, DescribeAccountAttributes, DescribeAddresses.
var checkCallCases = map[string]struct {
	deny bool
	want calls
}{
	"service quotas": {want: withProbes(calls{"sts:GetCallerIdentity": 1, "servicequotas:GetServiceQuota": 3, "ec2:DescribeInstances": 1, "ec2:DescribeAddresses": 1})},
	"denied": {deny: true, want: withProbes(calls{"sts:GetCallerIdentity": 1, "servicequotas:GetServiceQuota": 1, "ec2:DescribeAccountAttributes": 1,
		"ec2:DescribeInstances": 1, "ec2:DescribeAddresses": 1})},
}

// withProbes adds the requests of Check's permission probes (probe.go): Debian's image parameter and the
// dry run of a launch, of a security group and of an Elastic IP, of the subnet and group reads, the reads
// of a proxy's parameters and their tags, and the list of log groups.
func withProbes(c calls) calls {
	for _, a := range []string{"ssm:GetParameter", "ec2:RunInstances", "ec2:CreateSecurityGroup", "ec2:AllocateAddress", "ec2:DescribeSubnets",
		"ec2:DescribeSecurityGroups", "ssm:GetParameters", "ssm:ListTagsForResource", "logs:DescribeLogGroups"} {
		c[a]++
	}
	return c
}

// probeAnswers are the errors a permission probe answers when the caller may do what it asks.
var probeAnswers = map[string]string{"RunInstances": "DryRunOperation", "CreateSecurityGroup": "DryRunOperation", "AllocateAddress": "DryRunOperation",
	"DescribeSubnets": "DryRunOperation", "DescribeSecurityGroups": "DryRunOperation", "ListTagsForResource": "InvalidResourceId"}

// checkCalls checks one region, its Service Quotas denied or not, and returns the calls. It fails tb when the
// region is not healthy, or when a request other than the denied quota was answered with an error (a retry).
func checkCalls(tb testing.TB, deny bool) calls {
	tb.Helper()
	fake, be := newBenchBackend(tb, ec2fake.Options{Regions: []string{testRegion}})
	if deny {
		fake.Deny("servicequotas:GetServiceQuota")
	}
	m := &meter{fake: fake}
	// Denied, the documented permission is missing: Degraded, and the check made all the same.
	if h := be.Check(context.Background()); len(h) != 1 || h[0].Healthy == deny {
		tb.Fatalf("Check = %+v, want %s healthy unless Service Quotas is denied", h, testRegion)
	}
	got, failed := m.take()
	for _, r := range failed {
		if probeAnswers[r.Action] != r.Code && (!deny || r.Action != "GetServiceQuota" || r.Code != "AccessDeniedException") {
			tb.Errorf("%s %s answered %s", r.Service, r.Action, r.Code)
		}
	}
	return got
}

// idealCreate is the fewest calls a Create can make, read off the design: the default AMI read from Debian's
// public parameter (1 GetParameter), the name looked up (1 DescribeInstances), the three parameters made with
// their tags (3 PutParameter), the subnet's VPC (1
// DescribeSubnets), the group looked up, made and opened to the clients (1 DescribeSecurityGroups, 1
// CreateSecurityGroup, 1 AuthorizeSecurityGroupIngress), the launch (1 RunInstances), DescribeInstances until
// it runs (1 at least, whose answer is the instance read back; with the fake's default timing another
// create's poll in the region may have moved it on), and the settings read back (1 GetParameter).
const idealCreate = 12

// BenchmarkCreate50Concurrency10 makes 50 proxies in one region, 10 at a time, as Terraform's default
// parallelism does, and reports the calls per create against idealCreate. Creates side by side must make no
// call one alone would not: it fails above apiRequestCases' count for one create alone (which has its two
// polls) or below the ideal, and on any request answered with an error (a retry).
//
//	go test -run '^$' -bench Create50Concurrency10 -benchtime 1x -v ./internal/backend/aws/
func BenchmarkCreate50Concurrency10(b *testing.B) {
	const n, parallel = 50, 10
	alone := apiRequestCases[0].create.total()
	for b.Loop() {
		fake, be := newBenchBackend(b, ec2fake.Options{MaxInstances: n, MaxVCPUs: n * defaultInstanceVCPUs})
		specs := make([]backend.Spec, n)
		for i := range specs {
			specs[i] = benchSpec(fake, testRegion, i, false)
		}
		createAll(b, be, specs, parallel)
		m := &meter{fake: fake}
		got, failed := m.take()
		perCreate := float64(got.total()) / n
		b.ReportMetric(perCreate, "calls/create")
		b.ReportMetric(perCreate/idealCreate, "x-ideal")
		b.Logf("%d creates, %d at a time: %.2f calls a create, ideal %d (%s)", n, parallel, perCreate, idealCreate, got.per(n))
		if got.total() > n*alone || got.total() < n*idealCreate {
			b.Errorf("%d creates made %d calls, want between %d (the ideal) and %d (each as many as one alone)", n, got.total(), n*idealCreate, n*alone)
		}
		if len(failed) > 0 {
			b.Errorf("%d requests answered with an error, first %s %s: %s", len(failed), failed[0].Service, failed[0].Action, failed[0].Code)
		}
	}
}
