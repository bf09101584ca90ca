package provider

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/libvirtfault"
)

// libvirtSocket is the unix socket a local libvirt URI reaches.
func libvirtSocket(t *testing.T, uri string) string {
	t.Helper()
	u, err := url.Parse(uri)
	if err != nil || u.Host != "" || (u.Scheme != "qemu" && u.Scheme != "qemu+unix") {
		t.Fatalf("this test puts a proxy in front of a local libvirtd's socket; %q is not a local URI", uri)
	}
	if s := u.Query().Get("socket"); s != "" {
		return s
	}
	return "/var/run/libvirt/libvirt-sock"
}

// cutSeed is the random cuts' seed: EGRESS_TEST_CUT_SEED replays a failed run, otherwise the clock picks one.
func cutSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("EGRESS_TEST_CUT_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("EGRESS_TEST_CUT_SEED=%q: %v", s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

// privateLibvirtd starts a libvirtd of the test's own through the environment script
// (EGRESS_LIBVIRT_INSTANCE: its own network and mount namespaces, pool, network and blank base volume under the
// names every instance uses) and stops it, with everything it ran, when the test ends. It returns the daemon's
// URI and a function that reads the supervisor's log: each time the daemon died and was started again, and
// each wedged start it cleared.
func privateLibvirtd(t *testing.T, instance string) (uri string, restarts func() []string) {
	t.Helper()
	script := func(verb string) ([]byte, error) {
		cmd := exec.Command("../../scripts/libvirt-env.sh", verb)
		cmd.Env = append(os.Environ(), "EGRESS_LIBVIRT_INSTANCE="+instance)
		return cmd.CombinedOutput()
	}
	// A run that was killed may have left one behind: start from nothing.
	if out, err := script("stop"); err != nil {
		t.Fatalf("scripts/libvirt-env.sh stop (instance %s): %v\n%s", instance, err, out)
	}
	out, err := script("start")
	if err != nil {
		t.Fatalf("scripts/libvirt-env.sh start (instance %s): %v\n%s", instance, err, out)
	}
	t.Cleanup(func() {
		if out, err := script("stop"); err != nil {
			t.Errorf("scripts/libvirt-env.sh stop (instance %s): %v\n%s", instance, err, out)
		}
	})
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "EGRESS_LIBVIRT_URI="); ok {
			uri = v
		}
	}
	if uri == "" {
		t.Fatalf("scripts/libvirt-env.sh start (instance %s) printed no EGRESS_LIBVIRT_URI:\n%s", instance, out)
	}
	stateDir := "/var/lib/egress-" + instance // the script's STATE_DIR for the instance
	// Registered after the stop, so it runs before it.
	t.Cleanup(func() {
		if t.Failed() {
			reportPrivateLibvirtd(t, stateDir, uri)
		}
	})
	restartLog := stateDir + "/daemon-restarts"
	restarts = func() []string {
		b, err := os.ReadFile(restartLog)
		if err != nil {
			t.Errorf("reading %s: %v", restartLog, err)
			return nil
		}
		var lines []string
		for line := range strings.Lines(string(b)) {
			if line = strings.TrimSpace(line); line != "" {
				lines = append(lines, line)
			}
		}
		return lines
	}
	return uri, restarts
}

