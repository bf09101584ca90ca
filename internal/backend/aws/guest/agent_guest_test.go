package guest_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/imdsfake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/metricstest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// The EC2 guest proved on the proxy image's own Squid, systemd and nftables, as an EC2 instance runs it: the
// image's root tree (make guest-root) boots as a container in a network namespace the test makes, where an
// IMDSv2 fake (imdsfake, tokens required) answers on 169.254.169.254:80 with the instance role's credentials
// and the user-data RenderUserData renders, and ec2fake's SSM, reached through a recording proxy in a
// second namespace, holds the proxy's parameters. A unit of the test plays cloud-init: at the instance's
// first boot it fetches the user-data with an IMDSv2 token and runs it, once. The parameters are written with
// the AWS SDK's SSM client, as the backend writes them (RenderParameters).
//
// It proves: the proxy answers 200 for an allowed destination, 403 for a refused one and for the guest's own
// addresses (its interface's, the public one only IMDS names, and an Elastic IP associated while it runs),
// 407 without credentials, and the backstop keeps Squid's user from IMDS; the files have the paths, owners and modes of the other VM guests; a rule
// change (a new password, TLS on, another destination) is applied in place and reported in applied, after the
// agent waited out the moment the backend had written the config and not yet the secrets; a config Squid
// refuses is never installed, the last good one serving on, across a reboot, and its refusal is reported in
// applied; a config packed in several parts is applied, and not before all its parts are the ones its
// manifest names (a set half written keeps the last good config serving, and is read again); a config not authenticated by the proxy's key, and one that is but holds a directive the renderer
// never writes (a helper program), are never installed either; the agent only ever reads IMDS
// with a token, carries on when every token ends, refreshes the role's credentials before they come within
// its margin of their expiry, signs every SSM call with the session token, and writes applied once per
// config; issue 39's policy (rule sets, one reported, a deny list) passes the agent's guard and Squid judges
// by it, the reported rule set's unlisted destination forwarded and logged would_deny; and a client CA with its
// CRL is installed and enforced (no certificate and a revoked one refused, a rule set matched by subject), then
// removed with the files; and metrics turned on and off in place run and stop mtail and the Squid exporter
// (checkMetrics).
func TestAgentOnRealSquid(t *testing.T) {
	tree := testutil.GuestRootPrerequisites(t)
	ctx := testutil.GuestContext(t, 15*time.Minute)
	start := time.Now()

	const region, name = "eu-west-1", "guest-proxy"
	fake := ec2fake.New(t, ec2fake.Options{Regions: []string{region}})
	client := ssm.NewFromConfig(fake.AWSConfig(region))
	params := paramWriter{t: t, ctx: ctx, c: client, name: name}

	// The role's credentials are sessions ec2fake opens for the instance's profile, as EC2 does, so SSM
	// checks the agent's signature, access key and session token as the service would. IMDS makes new ones
	// every few seconds, since they live ten minutes and four seconds and are replaced ten minutes before
	// they expire, within the agent's margin. So the agent keeps fetching new ones.
	const role, lifetime = "egress-proxy-role", 10*time.Minute + 4*time.Second
	imds := imdsfake.New(imdsfake.Options{
		Role: role, CredentialLifetime: lifetime, RotateBefore: 10 * time.Minute,
		NewCredentials: func(int) (string, string, string) {
			return fake.InstanceProfileCredentials(role, "i-0a1b2c3d4e5f60718", lifetime)
		},
	})
	imds.SetMetadata("network/interfaces/macs/"+guestMAC+"/public-ipv4s", publicIP)
	imds.SetMetadata("network/interfaces/macs/"+guestMAC+"/local-ipv4s", guestIP)
	// The agent polls every second: each step below waits for a poll, and after a refused or half-written
	// config for the agent's backoff, which is counted in intervals (at 2 seconds, 5 applies took 8 to 14 s).
	userData, err := guest.RenderUserDataWith(
		guest.UserDataOptions{Region: region, ParameterPrefix: guest.ParameterPath(name, "")},
		guest.Overrides{WatchInterval: 1, TokenTTL: 60, PlainSSMEndpoint: "http://" + ssmIP})
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

	// Config 1: a password, three destinations (two of them the guest's own addresses, which the guards refuse).
	s1 := proxyconf.Settings{
		Port: proxyconf.DefaultPort, AllowedClientCIDRs: []string{"198.18.0.0/24"},
		AllowedDestinations: []string{"allowed.example", "own.example", "external.example", "eip.example"},
		Users:               []proxyconf.BasicAuth{{Username: "u", Password: "correct-horse-battery"}},
	}
	r1 := params.render(s1)
	id1 := r1.id
	params.put(r1)

	upper := t.TempDir()
	writeGuestFiles(t, upper)
	proxy := testutil.ProxyClient{Dial: testutil.DialFromNetns(peer, clientIP, guestIP+":3128"), User: "u", Password: "correct-horse-battery"}
	applied := func(id string) func() bool { return func() bool { return params.applied() == id } }

	// Boot 1: cloud-init runs the user-data, which starts the agent; it applies config 1.
	g := testutil.BootGuest(t, tree, upper, ns, "boot1")
	g.WaitFor(ctx, t, "boot 1: the guest reports config "+id1+" applied", applied(id1))
	t.Logf("boot 1: config 1 applied and reported %s after start", time.Since(start).Round(time.Second))
	for _, c := range []struct {
		name, url string
		auth      bool
		want      int
	}{
		{"allowed destination", "http://allowed.example/", true, http.StatusOK},
		{"refused destination", "http://denied.example/", true, http.StatusForbidden},
		{"no credentials", "http://allowed.example/", false, http.StatusProxyAuthRequired},
		{"the guest's interface address", "http://own.example/", true, http.StatusForbidden},
		{"the guest's public address, which only IMDS names", "http://external.example/", true, http.StatusForbidden},
	} {
		if got := proxy.Get(ctx, t, c.url, c.auth); got != c.want {
			t.Errorf("config 1, %s: %s through the guest's Squid = %d, want %d\n%s", c.name, c.url, got, c.want, g.Log())
		}
	}
	own, _, _ := testutil.StatIn(t, upper, proxyconf.OwnAddressesPath)
	for _, a := range []string{guestIP, publicIP} {
		if !strings.Contains("\n"+own, "\n"+a+"\n") {
			t.Errorf("the guest's own addresses lack %s:\n%s", a, own)
		}
	}
	checkModes(t, g, map[string]string{
		proxyconf.ConfPath: "root:proxy 640", proxyconf.HtpasswdPath: "root:proxy 640", proxyconf.NftablesPath: "root:proxy 640",
		proxyconf.OwnAddressesPath: "root:root 644", guest.StateDir + "/agent.json": "root:root 600",
	})
	checkIMDSBackstop(t, g)

	// An Elastic IP associated after boot, as Create does once the instance runs: IMDS names the new public
	// address, the agent lists it at its next poll and reloads Squid, which refuses it from then on.
	imds.SetMetadata("network/interfaces/macs/"+guestMAC+"/public-ipv4s", elasticIP)
	g.WaitFor(ctx, t, "the agent lists the Elastic IP among the guest's own addresses", func() bool {
		own, _, _ := testutil.StatIn(t, upper, proxyconf.OwnAddressesPath)
		return strings.Contains(own, elasticIP+"\n") && strings.Contains(g.FullLog(), "own addresses changed: backstop and squid reloaded")
	})
	// Squid reconfigures after the reload returns: until it has, the address is a destination like any other.
	g.WaitFor(ctx, t, "Squid refuses the Elastic IP", func() bool { return proxy.Get(ctx, t, "http://eip.example/", true) == http.StatusForbidden })
	if set, err := g.Exec(t, "nft", "list", "set", "inet", proxyconf.NftablesTable, "own_v4"); err != nil || !strings.Contains(set, elasticIP) {
		t.Errorf("the backstop's own addresses after the Elastic IP (%v):\n%s", err, set)
	}

	// Every token ends: the agent's next read of IMDS is refused, and it must get a new token and go on.
	imds.ExpireTokens()
	tokensEnded := time.Now()

	// Config 2, a rule change in place: another destination, a new password, TLS on. The backend writes the
	// config, then the secrets: the agent must see the config alone, refuse to apply half a change, and apply
	// the pair once the secrets follow.
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	s2 := s1
	s2.AllowedDestinations = []string{"allowed.example", "denied.example"}
	s2.Users = []proxyconf.BasicAuth{{Username: "u", Password: "second-horse-battery"}}
	s2.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key}
	r2 := params.render(s2)
	id2 := r2.id
	params.putConfig(r2)
	g.WaitFor(ctx, t, "the agent reads config "+id2+" without its secrets", func() bool {
		return strings.Contains(g.FullLog(), "config "+id2+" and the secrets read with it do not belong together yet")
	})
	if got := params.applied(); got != id1 {
		t.Fatalf("with the config written and the secrets not yet, applied is %s, want %s still", got, id1)
	}
	params.putSecrets(r2)
	g.WaitFor(ctx, t, "the guest reports config "+id2+" applied", applied(id2))
	t.Logf("config 2 applied in place, %s after start", time.Since(start).Round(time.Second))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(cert))
	tlsProxy := proxy
	tlsProxy.TLS = &tls.Config{RootCAs: roots, ServerName: "proxy.test", MinVersion: tls.VersionTLS12}
	tlsProxy.Password = "second-horse-battery"
	oldPassword := tlsProxy
	oldPassword.Password = "correct-horse-battery"
	checkConfig2 := func(when string) {
		t.Helper()
		for _, c := range []struct {
			name   string
			client testutil.ProxyClient
			url    string
			want   int
		}{
			{"a destination allowed since", tlsProxy, "http://denied.example/", http.StatusOK},
			{"a destination no longer allowed", tlsProxy, "http://own.example/", http.StatusForbidden},
			{"the old password", oldPassword, "http://allowed.example/", http.StatusProxyAuthRequired},
		} {
			if got := c.client.Get(ctx, t, c.url, true); got != c.want {
				t.Errorf("%s, %s: %s = %d, want %d\n%s", when, c.name, c.url, got, c.want, g.Log())
			}
		}
	}
	checkConfig2("config 2")
	checkModes(t, g, map[string]string{proxyconf.TLSCertPath: "root:proxy 644", proxyconf.TLSKeyPath: "root:proxy 640"})
	for path, want := range map[string]string{proxyconf.TLSCertPath: cert, proxyconf.TLSKeyPath: key} {
		if got, _, _ := testutil.StatIn(t, upper, path); got != want {
			t.Errorf("%s in the guest is not the one in the parameters", path)
		}
	}

	// Config 3: one Squid refuses, with the id of exactly what it holds, so only Squid can tell. The agent
	// never installs it: config 2 serves on, and applied stays.
	r3 := params.broken(r2)
	id3 := r3.id
	params.putConfig(r3)
	refused := "squid rejected config " + id3
	g.WaitFor(ctx, t, "the agent refuses config "+id3, func() bool { return strings.Contains(g.FullLog(), refused) })
	checkConfig2("with config 3 refused")
	if got := params.applied(); got != id2 {
		t.Errorf("after config 3 was refused applied is %s, want %s", got, id2)
	}
	g.WaitFor(ctx, t, "the guest reports config "+id3+" refused", func() bool { return params.appliedWhole().Refused == id3 })
	before := map[string]time.Time{}
	for _, f := range []string{proxyconf.ConfPath, proxyconf.HtpasswdPath, guest.StateDir + "/applied"} {
		_, mod, ok := testutil.StatIn(t, upper, f)
		if !ok {
			t.Fatalf("the guest has no %s", f)
		}
		before[f] = mod
	}
	checkAgentLog(t, g)
	g.Stop(t)

	// Boot 2: cloud-init does not run the user-data again; the agent starts with the instance, finds config
	// 3 still there, refuses it again, and config 2, on disk, serves.
	g = testutil.BootGuest(t, tree, upper, ns, "boot2")
	g.WaitFor(ctx, t, "boot 2: the agent refuses config "+id3, func() bool { return strings.Contains(g.FullLog(), refused) })
	checkConfig2("boot 2")
	for f, mod := range before {
		if _, now, _ := testutil.StatIn(t, upper, f); !now.Equal(mod) {
			t.Errorf("boot 2 rewrote %s (modified %s, was %s)", f, now, mod)
		}
	}
	if strings.Contains(g.FullLog(), "egress-proxy user-data ran") {
		t.Error("boot 2 ran the user-data again")
	}

	// Config 4, good again (config 1's rules and 400 more destinations, so that it takes several parts), written
	// half first: its secrets and manifest, and of its parts only the first, as a writer that wrote the
	// manifest too early would leave them (the backend writes the parts first). The agent finds the parts
	// not the ones the manifest names, keeps config 2 serving and reads again, and applies config 4 once the
	// parts are whole: applied, TLS off, its files gone from the disk.
	s4 := s1
	for i := range 400 {
		s4.AllowedDestinations = append(s4.AllowedDestinations, fmt.Sprintf("h%x.%x.example.net", uint32(i)*2654435761, uint64(i+1)*11400714819323198485))
	}
	r4 := params.render(s4)
	id4 := r4.id
	if len(r4.parts) < 3 {
		t.Fatalf("config 4 takes %d parts, want several", len(r4.parts))
	}
	params.putParts(r4, 1)
	params.putManifest(r4)
	params.putSecrets(r4)
	g.WaitFor(ctx, t, "the agent finds config "+id4+"'s parts half written", func() bool {
		return strings.Contains(g.FullLog(), "config "+id4+": its parts are not all written yet")
	})
	checkConfig2("with config 4's parts half written")
	if a := params.appliedWhole(); a.ConfigID != id2 || a.Refused == id4 {
		t.Errorf("with config 4's parts half written applied says %+v, want config %s running and nothing said of %s", a, id2, id4)
	}
	params.putParts(r4, len(r4.parts))
	g.WaitFor(ctx, t, "boot 2: the guest reports config "+id4+" applied", applied(id4))
	t.Logf("config 4 in %d parts applied once they were whole, %s after start", len(r4.parts), time.Since(start).Round(time.Second))
	for url, want := range map[string]int{"http://allowed.example/": http.StatusOK, "http://denied.example/": http.StatusForbidden} {
		if got := proxy.Get(ctx, t, url, true); got != want {
			t.Errorf("config 4: %s = %d, want %d\n%s", url, got, want, g.Log())
		}
	}
	for _, f := range []string{proxyconf.TLSCertPath, proxyconf.TLSKeyPath} {
		if out, err := g.Exec(t, "test", "!", "-e", f); err != nil {
			t.Errorf("%s stays in the guest with TLS off: %v %s", f, err, out)
		}
	}

	// Configs the provider did not write (issue 35, item 1). One that runs a program as Squid's helper, with
	// a MAC under another key (written by someone who may write the String parameter but not read the
	// secrets): refused, not even parsed, and not reported, since it may be half of a change.
	forged := params.edited(r4, func(c string) string { return c + "url_rewrite_program /bin/sh -c id\n" }, false)
	params.putConfig(forged)
	g.WaitFor(ctx, t, "the agent refuses the unauthenticated config "+forged.id, func() bool {
		return strings.Contains(g.FullLog(), "refused config "+forged.id+": it is not authenticated")
	})
	// The same with the proxy's own key (a leaked key, or a bug in the MAC): the guard refuses it, and the
	// refusal is reported beside the config that runs.
	leaked := params.edited(r4, func(c string) string { return c + "url_rewrite_program /bin/sh -c id\n" }, true)
	params.putConfig(leaked)
	g.WaitFor(ctx, t, "the guest reports config "+leaked.id+" refused", func() bool { return params.appliedWhole().Refused == leaked.id })
	if a := params.appliedWhole(); a.ConfigID != id4 || !strings.Contains(a.Reason, "url_rewrite_program") {
		t.Errorf("after the leaked-key config, applied says %+v, want config %s running and the directive named", a, id4)
	}
	if got := proxy.Get(ctx, t, "http://allowed.example/", true); got != http.StatusOK {
		t.Errorf("with the forged configs refused, config 4 serves: %d, want 200\n%s", got, g.Log())
	}
	if out, err := g.Exec(t, "grep", "-c", "url_rewrite_program", proxyconf.ConfPath); err == nil {
		t.Errorf("a forged directive reached %s: %s", proxyconf.ConfPath, out)
	}

	// Config 5, issue 39's policy: an enforced rule set for a user the test's client is not, a reported one
	// for the client's address, and a deny list. The agent's guard must admit every directive the renderer
	// writes for it, and Squid must judge by it: the reported rule set's unlisted destination is forwarded and
	// logged would_deny, the denied one refused whatever the mode.
	s5 := s1
	s5.AllowedDestinations = []string{"allowed.example"}
	s5.DeniedDestinations = []string{"denied.example"}
	s5.Users = append(slices.Clone(s1.Users), proxyconf.BasicAuth{Username: "v", Password: "staple-horse-battery"})
	s5.RuleSets = []proxyconf.RuleSet{
		{Name: "builds", Clients: proxyconf.RuleSetClients{Users: []string{"v"}}, Destinations: []string{"allowed.example"}},
		{Name: "rollout", Clients: proxyconf.RuleSetClients{SourceCIDRs: []string{clientIP + "/32"}}, Destinations: []string{"allowed.example"},
			Mode: proxyconf.RuleSetReport},
	}
	r5 := params.render(s5)
	id5 := r5.id
	params.put(r5)
	g.WaitFor(ctx, t, "the guest reports config "+id5+" applied", applied(id5))
	for _, c := range []struct {
		host                      string
		want                      int
		ruleSet, decision, reason string
	}{
		{"allowed.example", http.StatusOK, "rollout", "allow", "-"},
		{"report.example", http.StatusOK, "rollout", "would_deny", proxyconf.ReasonDestinationNotAllowed},
		{"denied.example", http.StatusForbidden, "-", "deny", proxyconf.ReasonDeniedDestination},
	} {
		// Only the lines after this request's: configs 1 to 4 asked for these hosts too.
		before, _, _ := testutil.StatIn(t, upper, proxyconf.AccessLogPath)
		if got := proxy.Get(ctx, t, "http://"+c.host+"/", true); got != c.want {
			t.Errorf("config 5: %s = %d, want %d\n%s", c.host, got, c.want, g.Log())
		}
		// Found by its host alone, whatever its status, so that a wrong one fails the check below and not the wait.
		want := fmt.Sprintf(" host=%s port=80 ", c.host)
		var line string
		g.WaitFor(ctx, t, "config 5: the access log's line for "+c.host, func() bool {
			log, _, _ := testutil.StatIn(t, upper, proxyconf.AccessLogPath)
			for _, l := range strings.Split(strings.TrimPrefix(log, before), "\n") {
				if strings.Contains(l, want) {
					line = l
				}
			}
			return line != ""
		})
		if wantFields := fmt.Sprintf("ruleset=%s decision=%s", c.ruleSet, c.decision); !strings.Contains(line, wantFields) ||
			!strings.Contains(line, " reason="+c.reason+" ") || !strings.Contains(line, fmt.Sprintf(" status=%d ", c.want)) {
			t.Errorf("config 5: %s logged %q, want status=%d %s reason=%s", c.host, line, c.want, wantFields, c.reason)
		}
	}

	// Config 6, issue 39's client certificates on aws (item 5): TLS with a client CA, a CRL that revokes one of
	// its certificates, and a rule set by certificate subject. The agent installs the CA and CRL where
	// squid.conf names them; a client without a certificate and one whose certificate the CRL lists are
	// refused in the handshake; one the CA signed is served and judged by its subject.
	ca := testutil.NewClientCA(t, "egress test client CA")
	workload, payments, revoked := ca.ClientCertificate(t, "workload-1"), ca.ClientCertificate(t, "payments"), ca.ClientCertificate(t, "workload-1")
	crl := ca.CRLRevoking(t, 1, revoked)
	s6 := s1
	s6.AllowedDestinations = []string{"allowed.example", "report.example"}
	s6.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: ca.PEM, ClientCRLPEM: crl}
	s6.RuleSets = []proxyconf.RuleSet{
		{Name: "payments", Clients: proxyconf.RuleSetClients{CertificateSubjects: []string{"payments"}}, Destinations: []string{"allowed.example"}},
	}
	r6 := params.render(s6)
	id6 := r6.id
	params.put(r6)
	g.WaitFor(ctx, t, "the guest reports config "+id6+" applied", applied(id6))
	checkModes(t, g, map[string]string{proxyconf.ClientCAPath: "root:proxy 644", proxyconf.ClientCRLPath: "root:proxy 644"})
	for path, want := range map[string]string{proxyconf.ClientCAPath: ca.PEM, proxyconf.ClientCRLPath: crl} {
		if got, _, _ := testutil.StatIn(t, upper, path); got != want {
			t.Errorf("%s in the guest is not the one in the config", path)
		}
	}
	withCert := func(c *tls.Certificate) testutil.ProxyClient {
		client := proxy
		client.TLS = &tls.Config{RootCAs: roots, ServerName: "proxy.test", MinVersion: tls.VersionTLS12}
		if c != nil {
			client.TLS.Certificates = []tls.Certificate{*c}
		}
		return client
	}
	for _, c := range []struct {
		name   string
		client testutil.ProxyClient
		url    string
		want   int
	}{
		{"a certificate the CA signed", withCert(&workload), "http://report.example/", http.StatusOK},
		{"the rule set's subject, its destination", withCert(&payments), "http://allowed.example/", http.StatusOK},
		{"the rule set's subject, another destination", withCert(&payments), "http://report.example/", http.StatusForbidden},
	} {
		if got := c.client.Get(ctx, t, c.url, true); got != c.want {
			t.Errorf("config 6, %s: %s = %d, want %d\n%s", c.name, c.url, got, c.want, g.Log())
		}
	}
	for name, c := range map[string]*tls.Certificate{"no certificate": nil, "a revoked certificate": &revoked} {
		if err := servedAfterHandshake(ctx, t, withCert(c)); err == nil {
			t.Errorf("config 6: a client with %s was served", name)
		}
	}

	// Config 7: the client CA and the rule set removed, TLS kept. The agent removes the CA and CRL it had
	// installed, and a client without a certificate is served again.
	s7 := s6
	s7.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key}
	s7.RuleSets = nil
	r7 := params.render(s7)
	id7 := r7.id
	params.put(r7)
	g.WaitFor(ctx, t, "the guest reports config "+id7+" applied", applied(id7))
	if err := servedAfterHandshake(ctx, t, withCert(nil)); err != nil {
		t.Errorf("config 7: a client without a certificate: %v", err)
	}
	for _, f := range []string{proxyconf.ClientCAPath, proxyconf.ClientCRLPath} {
		if out, err := g.Exec(t, "test", "!", "-e", f); err != nil {
			t.Errorf("%s stays in the guest without a client CA: %v %s", f, err, out)
		}
	}
	id8, id9 := checkMetrics(ctx, t, g, params, s1, peer, upper, proxy)
	checkAgentLog(t, g)
	g.Stop(t)

	checkIMDSUse(t, imds.Requests(), tokensEnded)
	checkSSMUse(t, calls.all(), imds.IssuedCredentials(), []string{id1, id2, id4, id5, id6, id7, id8, id9}, []string{id3, leaked.id})
	t.Logf("done in %s", time.Since(start).Round(time.Second))
}

