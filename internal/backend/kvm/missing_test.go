package kvm

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"
)

// A create whose pool, base volume or network the host does not have is refused before anything is made:
// Permanent (not NotFound, which would read as a proxy deleted outside Terraform), naming what is missing
// and the setting that names it.
func TestFakeCreateNamesTheMissingParent(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		mod                 func(*Options)
		wantMsg, wantAdvice string
	}{
		"pool":                  {func(p *Options) { p.Pool = "nopool" }, `storage pool "nopool" does not exist`, "kvm.pool"},
		"base volume":           {func(p *Options) { p.BaseVolume = "nobase.qcow2" }, `base volume "nobase.qcow2" does not exist in pool "pool"`, "kvm.base_volume"},
		"network":               {func(p *Options) { p.Network = "nonet" }, `libvirt network "nonet" does not exist`, "kvm.network"},
		"network of a fixed ip": {func(p *Options) { p.Network, p.IP = "nonet", "192.168.122.10" }, `libvirt network "nonet" does not exist`, "kvm.network"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFakeHost()
			b, _ := fakeBackend(f)
			spec := fakeSpec("uid-missing", "o")
			tc.mod(optionsOf(spec.Placement))
			inst, err := b.Create(context.Background(), spec)
			if backend.ClassOf(err) != backend.ClassPermanent {
				t.Fatalf("Create = %v, want Permanent, not %s", err, backend.ClassOf(err))
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %q does not say %q", err, tc.wantMsg)
			}
			if advice := backend.AdviceOf(err); !strings.Contains(advice, tc.wantAdvice) {
				t.Errorf("advice %q does not name %s", advice, tc.wantAdvice)
			}
			if inst.ID.Name != "" || len(f.domains) != 0 || len(volNames(f)) != 0 {
				t.Errorf("the refused create made something: id %q, domains %d, volumes %v", inst.ID, len(f.domains), volNames(f))
			}
		})
	}
}

// qemu+tcp:// carries the seed ISO (with the htpasswd hash and the TLS key) in clear, and no_verify=1 to a
// host nobody verified: both only on a host that says insecure.
func TestValidateTransport(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		uri      string
		insecure bool
		want     string // part of the error; empty when accepted
	}{
		"local":                     {uri: "qemu:///system"},
		"tls":                       {uri: "qemu+tls://hv1.example.com/system"},
		"tls by default":            {uri: "qemu://hv1.example.com/system"},
		"ssh":                       {uri: "qemu+ssh://root@hv1.example.com/system"},
		"verification said on":      {uri: "qemu+ssh://root@hv1.example.com/system?no_verify=0"},
		"test driver":               {uri: "test:///default"},
		"tcp":                       {uri: "qemu+tcp://hv1.example.com/system", want: "in clear"},
		"tcp on an insecure host":   {uri: "qemu+tcp://hv1.example.com/system", insecure: true},
		"tls unverified":            {uri: "qemu+tls://hv1.example.com/system?no_verify=1", want: "does not verify"},
		"ssh unverified":            {uri: "qemu+ssh://root@hv1.example.com/system?no_verify=1", want: "does not verify"},
		"unverified, insecure host": {uri: "qemu+tls://hv1.example.com/system?no_verify=1", insecure: true},
		// no_verify means nothing to a local socket, which has no peer to verify.
		"local with no_verify": {uri: "qemu:///system?no_verify=1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := ValidateTransport(tc.uri, tc.insecure)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("ValidateTransport(%q, %t) = %v, want nil", tc.uri, tc.insecure, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "insecure = true")):
				t.Errorf("ValidateTransport(%q, %t) = %v, want an error saying %q and how to accept it", tc.uri, tc.insecure, err, tc.want)
			}
		})
	}
}

// The backend refuses such a host itself, before it dials: a URI from LIBVIRT_DEFAULT_URI, which the plan
// never sees, is held to the same rule. Nothing reaches the listener.
func TestInsecureTransportRefusedBeforeDialling(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	}()
	b, err := New(Config{Hosts: map[string]HostConfig{"h": {URI: "qemu+tcp://" + ln.Addr().String() + "/system", BaseVolume: "b", DialTimeout: 10 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Get(context.Background(), backend.ProviderID{Backend: Kind, Target: "h", Name: "x"})
	var ue *libvirtconn.UnreachableError
	if backend.ClassOf(err) != backend.ClassPermanent || errors.As(err, &ue) || !strings.Contains(err.Error(), "insecure = true") {
		t.Fatalf("Get = %v, want Permanent at once, saying how to accept the transport", err)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("%d connections reached the host before the refusal", n)
	}
}

// The forwarded proxy port listens on the host's loopback unless forward_address says otherwise: the proxy
// is for the host's own clients, not for the networks the host is on.
func TestUserNetForwardsOnLoopbackByDefault(t *testing.T) {
	t.Parallel()
	p := placement{Options: Options{UserNet: true, ForwardPort: 18080, MAC: "52:54:00:aa:bb:cc", Pool: "pool"}, Host: "h"}
	x, err := domainXML("egress-1", p, "qemu", 3128, `<proxy xmlns="`+Namespace+`"><uid>u</uid></proxy>`)
	if err != nil {
		t.Fatal(err)
	}
	if want := `<portForward proto="tcp" address="127.0.0.1">`; !strings.Contains(x, want) {
		t.Errorf("passt domain XML lacks %s:\n%s", want, x)
	}
	p.slirp = true
	x, err = domainXML("egress-1", p, "qemu", 3128, `<proxy xmlns="`+Namespace+`"><uid>u</uid></proxy>`)
	if err != nil {
		t.Fatal(err)
	}
	if want := "hostfwd=tcp:127.0.0.1:18080-:3128"; !strings.Contains(x, want) {
		t.Errorf("slirp domain XML lacks %s:\n%s", want, x)
	}
	p.ForwardAddress = "0.0.0.0"
	if x, _ = domainXML("egress-1", p, "qemu", 3128, `<proxy xmlns="`+Namespace+`"><uid>u</uid></proxy>`); !strings.Contains(x, "hostfwd=tcp:0.0.0.0:18080-:3128") {
		t.Errorf("an explicit forward_address is not kept:\n%s", x)
	}
}
