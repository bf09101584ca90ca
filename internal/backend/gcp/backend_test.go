package gcp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/secretmanagerfake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

const testProject = "egress-test"

// newTest starts a fake and a backend that talks to it through the real REST client. Polls are short because
// the fake answers at once; nothing waits on a clock to pass except what the fake's latency asks for.
func newTest(t *testing.T, opts computefake.Options) (*computefake.Server, *Backend) {
	t.Helper()
	fake, _, b := newTestWithSecrets(t, opts)
	return fake, b
}

// newTestWithSecrets is newTest with the Secret Manager fake beside the Compute fake; both take the
// provider's token (the Compute fake checks it only when opts.Token sets one).
func newTestWithSecrets(t *testing.T, opts computefake.Options) (*computefake.Server, *secretmanagerfake.Server, *Backend) {
	t.Helper()
	token := opts.Token
	if token == "" {
		token = "provider-token"
	}
	// The provider's account holds exactly the documented role on both APIs, unless the test says what it
	// holds (permissions_test.go).
	if opts.Permissions == nil {
		opts.Permissions = documentedPermissions(t)
	}
	secrets := secretmanagerfake.New(secretmanagerfake.Options{AdminToken: token, AdminPermissions: opts.Permissions})
	t.Cleanup(secrets.Close)
	// A VM's metadata server hands it the token Secret Manager takes for its account.
	opts.ServiceAccountToken = secrets.ServiceAccountToken
	fake := computefake.New(opts)
	t.Cleanup(fake.Close)
	b, err := New(Config{
		DefaultProject: testProject,
		ProjectConfig: ProjectConfig{ComputeEndpoint: fake.URL, SecretManagerEndpoint: secrets.URL, AccessToken: token,
			ResourceManagerEndpoint: fake.URL}, // the Compute fake serves testIamPermissions too
	})
	if err != nil {
		t.Fatal(err)
	}
	b.pollInitial, b.pollMax = time.Millisecond, 50*time.Millisecond
	// Guest polls start as short; the ration of guest attribute queries per VM stays the real one.
	b.guestPollInitial, b.guestPollMax = time.Millisecond, 50*time.Millisecond
	b.retry = backend.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond, Factor: 2}
	t.Cleanup(func() { _ = b.Close() })
	return fake, secrets, b
}

func testSpec(uid, zone string) backend.Spec {
	return backend.Spec{
		Name: backend.NameFromUID(uid), UID: uid, Owner: "owner-a", Labels: map[string]string{"team": "net"},
		Placement: backend.Placement{Backend: Kind, Target: testProject, Scope: zone, Options: &Options{}},
		Proxy: proxyconf.Settings{
			Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{".example.com"},
			Users: []proxyconf.BasicAuth{{Username: "u", Password: "correct-horse-battery"}},
		},
	}
}

