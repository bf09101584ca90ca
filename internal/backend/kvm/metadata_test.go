package kvm

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

func TestMetadataRoundTrip(t *testing.T) {
	t.Parallel()
	spec := backend.Spec{
		Name: "egress-1", UID: "uid-1", Owner: "team-a", Labels: map[string]string{"env": "prod", "app": "x"},
		Proxy: proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{".example.com"},
			AllowedPorts: []int{443, 8443}, Users: []proxyconf.BasicAuth{{Username: "u", Password: "secret-password"}, {Username: "v", Password: "other-password"}},
			DeniedDestinations: []string{"bad.example.com"},
			RuleSets: []proxyconf.RuleSet{
				{Name: "ci", Clients: proxyconf.RuleSetClients{SourceCIDRs: []string{"10.1.0.0/16"}, Users: []string{"v"}}, Destinations: []string{".github.com"}, Ports: []int{443}, Mode: proxyconf.RuleSetReport},
				{Name: "certs", Clients: proxyconf.RuleSetClients{CertificateSubjects: []string{"build-1"}}},
			},
			LogFormat: proxyconf.LogFormatJSON},
	}
	p := placement{Options: Options{VCPUs: 2, MemoryMiB: 512, DiskGiB: 4, DomainType: "qemu", Pool: "p",
		BaseVolume: "b", Network: "n", MAC: "52:54:00:00:00:01", IP: "198.18.0.9", WaitForAddress: true}, Host: "h"}
	created := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	s, err := newMetadata(spec, p, created).marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s, `xmlns="`+Namespace+`"`) || strings.Contains(s, "secret-password") || strings.Contains(s, "other-password") {
		t.Fatalf("metadata XML = %s: want the namespace declared and no password", s)
	}

	// libvirt hands the element back in three shapes: as written, without namespace (DomainGetMetadata),
	// and with its own prefix (inside the domain XML).
	forms := map[string]string{
		"as written":  s,
		"no ns":       strings.Replace(s, ` xmlns="`+Namespace+`"`, "", 1),
		"with prefix": strings.NewReplacer("<proxy xmlns=", "<egress:proxy xmlns:egress=", "</proxy>", "</egress:proxy>").Replace(s),
	}
	for name, form := range forms {
		m, err := parseMetadata(form)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		inst := m.instance("h", backend.StateRunning)
		if inst.UID != "uid-1" || inst.Owner != "team-a" || inst.Name != "egress-1" || !inst.CreatedAt.Equal(created) ||
			inst.Labels["env"] != "prod" || inst.Labels["app"] != "x" || inst.ID.String() != "kvm/h/egress-1" {
			t.Errorf("%s: instance = %+v", name, inst)
		}
		if k := optionsOf(inst.Placement); k == nil || k.VCPUs != 2 || k.IP != "198.18.0.9" || k.MAC != "52:54:00:00:00:01" || !k.WaitForAddress {
			t.Errorf("%s: placement = %+v", name, optionsOf(inst.Placement))
		}
		if inst.InternalAddress != "198.18.0.9" {
			t.Errorf("%s: address = %q, want the fixed IP", name, inst.InternalAddress)
		}
		if px := inst.Proxy; px == nil || !slices.Equal(proxyconf.Usernames(px.Users), []string{"u", "v"}) || slices.ContainsFunc(px.Users, func(u proxyconf.BasicAuth) bool { return u.Password != "" }) || len(px.AllowedPorts) != 2 {
			t.Errorf("%s: proxy = %+v", name, inst.Proxy)
		}
		if px := inst.Proxy; px == nil || !reflect.DeepEqual(px.RuleSets, spec.Proxy.RuleSets) || !slices.Equal(px.DeniedDestinations, spec.Proxy.DeniedDestinations) {
			t.Errorf("%s: rule sets %+v and denied destinations %q, want the spec's", name, inst.Proxy.RuleSets, inst.Proxy.DeniedDestinations)
		}
		if px := inst.Proxy; px == nil || px.LogFormat != proxyconf.LogFormatJSON {
			t.Errorf("%s: log format %q, want the spec's", name, inst.Proxy.LogFormat)
		}
		if !m.managedBy("team-a") || m.managedBy("team-b") || !m.managedBy("") {
			t.Errorf("%s: managedBy wrong", name)
		}
	}
}

// A domain made by a version before several users records its one user in the auth-user attribute: it reads
// back as that one user, and the same settings asked again are no change to record.
func TestMetadataEarlierAuthUser(t *testing.T) {
	t.Parallel()
	settings := proxyconf.Settings{Port: 3128, AllowedDestinations: []string{".example.com"}, Users: []proxyconf.BasicAuth{{Username: "u", Password: "secret-password"}}}
	m := newMetadata(backend.Spec{Name: "egress-1", UID: "uid-1", Owner: "team-a", Proxy: settings}, placement{Host: "h"}, time.Now())
	m.Proxy.Users, m.Proxy.AuthUser = nil, "u"
	s, err := m.marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s, `auth-user="u"`) || strings.Contains(s, "<user>") {
		t.Fatalf("the earlier form is one auth-user attribute: %s", s)
	}
	earlier, err := parseMetadata(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := proxyconf.Usernames(earlier.instance("h", backend.StateRunning).Proxy.Users); !slices.Equal(got, []string{"u"}) {
		t.Errorf("users read back %q, want [u]", got)
	}
	if !sameMetaProxy(earlier.Proxy, metaProxyOf(settings)) {
		t.Errorf("the earlier record of user u differs from today's for the same settings")
	}
	two := settings
	two.Users = append(slices.Clone(two.Users), proxyconf.BasicAuth{Username: "v", Password: "other-password"})
	if sameMetaProxy(earlier.Proxy, metaProxyOf(two)) {
		t.Errorf("the earlier record of user u equals today's for users u and v")
	}
}
