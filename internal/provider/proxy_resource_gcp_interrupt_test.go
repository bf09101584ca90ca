package provider

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/secretmanagerfake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// kill -9 in the middle of the gcp create of a proxy of three VMs (proxy_resource_aws_interrupt_test.go does
// it on aws, and its provider process serves here too): each object the killed create made must be adopted
// by the next apply of the configuration or belong to a proxy that egress_proxy_orphans lists, and the
// listed proxy's id must delete it whole; what is neither is a leak.
//
// The create (internal/backend/gcp/ha.go, createHA) inserts the three VMs side by side (NAME-1 in the
// placement's zone, NAME-2 and NAME-3 in the region's next zones), waits until they run, then makes an
// instance group in each zone and adds its VM, then the health check, the backend service and the
// forwarding rule, each awaited through its operation. The fake finishes an operation at once, so a request
// held after the fake handled it has made its object.

// gcpKillPoint is where the create of a proxy of three VMs dies.
type gcpKillPoint struct {
	name string
	// holds are the requests held when the provider process is killed: the point is reached once each
	// waits. A request held before the fake handled it is never handled; one held after keeps its change.
	holds []gcpHold
	// leaksUnnamed and leaksNamed are the objects, by kind, that a kill here leaves and that the next apply
	// does not adopt and no orphan list shows, for a proxy named after its UID (name unset) or with a name.
	leaksUnnamed, leaksNamed []string
}

// gcpHold selects one request of the create: its method, a regular expression of its path, and whether
// it is held after the fake handled it.
type gcpHold struct {
	method, path string
	after        bool
}

var gcpKillPoints = []gcpKillPoint{
	{
		name: "the first VM inserted, its answer lost, the two others' inserts in flight",
		holds: []gcpHold{
			{"POST", `/zones/us-central1-a/instances$`, true},
			{"POST", `/zones/us-central1-b/instances$`, false},
			{"POST", `/zones/us-central1-c/instances$`, false},
		},
	},
	{name: "the VMs running, the second zone's group made, its answer lost", holds: []gcpHold{{"POST", `/zones/us-central1-b/instanceGroups$`, true}}},
	{name: "the groups and the health check made, no backend service", holds: []gcpHold{{"POST", `/regions/us-central1/backendServices$`, false}}},
	{name: "the forwarding rule made, its answer lost", holds: []gcpHold{{"POST", `/regions/us-central1/forwardingRules$`, true}}},
}

func TestAccProxyGCP_killedApplyOfSeveral(t *testing.T) {
	inProcess := serveForKillTests(t)
	for _, kp := range gcpKillPoints {
		for _, named := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, name %s", kp.name, map[bool]string{true: "set", false: "unset"}[named]), func(t *testing.T) {
				testGCPKilledApply(t, inProcess, kp, named)
			})
		}
	}
}

// gcpKillEnv is the fakes a kill test runs against, and the provider block that reaches them.
type gcpKillEnv struct {
	fake     *computefake.Server
	secrets  *secretmanagerfake.Server
	provider string
}

func testGCPKilledApply(t *testing.T, inProcess string, kp gcpKillPoint, named bool) {
	env := gcpKillEnv{fake: gcpFake(t)}
	env.secrets = secretmanagerfake.New(secretmanagerfake.Options{AdminToken: "acc-token", AdminPermissions: gcpDocumentedRole(t)})
	t.Cleanup(env.secrets.Close)
	env.provider = gcpProviderWithSecrets(env.fake, env.secrets.URL, "us-central1-a")
	name := ""
	if named {
		name = `name = "egress-acc"`
	}
	cli := newAWSCLI(t, env.provider+fmt.Sprintf(`
resource "egress_proxy" "test" {
  %s
  gcp                  = { instances = 3 }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]
}
`, name))
	cli.mustRun(inProcess, "init")
	made := gcpKilledApply(cli, env.fake, kp)
	if id, _, _ := cli.stateProxy(inProcess); id != "" {
		t.Fatalf("the killed apply recorded %s: the test needs a kill before anything is recorded", id)
	}
	wantLeaks := kp.leaksUnnamed
	if named {
		wantLeaks = kp.leaksNamed
	}
	leaked := gcpRecoverAfterKill(cli, env, inProcess, made, named, wantLeaks)
	cli.mustRun(inProcess, "destroy", "-auto-approve")
	var left []string
	for key, o := range gcpObjects(t, env.fake) {
		if !leaked[key] {
			left = append(left, fmt.Sprintf("%s %s (%s)", o.kind, o.id, o.name))
		}
	}
	if len(left) > 0 {
		t.Errorf("after deleting the orphans and destroying, left behind: %v", left)
	}
}