// ctxT bounds a test's calls. Not tightly: guest polls keep the real ration (8 queries a minute per VM), and
// the test guest reports from a goroutine of its own, late on a loaded machine, so a test that waits for many
// configs of one VM (TestReconfigureClientCA: seven) can spend its ration and wait out the minute more than
// once. With a 2-minute bound that test gave up after 64 s in a run beside make test.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestCreateGetUpdateDeleteWithStaticAddress(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, computefake.Options{})
	ctx := ctxT(t)
	spec := testSpec("uid-1", "us-central1-a")
	optionsOf(spec.Placement).StaticEgressIP = true
	optionsOf(spec.Placement).NetworkTags = []string{"egress-proxy"}

	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	addr := fake.Address(testProject, "us-central1", spec.Name+"-ip")
	if addr == nil || addr.GetStatus() != "IN_USE" {
		t.Fatalf("reserved address = %v, want IN_USE", addr)
	}
	if inst.State != backend.StateRunning || inst.EgressAddress != addr.GetAddress() || inst.InternalAddress == "" {
		t.Fatalf("created %+v, want Running with egress %s", inst, addr.GetAddress())
	}
	if inst.UID != "uid-1" || inst.Owner != "owner-a" || inst.CreatedAt.IsZero() || !inst.Reconfigurable {
		t.Fatalf("created %+v: identity or CreatedAt or Reconfigurable missing", inst)
	}
	if g := optionsOf(inst.Placement); g.MachineType != DefaultMachineType || g.Image != DefaultImage || !g.StaticEgressIP || g.NetworkTags[0] != "egress-proxy" {
		t.Fatalf("placement read back = %+v", g)
	}
	if inst.Proxy == nil || len(inst.Proxy.Users) != 1 || inst.Proxy.Users[0].Password != "" || inst.Proxy.Users[0].Username != "u" {
		t.Fatalf("proxy settings read back = %+v, want the username and no password", inst.Proxy)
	}
	stored := fake.Instance(testProject, "us-central1-a", spec.Name)
	for _, k := range []string{gcpguest.MetadataStartupScript, gcpguest.MetadataUserData, gcpguest.MetadataSquidConf, gcpguest.MetadataHtpasswd, gcpguest.MetadataConfigID, gcpguest.MetadataBackstop} {
		if v, ok := metadataValue(stored, k); !ok || v == "" {
			t.Errorf("metadata %s missing", k)
		}
	}
	if v, _ := metadataValue(stored, metadataSpec); strings.Contains(v, "correct-horse") {
		t.Error("the password reached the metadata in clear")
	}

	spec.Labels = map[string]string{"team": "sec", "env": "prod"}
	got, err := b.Update(ctx, inst.ID, spec)
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["team"] != "sec" || got.Labels["env"] != "prod" || len(got.Labels) != 2 {
		t.Fatalf("labels after update = %v", got.Labels)
	}
	if fake.Instance(testProject, "us-central1-a", spec.Name).GetLabels()[backend.LabelUID] != "uid-1" {
		t.Fatal("update lost the bookkeeping labels")
	}

	if err := b.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if fake.Instance(testProject, "us-central1-a", spec.Name) != nil || fake.Address(testProject, "us-central1", spec.Name+"-ip") != nil {
		t.Fatal("delete left the instance or its reserved address behind")
	}
	if _, err := b.Get(ctx, inst.ID); !backend.IsNotFound(err) {
		t.Fatalf("Get after delete = %v, want NotFound", err)
	}
	if err := b.Delete(ctx, inst.ID); err != nil {
		t.Fatalf("second delete = %v, want nil", err)
	}
}

// A lost answer to the insert (the VM was made, the client saw a 503) is retried, answered 409, and adopted.
func TestCreateAdoptsAfterLostAnswer(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, computefake.Options{})
	fake.AddFault(computefake.Fault{Method: http.MethodPost, PathRE: regexp.MustCompile(`/instances$`), After: true, Times: 1, Status: 503})
	spec := testSpec("uid-lost", "us-central1-b")
	if _, err := b.Create(ctxT(t), spec); err != nil {
		t.Fatal(err)
	}
	if n := fake.Count(http.MethodPost, `/instances$`); n != 2 {
		t.Fatalf("inserts = %d, want 2 (the lost one and the retry that found it)", n)
	}
	if n := len(fake.Instances()); n != 1 {
		t.Fatalf("instances = %d, want 1", n)
	}
}

func TestCreateRefusesSomeoneElsesInstance(t *testing.T) {
	t.Parallel()
	_, b := newTest(t, computefake.Options{})
	ctx := ctxT(t)
	first := testSpec("uid-a", "us-central1-a")
	if _, err := b.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	second := testSpec("uid-b", "us-central1-a")
	second.Name = first.Name
	_, err := b.Create(ctx, second)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "uid-a") {
		t.Fatalf("Create over another proxy's instance = %v, want Permanent naming uid-a", err)
	}
}

func TestCreateQuotaErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		setup func(*computefake.Server)
		want  string
	}{
		"CPU quota":        {func(f *computefake.Server) { f.SetQuota("us-central1", "CPUS", 1) }, "CPUS"},
		"zone exhausted":   {func(f *computefake.Server) { f.ExhaustZone("us-central1-a", true) }, "ZONE_RESOURCE_POOL_EXHAUSTED"},
		"address quota":    {func(f *computefake.Server) { f.SetQuota("us-central1", "STATIC_ADDRESSES", 0) }, "STATIC_ADDRESSES"},
		"instances quota ": {func(f *computefake.Server) { f.SetQuota("us-central1", "INSTANCES", 0) }, "INSTANCES"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, computefake.Options{})
			tc.setup(fake)
			spec := testSpec("uid-q", "us-central1-a")
			optionsOf(spec.Placement).StaticEgressIP = true
			inst, err := b.Create(ctxT(t), spec)
			if backend.ClassOf(err) != backend.ClassQuota || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Create = %v, want Quota naming %s", err, tc.want)
			}
			if inst.ID != (backend.ProviderID{}) || len(fake.Instances()) != 0 {
				t.Fatal("a refused create left an instance")
			}
			if fake.Address(testProject, "us-central1", spec.Name+"-ip") != nil {
				t.Fatal("a refused create left its reserved address")
			}
		})
	}
}

// 30% of all requests fail with 503, 429 or a dropped connection: every create still converges, with one
// instance each.
func TestCreateConvergesUnderInjectedFaults(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, computefake.Options{OperationLatency: 0})
	fake.AddFault(computefake.Fault{Rate: 0.1, Seed: 1, Status: 503})
	fake.AddFault(computefake.Fault{Rate: 0.12, Seed: 2, Status: 429, Reason: "rateLimitExceeded"})
	fake.AddFault(computefake.Fault{Rate: 0.1, Seed: 3, Drop: true})
	fake.AddFault(computefake.Fault{Method: http.MethodPost, Rate: 0.2, Seed: 4, After: true})
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec := testSpec("uid-f"+string(rune('a'+i)), []string{"us-central1-a", "us-central1-b"}[i%2])
			optionsOf(spec.Placement).StaticEgressIP = i%2 == 0
			_, errs[i] = b.Create(ctx, spec)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Instances()); n != 8 {
		t.Fatalf("instances = %d, want 8", n)
	}
	if fake.Fired() == 0 {
		t.Fatal("no fault fired: the test proves nothing")
	}
}

func TestGetClassifies(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, computefake.Options{})
	ctx := ctxT(t)
	id := backend.ProviderID{Backend: Kind, Target: testProject, Scope: "us-central1-a", Name: "egress-missing"}
	if _, err := b.Get(ctx, id); !backend.IsNotFound(err) || !strings.Contains(err.Error(), "egress-missing") {
		t.Fatalf("Get of a missing instance = %v, want NotFound naming it", err)
	}
	other := id
	other.Target = "not-configured"
	if _, err := b.Get(ctx, other); backend.ClassOf(err) != backend.ClassPermanent {
		t.Fatalf("Get in an unconfigured project = %v, want Permanent", err)
	}
	inst, err := b.Create(ctx, testSpec("uid-s", "us-central1-a"))
	if err != nil {
		t.Fatal(err)
	}
	for status, want := range map[string]backend.State{"TERMINATED": backend.StateStopped, "STAGING": backend.StatePending, "SUSPENDED": backend.StateStopped, "RUNNING": backend.StateRunning} {
		fake.SetInstanceStatus(testProject, "us-central1-a", inst.Name, status)
		got, err := b.Get(ctx, inst.ID)
		if err != nil || got.State != want {
			t.Errorf("status %s: Get = %v, %v, want %s", status, got.State, err, want)
		}
	}
}

