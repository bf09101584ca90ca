package kvm

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// liveNetns is the network namespace libvirtd runs in (scripts/libvirt-env.sh): whatever libvirt starts for
// a domain, passt included, lives there.
func liveNetns() string { return envOr("EGRESS_LIBVIRT_NETNS", "egress-test") }

// inNetns runs a command inside the test namespace.
func inNetns(t testing.TB, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", liveNetns()}, args...)...).CombinedOutput()
	return string(out), err
}

// TestLiveUserNetForward: a proxy on user-mode networking runs, and its proxy port is forwarded from a
// loopback address of the host (here: of the test namespace, where libvirtd runs). With libvirt's passt
// backend where the daemon has it, and QEMU's own user network where it does not (Debian 12's libvirt 9.0
// is built without passt): the test logs which, and the daemon's refusal.
func TestLiveUserNetForward(t *testing.T) {
	b := liveBackend(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test inspects the test namespace and must run as root, like scripts/libvirt-env.sh")
	}
	spec := liveSpec(testOwner())
	port := freePortInNetns(t)
	optionsOf(spec.Placement).UserNet = true
	optionsOf(spec.Placement).ForwardAddress = "127.0.0.1"
	optionsOf(spec.Placement).ForwardPort = port
	cleanupProxy(t, b, spec.Name)

	inst, err := b.Create(ctxFor(t, 2*time.Minute), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if st, ok := domainState(t, b, spec.Name); !ok || st != libvirt.DomainRunning {
		t.Fatalf("domain state = %v (found %v), want running", st, ok)
	}
	if inst.InternalAddress != "127.0.0.1" || inst.Port != port {
		t.Errorf("address = %s:%d, want the forward 127.0.0.1:%d", inst.InternalAddress, inst.Port, port)
	}

	var live libvirtxml.Domain
	inspect(t, b, func(l api) error {
		dom, err := l.DomainLookupByName(spec.Name)
		if err != nil {
			return err
		}
		s, err := l.DomainGetXMLDesc(dom, 0)
		if err != nil {
			return err
		}
		return live.Unmarshal(s)
	})
	process := "passt"
	if b.conns[liveHost].noPasst() {
		process = "qemu-system"
		t.Logf("daemon without passt: user-mode networking through QEMU's own user network")
		if live.QEMUCommandline == nil || !strings.Contains(fmt.Sprint(live.QEMUCommandline.Args), fmt.Sprintf("hostfwd=tcp:127.0.0.1:%d-:3128", port)) {
			t.Errorf("running domain's QEMU arguments = %+v, want the hostfwd", live.QEMUCommandline)
		}
	} else {
		iface := live.Devices.Interfaces[0]
		if iface.Backend == nil || iface.Backend.Type != "passt" || iface.Source.User == nil || len(iface.PortForward) != 1 {
			t.Errorf("running domain's interface = %+v, want user type with the passt backend and one portForward", iface)
		}
	}

	// The forward listens in the daemon's namespace, served by passt or QEMU.
	want := fmt.Sprintf("127.0.0.1:%d", port)
	var ss string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		ss, err = inNetns(t, "ss", "-Hltnp", "sport", "= :"+fmt.Sprint(port))
		if err == nil && strings.Contains(ss, want) {
			break
		}
	}
	if !strings.Contains(ss, want) || !strings.Contains(ss, process) {
		t.Fatalf("ss -ltnp in %s for port %d: %q (%v); want %s listening on %s", liveNetns(), port, ss, err, process, want)
	}
	t.Logf("forward: %s", strings.TrimSpace(ss))

	if err := b.Delete(ctxFor(t, time.Minute), inst.ID); err != nil {
		t.Fatal(err)
	}
	// The forward ends with its domain: the port is free again.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if ss, _ = inNetns(t, "ss", "-Hltn", "sport", "= :"+fmt.Sprint(port)); strings.TrimSpace(ss) == "" {
			return
		}
	}
	t.Errorf("port %d still listening after Delete: %q", port, ss)
}

// TestLivePasstSupport proves that this daemon takes one of the two forms of user-mode networking the
// backend writes: libvirt's passt backend, or, when the daemon refuses it in the words isPasstRefused knows
// (Debian 12's libvirt is built without passt), QEMU's own slirp forward that create falls back to. A
// refusal in other words, or a fallback the daemon also refuses, fails: user_net could not work here.
func TestLivePasstSupport(t *testing.T) {
	b := liveBackend(t)
	spec := liveSpec(testOwner())
	optionsOf(spec.Placement).UserNet, optionsOf(spec.Placement).ForwardPort = true, 3128
	p, err := resolvePlacement(spec, b.hosts)
	if err != nil {
		t.Fatal(err)
	}
	define := func(l api, p placement) (libvirt.Domain, error) {
		x, err := domainXML(spec.Name, p, DomainTypeQEMU, 3128, "")
		if err != nil {
			t.Fatal(err)
		}
		return l.DomainDefineXMLFlags(x, libvirt.DomainDefineValidate)
	}
	inspect(t, b, func(l api) error {
		dom, err := define(l, p)
		switch {
		case isPasstRefused(err):
			t.Logf("the daemon has no passt backend: %v", err)
			p.slirp = true
			if dom, err = define(l, p); err != nil {
				return fmt.Errorf("the daemon refuses passt and the slirp fallback too: %w", err)
			}
			t.Logf("the daemon takes the slirp fallback")
		case err != nil:
			return fmt.Errorf("defining a user_net domain: %w (not the refusal isPasstRefused knows)", err)
		default:
			t.Logf("the daemon takes the passt backend")
		}
		return l.DomainUndefineFlags(dom, 0)
	})
}

// freePortInNetns picks a port nothing listens on in the test namespace. Only this test environment's own
// processes live there, and the parallel live tests that forward ports each pick theirs here, so a port seen
// free stays free until the domain takes it unless two draws meet: the draw is random to make that rare,
// the check rules out a port already taken, and the range lies below the kernel's ephemeral range (32768
// up), so no outgoing connection takes the port as its local one in between.
func freePortInNetns(t *testing.T) int {
	t.Helper()
	for range 50 {
		port := 16384 + rand.IntN(16384)
		ss, err := inNetns(t, "ss", "-Hltn", "sport", "= :"+fmt.Sprint(port))
		if err != nil {
			t.Fatalf("ss in %s: %v", liveNetns(), err)
		}
		if strings.TrimSpace(ss) == "" {
			return port
		}
	}
	t.Fatalf("no free port in %s after 50 draws", liveNetns())
	return 0
}