// gcpKilledApply runs an apply against a provider process of its own until the fake holds the point's
// requests, kills the process and the CLI with SIGKILL, then lets the fake drop the held requests. It
// returns the fake's proxy objects then.
func gcpKilledApply(c *awsCLI, fake *computefake.Server, kp gcpKillPoint) map[string]gcpObject {
	t := c.t
	t.Helper()
	var pauses []*computefake.Pause
	for _, h := range kp.holds {
		pauses = append(pauses, fake.PauseNext(h.method, regexp.MustCompile(h.path), h.after))
	}
	killApplyAt(c, func() {
		for _, p := range pauses {
			<-p.Reached()
		}
	}, false)
	// The held requests' client is gone: one held before the fake handled it is never handled, one held
	// after keeps its change.
	for _, p := range pauses {
		p.Drop()
	}
	made := gcpObjects(t, fake)
	if len(made) == 0 {
		t.Fatal("the killed apply left nothing: the point is too early to test anything")
	}
	var inventory []string
	for _, o := range made {
		inventory = append(inventory, fmt.Sprintf("%s %s (%s, uid %s)", o.kind, o.id, o.name, o.uid))
	}
	slices.Sort(inventory)
	t.Logf("killed at %q, the fake holds:\n  %s", kp.name, strings.Join(inventory, "\n  "))
	return made
}

// killApplyAt runs an apply of c's configuration against a provider process of its own until reached
// returns (the fake holds the point's requests), then kills the CLI with SIGKILL, and the provider process
// too unless cliOnly: nothing more is sent by what dies, nothing is recorded. It returns the provider process,
// alive when cliOnly.
func killApplyAt(c *awsCLI, reached func(), cliOnly bool) *providerProcess {
	t := c.t
	t.Helper()
	provider := startProviderProcess(t)
	var out testutil.LockedBuffer
	apply := c.cmd(provider.reattach, "apply", "-auto-approve")
	apply.Stdout, apply.Stderr = &out, &out
	if err := apply.Start(); err != nil {
		t.Fatal(err)
	}
	applied := make(chan error, 1)
	go func() { applied <- apply.Wait() }()
	at := make(chan struct{})
	go func() { reached(); close(at) }()
	select {
	case <-at:
	case err := <-applied:
		t.Fatalf("the apply ended (%v) before it reached the point:\n%s\nthe provider's stderr:\n%s", err, out.String(), provider.stderr.String())
	case <-time.After(2 * time.Minute):
		_ = apply.Process.Kill()
		t.Fatalf("the apply did not reach the point in 2 minutes:\n%s", out.String())
	}
	if !cliOnly {
		provider.kill()
	}
	_ = apply.Process.Signal(syscall.SIGKILL)
	if err := <-applied; err == nil {
		t.Fatalf("the apply killed at the point exited 0:\n%s", out.String())
	}
	return provider
}

// gcpObject is one object of the Compute fake that a proxy is made of.
type gcpObject struct {
	kind, id string
	// name and uid are the proxy's it carries: in its labels (VMs, addresses) or its description (the load
	// balancer's objects, whose forwarding rule has both).
	name, uid string
}

// gcpHADescriptionRE reads a load balancer object's description (gcp.haDescription).
var gcpHADescriptionRE = regexp.MustCompile(`^egress proxy ([a-z0-9-]+) in [a-z0-9-]+, uid (\S*), owner`)