// TestAccProxyKVM_randomConnectionCuts applies ten proxies five times in a row, each apply replacing all
// ten, over a libvirt connection that a proxy cuts after a random 0.3 to 2 seconds of life: every apply
// succeeds, nothing is tainted, nothing leaks, and the plan after each apply is empty.
//
// It runs against a libvirtd of its own (privateLibvirtd), not the acceptance tests' one: a run of it once took
// a libvirtd shared with other tests (Debian 12's 9.0) down, with ten creates' streams cut at once, and every
// other test with it.
// That daemon is supervised as systemd supervises libvirtd.service; the test reports how often it died.
func TestAccProxyKVM_randomConnectionCuts(t *testing.T) {
	kvmAccPreCheck(t)
	uri, daemonRestarts := privateLibvirtd(t, "cuts")
	owner := "acc-" + uuid.NewString()[:8]
	b := kvmBackend(t, uri) // straight to the daemon: the checks look around the cuts
	p, err := libvirtfault.Start(t.TempDir(), libvirtSocket(t, uri))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	seed := cutSeed(t)
	t.Logf("random cuts with seed %d (EGRESS_TEST_CUT_SEED=%d replays them)", seed, seed)
	p.RandomLifetimes(seed, 300*time.Millisecond, 2*time.Second)
	cutURI := "qemu:///system?socket=" + url.QueryEscape(p.Socket())

	const n, rounds = 10, 5
	config := func(round int) string {
		// The round is in every name: each apply replaces all ten proxies, so it deletes ten and creates ten.
		return kvmProviderBlock(owner, cutURI) + fmt.Sprintf(`
resource "egress_proxy" "p" {
  count                = %d
  name                 = "cut-%s-r%d-${count.index}"
  kvm                  = { memory_mib = 128, wait_for_address = false }
  allowed_client_cidrs = ["198.18.0.0/24"]
  allowed_destinations = [".example.com"]
  # A round takes a minute or two; a proxy stuck for longer is a failure to report, not to wait out for
  # the default 20 minutes, twice (create and the destroy after).
  timeouts {
    create = "8m"
    delete = "8m"
  }
}
`, n, owner[4:], round)
	}
	cutsSeen := 0 // by the last round's check
	exactlyRound := func(round int) resource.TestCheckFunc {
		return func(s *terraform.State) error {
			cuts := len(p.Cuts())
			// A round whose apply no cut reached proved nothing about cuts: each apply outlives several
			// connection lifetimes, so this fails only if the proxy stopped cutting.
			if cuts <= cutsSeen {
				return fmt.Errorf("round %d: no connection was cut during its apply (%d cuts in all, seed %d)", round, cuts, seed)
			}
			cutsSeen = cuts
			list, err := b.ListByTag(t.Context(), backend.Selector{Owner: owner})
			if err != nil {
				return err
			}
			running, prefix := 0, fmt.Sprintf("cut-%s-r%d-", owner[4:], round)
			for _, in := range list {
				if in.State == backend.StateRunning && strings.HasPrefix(in.Name, prefix) {
					running++
				}
			}
			if running != n || len(list) != n {
				return fmt.Errorf("round %d: the owner has %d objects, %d of them this round's running proxies; want exactly %d: %+v", round, len(list), running, n, list)
			}
			for name, r := range s.RootModule().Resources {
				if r.Primary != nil && r.Primary.Tainted {
					return fmt.Errorf("round %d: %s is tainted", round, name)
				}
			}
			t.Logf("round %d: %d running proxies, %d connections cut so far (seed %d)", round, n, cuts, seed)
			return nil
		}
	}
	var steps []resource.TestStep
	for round := 1; round <= rounds; round++ {
		steps = append(steps,
			resource.TestStep{Config: config(round), Check: exactlyRound(round)},
			resource.TestStep{Config: config(round), PlanOnly: true},
		)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             checkOwnerHasNothingLeft(b, owner),
		Steps:                    steps,
	})
	if p.Err() != nil {
		t.Errorf("the fault proxy could not read the traffic: %v", p.Err())
	}
	t.Logf("%d connections cut in all (seed %d)", len(p.Cuts()), seed)
	var died, cleared []string
	for _, line := range daemonRestarts() {
		if strings.Contains(line, "cleared the status") {
			cleared = append(cleared, line)
		} else {
			died = append(died, line)
		}
	}
	t.Logf("the private libvirtd died %d times under the cuts and was started again by its supervisor: %s", len(died), strings.Join(died, "; "))
	t.Logf("starts libvirtd died in before QEMU ran, whose status the supervisor cleared (libvirt-env.sh): %d %s", len(cleared), strings.Join(cleared, "; "))
}

// reportPrivateLibvirtd logs what a failed test needs to tell a libvirt fault from a provider one: each
// domain's state and reason, the end of its QEMU log, and the private daemon's own log about the domains
// that are not running (libvirt-env.sh turns that log on for private instances).
func reportPrivateLibvirtd(t *testing.T, dir, uri string) {
	t.Helper()
	virsh := func(args ...string) string {
		out, err := exec.Command("virsh", append([]string{"-c", uri}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Sprintf("virsh %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	daemonLog, _ := os.ReadFile(dir + "/log/libvirtd.log")
	for name := range strings.Lines(virsh("list", "--all", "--name")) {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		state := virsh("domstate", "--reason", name)
		t.Logf("private libvirtd: domain %s: %s", name, state)
		if strings.HasPrefix(state, "running") {
			continue
		}
		if qemuLog, err := os.ReadFile(dir + "/log/qemu/" + name + ".log"); err == nil {
			t.Logf("end of %s's QEMU log:\n%s", name, lastLinesOf(string(qemuLog), 15))
		}
		var about []string
		for line := range strings.Lines(string(daemonLog)) {
			if strings.Contains(line, name) || strings.Contains(line, " error : ") {
				about = append(about, line)
			}
		}
		t.Logf("private libvirtd's log about %s (and its errors), last lines:\n%s", name, lastLinesOf(strings.Join(about, ""), 60))
	}
}

// lastLinesOf is the last n lines of text.
func lastLinesOf(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