// checkMetrics (issue 40 item 3): config 8 turns metrics on (s with the JSON log, the scraper's range the
// client's address alone), and the agent runs mtail and the Squid exporter once Squid answers; N requests move
// egress_proxy_requests_total by exactly N, by decision; the exporter answers with squid_up 1; an address
// outside the metrics range is refused on both ports, though it may use the proxy. Config 9 turns metrics
// off: both ports close, the units are disabled and their files gone. It returns the two configs' ids.
func checkMetrics(ctx context.Context, t *testing.T, g *testutil.Guest, params paramWriter, s proxyconf.Settings, peer, upper string, proxy testutil.ProxyClient) (id8, id9 string) {
	t.Helper()
	start := time.Now()
	s8 := s
	s8.LogFormat = proxyconf.LogFormatJSON
	s8.Metrics = &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{clientIP + "/32"}}
	r8 := params.render(s8)
	params.put(r8)
	g.WaitFor(ctx, t, "the guest reports config "+r8.id+" (metrics on) applied", func() bool { return params.applied() == r8.id })
	// The agent's own probes of Squid are health checks, which mtail counts apart: no line of the JSON log
	// lacks a decision (a probe of any other path would log one, and count as a request).
	log, _, _ := testutil.StatIn(t, upper, proxyconf.AccessLogPath)
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "{") && strings.Contains(l, `"decision":"-"`) {
			t.Errorf("config 8: the access log holds a request without a decision, which mtail counts: %s", l)
		}
	}
	scrape := func(from string, port int) (metricstest.Samples, error) {
		// mtail's program, the exporter's Squid
		return metricstest.TryScrapeFromNetns(context.Background(), peer, from, fmt.Sprintf("%s:%d", guestIP, port), "prog", "host")
	}
	// The requests counted, by decision, and in all.
	requests := func() map[string]float64 {
		got, err := scrape(clientIP, proxyconf.DefaultMetricsPort)
		if err != nil {
			return nil
		}
		out := map[string]float64{}
		for series, v := range got {
			if !strings.HasPrefix(series, "egress_proxy_requests_total{") {
				continue
			}
			out[""] += v
			for _, d := range []string{"allow", "deny"} {
				if strings.Contains(series, `decision="`+d+`"`) {
					out[d] += v
				}
			}
		}
		return out
	}
	// mtail reads the log from its end once it runs, so lines written before it opened the log never count: a
	// request, then a few seconds for its line to count, then another, until one counts. From then on every
	// line counts, and the earlier ones had their seconds (a line counted later would fail the test, not pass it).
	var base map[string]float64
	g.WaitFor(ctx, t, "mtail counts a request", func() bool {
		proxy.Get(ctx, t, "http://allowed.example/", true)
		for wait := time.Now().Add(3 * time.Second); time.Now().Before(wait); {
			if base = requests(); base[""] > 0 {
				return true
			}
			select {
			case <-ctx.Done():
				return false
			case <-time.After(250 * time.Millisecond):
			}
		}
		return false
	})
	want := map[string]float64{"allow": 2, "deny": 1, "": 3}
	for _, c := range []struct {
		url  string
		want int
	}{{"http://allowed.example/", http.StatusOK}, {"http://allowed.example/", http.StatusOK}, {"http://denied.example/", http.StatusForbidden}} {
		if got := proxy.Get(ctx, t, c.url, true); got != c.want {
			t.Errorf("config 8: %s = %d, want %d", c.url, got, c.want)
		}
	}
	var now map[string]float64
	g.WaitFor(ctx, t, "egress_proxy_requests_total moves by 3", func() bool {
		now = requests()
		return now[""] >= base[""]+want[""]
	})
	for k, n := range want {
		if got := now[k] - base[k]; got != n {
			t.Errorf("config 8: egress_proxy_requests_total (decision %q) moved by %v for %v requests", k, got, n)
		}
	}
	g.WaitFor(ctx, t, "the Squid exporter serves squid_up 1", func() bool {
		got, err := scrape(clientIP, proxyconf.DefaultSquidMetricsPort)
		return err == nil && got["squid_up"] == 1
	})
	// upstreamIP is in the proxy's clients' range (198.18.0.0/24), not in the metrics range.
	for _, port := range []int{proxyconf.DefaultMetricsPort, proxyconf.DefaultSquidMetricsPort} {
		if _, err := scrape(upstreamIP, port); err == nil {
			t.Errorf("config 8: %s, outside the metrics range, scraped port %d", upstreamIP, port)
		}
	}

	// Config 9: metrics off. Both ports close, the units are disabled, their files gone.
	s9 := s8
	s9.Metrics = nil
	r9 := params.render(s9)
	params.put(r9)
	g.WaitFor(ctx, t, "the guest reports config "+r9.id+" (metrics off) applied", func() bool { return params.applied() == r9.id })
	for _, port := range []int{proxyconf.DefaultMetricsPort, proxyconf.DefaultSquidMetricsPort} {
		if _, err := scrape(clientIP, port); err == nil {
			t.Errorf("config 9: port %d still serves with metrics off", port)
		}
	}
	for _, u := range vmguest.MetricsUnits {
		if _, ours := vmguest.MetricsOwnUnits[u]; ours {
			continue // its unit file is among the files below, which go
		}
		if out, _ := g.Exec(t, "systemctl", "is-enabled", u); strings.TrimSpace(out) != "disabled" {
			t.Errorf("config 9: %s is %q, want disabled", u, strings.TrimSpace(out))
		}
	}
	for _, f := range vmguest.MetricsPaths {
		if out, err := g.Exec(t, "test", "!", "-e", f); err != nil {
			t.Errorf("config 9: %s stays with metrics off: %v %s", f, err, out)
		}
	}
	t.Logf("metrics on, counted and off in %s", time.Since(start).Round(time.Second))
	return r8.id, r9.id
}