// gcpObjects lists the fake's proxy objects: VMs, addresses, instance groups, health checks, backend services
// and forwarding rules.
func gcpObjects(t *testing.T, fake *computefake.Server) map[string]gcpObject {
	t.Helper()
	out := map[string]gcpObject{}
	add := func(o gcpObject) { out[o.kind+" "+o.id] = o }
	for _, in := range fake.Instances() {
		l := in.GetLabels()
		add(gcpObject{"VM", lastPathElements(in.GetZone(), 1) + "/" + in.GetName(), l[backend.LabelName], l[backend.LabelUID]})
	}
	for _, a := range fake.Addresses() {
		l := a.GetLabels()
		add(gcpObject{"address", lastPathElements(a.GetRegion(), 1) + "/" + a.GetName(), l[backend.LabelName], l[backend.LabelUID]})
	}
	for _, o := range fake.LoadBalancerObjects() {
		kind, where, _ := strings.Cut(o, " ")
		parts := strings.Split(where, "/") // project/scope/name
		if len(parts) != 3 {
			t.Fatalf("the fake names a load balancer object %q", o)
		}
		project, scope, name := parts[0], parts[1], parts[2]
		var desc string
		switch kind {
		case "healthCheck":
			desc = fake.HealthCheck(project, scope, name).GetDescription()
		case "instanceGroup":
			ig, _ := fake.InstanceGroup(project, scope, name)
			desc = ig.GetDescription()
		case "backendService":
			desc = fake.BackendService(project, scope, name).GetDescription()
		case "forwardingRule":
			desc = fake.ForwardingRule(project, scope, name).GetDescription()
		default:
			t.Fatalf("the fake names a load balancer object of a kind the test does not know: %q", o)
		}
		obj := gcpObject{kind: kind, id: scope + "/" + name}
		if m := gcpHADescriptionRE.FindStringSubmatch(desc); m != nil {
			obj.name, obj.uid = m[1], m[2]
		}
		add(obj)
	}
	return out
}

// lastPathElements is the last n elements of a URL's path.
func lastPathElements(link string, n int) string {
	parts := strings.Split(link, "/")
	return strings.Join(parts[max(0, len(parts)-n):], "/")
}