func TestListByTagOneAggregatedCall(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, computefake.Options{})
	ctx := ctxT(t)
	for i, zone := range []string{"us-central1-a", "us-central1-b", "europe-west1-b"} {
		if _, err := b.Create(ctx, testSpec("uid-l"+string(rune('a'+i)), zone)); err != nil {
			t.Fatal(err)
		}
	}
	foreign := testSpec("uid-other", "us-central1-a")
	foreign.Owner = "owner-b"
	if _, err := b.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	fake.ResetLog()
	got, err := b.ListByTag(ctx, backend.Selector{Owner: "owner-a"})
	if err != nil || len(got) != 3 {
		t.Fatalf("ListByTag = %d instances, %v; want 3", len(got), err)
	}
	// The forwarding rules' list finds the load balancers of proxies of several VMs (ha.go), whatever is left.
	if n, lists := len(fake.Requests()), fake.Count(http.MethodGet, `/aggregated/(instances|addresses|forwardingRules)$`); n != 3 || lists != 3 {
		t.Fatalf("requests = %d (%d aggregated lists), want one aggregatedList each of instances, addresses and forwarding rules", n, lists)
	}
	fake.BreakZone("europe-west1-b", "UNREACHABLE")
	got, err = b.ListByTag(ctx, backend.Selector{Owner: "owner-a"})
	var le *backend.ListError
	if !errors.As(err, &le) || len(le.Failed) != 1 || !strings.Contains(le.Failed[0].Scope, "europe-west1-b") || len(got) != 2 {
		t.Fatalf("ListByTag with a broken zone = %d, %v; want 2 and the zone named", len(got), err)
	}
}

// newTestWithGuest is newTest with a guest that answers every metadata change the backend makes.
func newTestWithGuest(t *testing.T) (*computefake.Server, *Backend, *guest) {
	t.Helper()
	g := &guest{}
	fake, b := newTest(t, computefake.Options{OnOperationDone: func(op, target string) { g.onDone(op, target) }})
	g.url = fake.URL
	return fake, b, g
}

// guest plays the guest environment through the fake's metadata server paths: after each metadata change it
// reads the config id and reports it applied, or refused when refuse says so.
type guest struct {
	url    string
	refuse func(squidConf string) bool
}

func (g guest) onDone(opType, _ string) {
	if opType != "setMetadata" && opType != "insert" {
		return
	}
	get := func(key string) string {
		req, _ := http.NewRequest(http.MethodGet, g.url+"/computeMetadata/v1/instance/attributes/"+key, nil)
		req.Header.Set("Metadata-Flavor", "Google")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return ""
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	id, conf := get(gcpguest.MetadataConfigID), get(gcpguest.MetadataSquidConf)
	key, value := gcpguest.GuestAttributeApplied, id
	if g.refuse != nil && g.refuse(conf) {
		key, value = gcpguest.GuestAttributeError, "squid rejected config "+id
	}
	req, _ := http.NewRequest(http.MethodPut, g.url+"/computeMetadata/v1/instance/guest-attributes/egress/"+key, strings.NewReader(value))
	req.Header.Set("Metadata-Flavor", "Google")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_ = resp.Body.Close()
	}
}

func TestReconfigureInPlace(t *testing.T) {
	t.Parallel()
	fake, b, g := newTestWithGuest(t)
	g.refuse = func(conf string) bool { return strings.Contains(conf, "refused.example") }
	ctx := ctxT(t)
	spec := testSpec("uid-r", "us-central1-a")
	fake.MetadataInstance(testProject, "us-central1-a", spec.Name)
	optionsOf(spec.Placement).WaitForProxy = true
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	before := fake.Instance(testProject, "us-central1-a", spec.Name)

	next := spec.Proxy
	next.AllowedDestinations = []string{".example.org"}
	got, err := b.Reconfigure(ctx, inst.ID, next)
	if err != nil {
		t.Fatal(err)
	}
	after := fake.Instance(testProject, "us-central1-a", spec.Name)
	if after.GetId() != before.GetId() || got.EgressAddress != inst.EgressAddress {
		t.Fatal("reconfigure replaced the instance or its address")
	}
	if conf, _ := metadataValue(after, gcpguest.MetadataSquidConf); !strings.Contains(conf, ".example.org") {
		t.Fatal("the new rules did not reach the metadata")
	}
	if got.Proxy == nil || got.Proxy.AllowedDestinations[0] != ".example.org" {
		t.Fatalf("settings read back = %+v", got.Proxy)
	}

	fake.ResetLog()
	if _, err := b.Reconfigure(ctx, inst.ID, next); err != nil {
		t.Fatal(err)
	}
	if n := fake.Count(http.MethodPost, `/setMetadata$`); n != 0 {
		t.Fatalf("the same settings again sent %d setMetadata, want 0", n)
	}

	bad := next
	bad.AllowedDestinations = []string{"refused.example"}
	if _, err := b.Reconfigure(ctx, inst.ID, bad); backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("Reconfigure refused by the guest = %v, want Permanent", err)
	}
	missing := inst.ID
	missing.Name = "egress-gone"
	if _, err := b.Reconfigure(ctx, missing, next); !backend.IsNotFound(err) {
		t.Fatalf("Reconfigure of a missing instance = %v, want NotFound", err)
	}
}