// servedAfterHandshake sends one request through client's TLS connection and reads its answer: nil when
// Squid served it, the error otherwise. A refused client certificate (or none) surfaces in the handshake or,
// under TLS 1.3, where the client's certificate follows its side of the handshake, as an alert on the first read.
func servedAfterHandshake(ctx context.Context, t *testing.T, client testutil.ProxyClient) error {
	t.Helper()
	conn, err := client.Dial(ctx)
	if err != nil {
		t.Fatalf("dialing the guest's Squid: %v", err)
	}
	defer func() { _ = conn.Close() }()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	tc := tls.Client(conn, client.TLS)
	if err := tc.HandshakeContext(ctx); err != nil {
		return err
	}
	auth := base64.StdEncoding.EncodeToString([]byte(client.User + ":" + client.Password))
	if _, err := io.WriteString(tc, "GET http://allowed.example/ HTTP/1.1\r\nHost: allowed.example\r\nProxy-Authorization: Basic "+auth+"\r\nConnection: close\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// The test's addresses, in 198.18.0.0/24, a benchmarking range the proxy's guards do not refuse.
const (
	guestIP    = "198.18.0.1" // the guest's interface, where Squid listens
	clientIP   = "198.18.0.2"
	upstreamIP = "198.18.0.3"
	ssmIP      = "198.18.0.4"  // the recording proxy in front of ec2fake's SSM
	publicIP   = "198.18.0.77" // the instance's public address, on none of its interfaces: only IMDS names it
	elasticIP  = "198.18.0.78" // the Elastic IP associated after boot, which replaces it
	guestMAC   = "0e:49:61:0f:c3:11"
)

// testNetns makes the guest's network namespace, with its address on a veth link and IMDS's on loopback,
// and a peer namespace at the link's other end with the client, the upstream and SSM, so that none of those
// is one of the guest's own addresses.
func testNetns(t *testing.T) (guest, peer string) {
	t.Helper()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	guest = "egress-aws-" + hex.EncodeToString(suffix)
	peer = guest + "-peer"
	testutil.AddNetns(t, guest)
	testutil.AddNetns(t, peer)
	testutil.IPIn(t, guest, "link", "add", "eg0", "type", "veth", "peer", "name", "eg1", "netns", peer)
	testutil.IPIn(t, guest, "addr", "add", "169.254.169.254/32", "dev", "lo")
	testutil.IPIn(t, guest, "addr", "add", guestIP+"/24", "dev", "eg0")
	testutil.IPIn(t, guest, "link", "set", "eg0", "up")
	for _, a := range []string{clientIP, upstreamIP, ssmIP} {
		testutil.IPIn(t, peer, "addr", "add", a+"/24", "dev", "eg1")
	}
	testutil.IPIn(t, peer, "link", "set", "eg1", "up")
	return guest, peer
}

// writeGuestFiles puts into the container's upper layer what an EC2 instance has and the image has not:
// names for the test's hosts, and a stand-in for cloud-init's scripts-user module, which runs the user-data
// once per instance (its semaphore in /var/lib/cloud), read from IMDS with a token as cloud-init does on an
// instance that requires IMDSv2, and uncompressed first when it is gzip, as cloud-init does. The image's own cloud-init is off: it would look for a data source in vain.
func writeGuestFiles(t *testing.T, upper string) {
	t.Helper()
	testutil.WriteGuestFiles(t, upper, map[string]string{
		"etc/hosts": "127.0.0.1 localhost\n" + upstreamIP + " allowed.example denied.example report.example\n" +
			guestIP + " own.example\n" + publicIP + " external.example\n" + elasticIP + " eip.example\n",
		"etc/cloud/cloud-init.disabled": "",
		"usr/local/sbin/run-user-data": `#!/bin/sh
set -eu
sem=/var/lib/cloud/instance/sem/user-data
[ -e "$sem" ] && exit 0
token=$(curl -fsS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' http://169.254.169.254/latest/api/token)
curl -fsS -H "X-aws-ec2-metadata-token: $token" http://169.254.169.254/latest/user-data >/run/user-data.raw
# cloud-init uncompresses gzip user-data before it runs it ("User-data formats").
gzip -dc /run/user-data.raw >/run/user-data 2>/dev/null || cp /run/user-data.raw /run/user-data
chmod 0700 /run/user-data
/run/user-data
mkdir -p "$(dirname "$sem")"
touch "$sem"
echo "egress-proxy user-data ran"
`,
		"etc/systemd/system/run-user-data.service": `[Unit]
Description=Run the instance's user-data once, as cloud-init's scripts-user module does
Wants=network-online.target
After=network-online.target squid.service

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/run-user-data
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
`,
	})
	testutil.EnableGuestUnit(t, upper, "run-user-data.service")
}

// paramWriter writes the proxy's parameters as the backend does, with the SDK's SSM client.
type paramWriter struct {
	t    *testing.T
	ctx  context.Context
	c    *ssm.Client
	name string
}

// rendered are the parameters' values for one config: the whole config, as the backend renders it, the
// manifest and parts it packs it into (FormatParts), and the secrets. Rendered once: the password's hash is
// salted, so every rendering has another id.
type rendered struct {
	config   guest.Config
	manifest []byte
	parts    []string
	secrets  []byte
	id       string
}

func (p paramWriter) render(s proxyconf.Settings) rendered {
	p.t.Helper()
	key, err := guest.NewConfigKey()
	if err != nil {
		p.t.Fatal(err)
	}
	config, secrets, _, err := guest.RenderParameters(s, guest.ParameterPath(p.name, ""), key)
	if err != nil {
		p.t.Fatal(err)
	}
	var c guest.Config
	if err := json.Unmarshal(config, &c); err != nil {
		p.t.Fatal(err)
	}
	return p.packed(c, secrets)
}

// packed is the config c packed as the backend packs it, with secrets.
func (p paramWriter) packed(c guest.Config, secrets []byte) rendered {
	p.t.Helper()
	manifest, parts, err := guest.PackConfig(c)
	if err != nil {
		p.t.Fatal(err)
	}
	return rendered{config: c, manifest: manifest, parts: parts, secrets: secrets, id: c.ConfigID}
}

// edited is r with its squid.conf changed by edit, under the id of the files as they are, authenticated
// with r's own key when signed (as a writer holding the key would) and with another key otherwise.
func (p paramWriter) edited(r rendered, edit func(string) string, signed bool) rendered {
	p.t.Helper()
	c := r.config
	var sec guest.Secrets
	if err := json.Unmarshal(r.secrets, &sec); err != nil {
		p.t.Fatal(err)
	}
	c.SquidConf = edit(c.SquidConf)
	c.ConfigID = vmguest.ConfigID([]byte(c.SquidConf), []byte(sec.Htpasswd), []byte(c.TLSCert), []byte(sec.TLSKey), []byte(c.Backstop))
	key, err := base64.StdEncoding.DecodeString(sec.ConfigKey)
	if err != nil {
		p.t.Fatal(err)
	}
	if !signed {
		key = make([]byte, guest.ConfigKeyBytes)
	}
	c.MAC = guest.ConfigMAC(key, guest.ParameterPath(p.name, ""), c)
	return p.packed(c, r.secrets)
}

// broken is r with a squid.conf Squid refuses, authenticated: only Squid can tell.
func (p paramWriter) broken(r rendered) rendered {
	p.t.Helper()
	return p.edited(r, func(c string) string { return c + "http_access allow no_such_acl\n" }, true)
}

// putConfig writes the config's parts, then its manifest, as the backend does.
func (p paramWriter) putConfig(r rendered) {
	p.t.Helper()
	p.putParts(r, len(r.parts))
	p.putManifest(r)
}

// putParts writes the first n of the config's parts.
func (p paramWriter) putParts(r rendered, n int) {
	p.t.Helper()
	for i, part := range r.parts[:n] {
		p.write(guest.PartName(guest.ParameterConfig, i+1), part, ssmtypes.ParameterTypeString)
	}
}

func (p paramWriter) putManifest(r rendered) {
	p.t.Helper()
	p.write(guest.ParameterConfig, string(r.manifest), ssmtypes.ParameterTypeString)
}

func (p paramWriter) putSecrets(r rendered) {
	p.t.Helper()
	p.write(guest.ParameterSecrets, string(r.secrets), ssmtypes.ParameterTypeSecureString)
}

// put writes the config (its parts, then its manifest), then the secrets, as the backend does.
func (p paramWriter) put(r rendered) {
	p.t.Helper()
	p.putConfig(r)
	p.putSecrets(r)
}

func (p paramWriter) write(param, value string, typ ssmtypes.ParameterType) {
	p.t.Helper()
	// As the backend: every value fits a Standard parameter (the parts by construction, the manifest and
	// these secrets by far); SSM would refuse one that does not.
	_, err := p.c.PutParameter(p.ctx, &ssm.PutParameterInput{
		Name: aws.String(guest.ParameterPath(p.name, param)), Value: aws.String(value), Type: typ, Overwrite: aws.Bool(true),
		Tier: ssmtypes.ParameterTierStandard,
	})
	if err != nil {
		p.t.Fatalf("writing %s: %v", param, err)
	}
}

// applied is the config id the guest reported running, "" before its first report.
func (p paramWriter) applied() string {
	p.t.Helper()
	return p.appliedWhole().ConfigID
}

// appliedWhole is what the guest reported, a refusal included.
func (p paramWriter) appliedWhole() guest.Applied {
	p.t.Helper()
	v := p.appliedValue()
	if v == "" {
		return guest.Applied{}
	}
	return guest.ParseApplied(v)
}

// appliedValue is the applied parameter's value, "" before the guest's first report.
func (p paramWriter) appliedValue() string {
	out, err := p.c.GetParameter(p.ctx, &ssm.GetParameterInput{Name: aws.String(guest.ParameterPath(p.name, guest.ParameterApplied))})
	var nf *ssmtypes.ParameterNotFound
	if errors.As(err, &nf) {
		return ""
	}
	if err != nil {
		p.t.Fatalf("reading applied: %v", err)
	}
	return aws.ToString(out.Parameter.Value)
}

// agentError is a line the agent logs when a poll failed (its watch loop names the exception), or Python's
// own report of one it did not catch.
var agentError = regexp.MustCompile(`egress-proxy-agent: [A-Za-z.]*(Error|Exception)\b.*|Traceback \(most recent call last\)`)

// checkAgentLog: nothing in this test is a failure the agent should have to log, not even every IMDS token
// ending (it takes a new one and reads on) or its credentials nearing their expiry (it fetches new ones first).
func checkAgentLog(t *testing.T, g *testutil.Guest) {
	t.Helper()
	for _, m := range agentError.FindAllString(g.FullLog(), -1) {
		t.Errorf("the agent logged a failure: %s", m)
	}
}

// checkModes checks owners and modes of files in the running guest (`stat -c '%U:%G %a'`).
func checkModes(t *testing.T, g *testutil.Guest, want map[string]string) {
	t.Helper()
	for path, w := range want {
		out, err := g.Exec(t, "stat", "-c", "%U:%G %a", path)
		if err != nil || strings.TrimSpace(out) != w {
			t.Errorf("%s in the guest: %v %q, want %s", path, err, strings.TrimSpace(out), w)
		}
	}
}

// checkIMDSBackstop: root in the guest reaches IMDS (the agent does), Squid's user does not, whatever Squid
// decided: the backstop below Squid rejects it.
func checkIMDSBackstop(t *testing.T, g *testutil.Guest) {
	t.Helper()
	curl := []string{"curl", "-sS", "-o", "/dev/null", "--max-time", "20", "-X", "PUT", "-H", "X-aws-ec2-metadata-token-ttl-seconds: 10",
		"http://169.254.169.254/latest/api/token"}
	if out, err := g.Exec(t, curl...); err != nil {
		t.Errorf("root in the guest could not reach IMDS: %v\n%s", err, out)
	}
	out, err := g.Exec(t, append([]string{"runuser", "-u", "proxy", "--"}, curl...)...)
	if err == nil || !strings.Contains(out, "Failed to connect") {
		t.Errorf("Squid's user reaching IMDS: %v %s; want it refused", err, out)
	}
}

// checkIMDSUse: the agent and the user-data runner never read IMDS without a token (IMDSv1), and after every
// token ended the agent got a new one.
func checkIMDSUse(t *testing.T, reqs []imdsfake.Request, tokensEnded time.Time) {
	t.Helper()
	renewed := false
	for _, r := range reqs {
		if r.Method == http.MethodGet && !r.WithToken {
			t.Errorf("IMDS read without a token: %s %s (%d)", r.Method, r.Path, r.Status)
		}
		if r.Method == http.MethodPut && r.Status == http.StatusOK && r.Time.After(tokensEnded) {
			renewed = true
		}
	}
	if !renewed {
		t.Error("the agent took no new token after every token ended")
	}
}

// checkSSMUse: every SSM call was signed with the session token, with credentials IMDS issued that were
// nowhere near their expiry (the agent refreshes them ten minutes before; a minute is left for a slow
// machine), the agent went through several sets of them, polled without decrypting, and wrote applied once
// per config it applied, never more.
func checkSSMUse(t *testing.T, calls []ssmCall, issued []imdsfake.Credentials, appliedIDs, refusedIDs []string) {
	t.Helper()
	expiry := map[string]time.Time{}
	for _, c := range issued {
		expiry[c.Token] = c.Expiration
	}
	used := map[string]bool{}
	var puts, refusals []string
	polls := 0
	for _, c := range calls {
		exp, ok := expiry[c.token]
		switch {
		case !ok:
			t.Errorf("SSM %s signed with session token %q, which IMDS never issued", c.target, c.token)
		case c.time.After(exp.Add(-9 * time.Minute)):
			t.Errorf("SSM %s at %s with credentials expiring at %s: within the agent's margin", c.target, c.time.Format(time.RFC3339), exp.Format(time.RFC3339))
		}
		if !strings.Contains(";"+c.signedHeaders+";", ";x-amz-security-token;") {
			t.Errorf("SSM %s: the session token is not signed (%s)", c.target, c.signedHeaders)
		}
		used[c.token] = true
		switch c.target {
		case "AmazonSSM.PutParameter":
			var in struct{ Name, Value, Type string }
			_ = json.Unmarshal(c.body, &in)
			if a := guest.ParseApplied(in.Value); a.Refused != "" {
				refusals = append(refusals, a.Refused)
			} else {
				puts = append(puts, in.Value)
			}
			if in.Type != "String" || !strings.HasSuffix(in.Name, "/"+guest.ParameterApplied) {
				t.Errorf("the guest wrote %s (%s): it may only write the applied parameter, a String", in.Name, in.Type)
			}
		case "AmazonSSM.GetParameters":
			if bytes.Contains(c.body, []byte(`"WithDecryption": false`)) {
				polls++
			}
		default:
			t.Errorf("the guest called %s", c.target)
		}
	}
	if len(used) < 3 {
		t.Errorf("the agent used %d sets of credentials over the whole test, want it to refresh them as they near their expiry", len(used))
	}
	if polls < 5 {
		t.Errorf("%d polls without decryption, want the agent to watch that way", polls)
	}
	if strings.Join(puts, " ") != strings.Join(appliedIDs, " ") {
		t.Errorf("the guest wrote applied %v, want once per config applied: %v", puts, appliedIDs)
	}
	if strings.Join(refusals, " ") != strings.Join(refusedIDs, " ") {
		t.Errorf("the guest reported refusals of %v, want once per config refused: %v", refusals, refusedIDs)
	}
}

// ssmRecorder forwards SSM calls to ec2fake, keeping the Host the guest signed, and records each.
type ssmRecorder struct {
	mu    sync.Mutex
	calls []ssmCall
}

type ssmCall struct {
	time                         time.Time
	target, token, signedHeaders string
	body                         []byte
}

func (r *ssmRecorder) proxyTo(t *testing.T, target string) http.Handler {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(u)
		pr.Out.Host = pr.In.Host
	}}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		_, signed, _ := strings.Cut(req.Header.Get("Authorization"), "SignedHeaders=")
		signed, _, _ = strings.Cut(signed, ",")
		r.mu.Lock()
		r.calls = append(r.calls, ssmCall{time: time.Now(), target: req.Header.Get("X-Amz-Target"), token: req.Header.Get("X-Amz-Security-Token"), signedHeaders: signed, body: body})
		r.mu.Unlock()
		rp.ServeHTTP(w, req)
	})
}

func (r *ssmRecorder) all() []ssmCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ssmCall(nil), r.calls...)
}