// gcpRecoverAfterKill applies the configuration again after a killed apply and checks that each object the
// fake held after the kill (made) is removed, adopted by the state's proxy, or belongs to a proxy that
// egress_proxy_orphans lists; the ones that are none of these are leaks, which must be wantLeaks (by kind).
// The orphans are then deleted by the ids the list gave, which must remove every object of theirs, and a
// refused apply made again (named: the next apply finds VMs of the name that another proxy owns, and is
// refused, not taken over). It returns the leaked objects' keys.
func gcpRecoverAfterKill(c *awsCLI, env gcpKillEnv, inProcess string, made map[string]gcpObject, named bool, wantLeaks []string) map[string]bool {
	t := c.t
	t.Helper()
	vms := false
	for _, o := range made {
		vms = vms || o.kind == "VM"
	}
	next, err := c.run(inProcess, "apply", "-auto-approve")
	refused := err != nil && strings.Contains(next, "belongs to")
	switch {
	case named && vms && !refused:
		t.Fatalf("the next apply over the killed create's VMs: %v, want a refusal naming their proxy:\n%s", err, next)
	case err != nil && (!named || !refused):
		t.Fatalf("the next apply: %v\n%s", err, next)
	case refused:
		t.Logf("the next apply was refused: %s", next)
	}
	stateID, stateName, stateUID := c.stateProxy(inProcess)
	if refused && stateID != "" {
		// What it would record is the killed create's objects, or a mix of theirs and its own, under one id:
		// replacing or destroying it would be refused over the UID it does not carry.
		t.Errorf("the refused apply recorded %s (uid %s): a refused create records nothing", stateID, stateUID)
	}
	var known []string
	if stateID != "" {
		known = append(known, stateID)
	}
	orphans := listOrphans(t, env.provider, "gcp", inProcess, known)

	now := gcpObjects(t, env.fake)
	var leaked []string
	leakedIDs := map[string]bool{}
	for key, o := range made {
		cur, present := now[key]
		switch {
		case !present:
			t.Logf("%s %s: removed by the next apply", o.kind, o.id)
		case stateID != "" && cur.name == stateName && cur.uid == stateUID:
			t.Logf("%s %s: adopted by the next apply (%s)", o.kind, o.id, stateID)
		case orphans[cur.name] != "":
			t.Logf("%s %s: its proxy %s is listed by egress_proxy_orphans", o.kind, o.id, cur.name)
		default:
			leaked = append(leaked, o.kind)
			leakedIDs[key] = true
			t.Logf("LEAK: %s %s (proxy %q, uid %q): not adopted, and no orphan list shows it", o.kind, o.id, cur.name, cur.uid)
		}
	}
	slices.Sort(leaked)
	if !slices.Equal(leaked, wantLeaks) {
		t.Errorf("leaked %v, want %v", leaked, wantLeaks)
	}

	b, err := gcp.New(gcp.Config{DefaultProject: gcpTestProject, ProjectConfig: gcp.ProjectConfig{ComputeEndpoint: env.fake.URL,
		SecretManagerEndpoint: env.secrets.URL, AccessToken: "acc-token"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	for name, orphan := range orphans {
		id, diags := parseID(orphan)
		if diags.HasError() {
			t.Fatalf("the orphan list's id %s does not parse: %v", orphan, diags)
		}
		if err := b.Delete(t.Context(), id); err != nil {
			t.Fatalf("deleting orphan %s: %v", orphan, err)
		}
		// Whole: nothing of the listed proxy is left.
		for key, o := range gcpObjects(t, env.fake) {
			if o.name == name && !leakedIDs[key] && (o.name != stateName || o.uid != stateUID) {
				t.Errorf("deleting orphan %s left %s %s (uid %s)", orphan, o.kind, o.id, o.uid)
			}
		}
	}
	if refused {
		c.mustRun(inProcess, "apply", "-auto-approve")
	}
	return leakedIDs
}

// listOrphans lists the owner's orphans on one backend with egress_proxy_orphans, through the CLI, given the
// provider block and the ids a state holds: their ids by name.
func listOrphans(t *testing.T, providerBlock, kind, reattach string, known []string) map[string]string {
	t.Helper()
	lister := newAWSCLI(t, providerBlock+fmt.Sprintf(`
variable "known" {
  type = list(string)
}
data "egress_proxy_orphans" "all" {
  backends  = [%q]
  min_age   = "0s"
  known_ids = var.known
}
output "orphans" {
  value = data.egress_proxy_orphans.all.orphans
}
output "incomplete" {
  value = data.egress_proxy_orphans.all.incomplete
}
`, kind))
	knownJSON, _ := json.Marshal(append([]string{}, known...)) // [] when none, not null
	lister.env = append(lister.env, "TF_VAR_known="+string(knownJSON))
	lister.mustRun(reattach, "init")
	lister.mustRun(reattach, "apply", "-auto-approve")
	out, err := lister.cmd(reattach, "output", "-json").Output()
	if err != nil {
		t.Fatalf("output -json: %v", err)
	}
	var outputs struct {
		Orphans struct {
			Value []struct {
				ID, Name, State string
			} `json:"value"`
		} `json:"orphans"`
		Incomplete struct {
			Value bool `json:"value"`
		} `json:"incomplete"`
	}
	if err := json.Unmarshal(out, &outputs); err != nil {
		t.Fatalf("reading the outputs: %v\n%s", err, out)
	}
	if outputs.Incomplete.Value {
		t.Fatalf("egress_proxy_orphans could not list every scope: %s", out)
	}
	ids := map[string]string{}
	for _, o := range outputs.Orphans.Value {
		ids[o.Name] = o.ID
		t.Logf("egress_proxy_orphans lists %s (%s)", o.ID, o.State)
	}
	return ids
}