// The TLS listener's certificate and key reach the guest as metadata keys of their own, named by the config id
// (a new certificate is a new config), and go from the metadata when a config has no TLS.
func TestTLSFilesInMetadata(t *testing.T) {
	t.Parallel()
	fake, b, _ := newTestWithGuest(t)
	ctx := ctxT(t)
	spec := testSpec("uid-tls", "us-central1-a")
	fake.MetadataInstance(testProject, "us-central1-a", spec.Name)
	cert1, key1 := testutil.SelfSignedPEM(t, "proxy.test")
	cert2, key2 := testutil.SelfSignedPEM(t, "proxy.test")
	spec.Proxy.TLS = &proxyconf.TLSSettings{CertificatePEM: cert1, PrivateKeyPEM: key1}
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, step := range []struct {
		name        string
		tls         *proxyconf.TLSSettings
		cert, key   string
		reconfigure bool
	}{
		{name: "created with tls", tls: spec.Proxy.TLS, cert: cert1, key: key1},
		{name: "new certificate", tls: &proxyconf.TLSSettings{CertificatePEM: cert2, PrivateKeyPEM: key2}, cert: cert2, key: key2, reconfigure: true},
		{name: "tls removed", reconfigure: true},
	} {
		if step.reconfigure {
			next := spec.Proxy
			next.TLS = step.tls
			if _, err := b.Reconfigure(ctx, inst.ID, next); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
		}
		stored := fake.Instance(testProject, "us-central1-a", spec.Name)
		cert, hasCert := metadataValue(stored, gcpguest.MetadataTLSCert)
		key, hasKey := metadataValue(stored, gcpguest.MetadataTLSKey)
		if cert != step.cert || key != step.key || hasCert != (step.cert != "") || hasKey != (step.key != "") {
			t.Errorf("%s: metadata holds certificate %v and key %v, not the ones asked for", step.name, hasCert, hasKey)
		}
		conf, _ := metadataValue(stored, gcpguest.MetadataSquidConf)
		pass, _ := metadataValue(stored, gcpguest.MetadataHtpasswd)
		id, _ := metadataValue(stored, gcpguest.MetadataConfigID)
		backstop, _ := metadataValue(stored, gcpguest.MetadataBackstop)
		if want := vmguest.ConfigID([]byte(conf), []byte(pass), []byte(cert), []byte(key), []byte(backstop)); id != want {
			t.Errorf("%s: config id %s, want %s (the id must cover the TLS files)", step.name, id, want)
		}
		if ids[id] {
			t.Errorf("%s: config id %s was used by an earlier step", step.name, id)
		}
		ids[id] = true
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, computefake.Options{})
	h := b.Check(ctxT(t))
	if len(h) != 1 || !h[0].Healthy || h[0].Reason != backend.HealthHealthy || h[0].Details["quota_CPUS"] != "0/24" {
		t.Fatalf("Check = %+v, want healthy with CPU quota 0/24", h)
	}
	fake.SetQuota("us-central1", "CPUS", 1)
	if h := b.Check(ctxT(t)); h[0].Healthy || h[0].Reason != backend.HealthDegraded || !strings.Contains(h[0].Details[backend.DetailMessage], "CPUS") {
		t.Fatalf("Check without CPU headroom = %+v, want unhealthy naming CPUS", h)
	}

	_, wrong := newTest(t, computefake.Options{Token: "right"})
	wrong.projects[testProject].settings.AccessToken = "wrong"
	if h := wrong.Check(ctxT(t)); h[0].Healthy || h[0].Reason != backend.HealthUnauthorized || !strings.Contains(h[0].Details[backend.DetailMessage], "authentication") {
		t.Fatalf("Check with a wrong token = %+v, want unhealthy saying why", h)
	}
}
