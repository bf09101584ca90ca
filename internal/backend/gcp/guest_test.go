package gcp

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/secretmanagerfake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// The startup script proved on the proxy image's own Squid and systemd, as Compute Engine's guest environment
// runs it: the image's root tree (make guest-root) boots as a container (systemd-nspawn, an overlay of the
// test's own over the read-only tree) in a network namespace the test makes, where the fake's metadata server
// answers on 169.254.169.254:80 and metadata.google.internal resolves to it. A unit of the test plays
// google-startup-scripts.service: at every boot it fetches the startup-script attribute and runs it as root.
// The proxy is made through the backend against the fake, so the metadata is exactly what Create writes.
//
// Nothing is made in the root network namespace: the guest's namespace holds the metadata server and the
// guest's address; a second namespace, joined to it by a veth pair, holds the upstream web server and the
// client, so that the upstream's address is not one of the guest's own.
//
// The guest lists its own addresses at every boot, and refuses them as destinations even when a name it may
// reach resolves to one: its interface's address, the external address the metadata server names (which is
// on no interface of the VM), and an address added to its interface between two boots.
//
// TLS with a client CA and then issue 39's policy (rule sets by certificate subject, one reported, a deny list)
// are turned on in place, and each request's status and access log line are the policy's.
func TestGuestStartupScriptOnRealSquid(t *testing.T) {
	tree := testutil.GuestRootPrerequisites(t)
	ctx := testutil.GuestContext(t, 15*time.Minute)

	// The proxy, made through the backend: its metadata holds the startup script and the rendered config, and
	// turns guest attributes on (boot 1 turns them off first, to see the report refused).
	fake, sm, b := newTestWithSecrets(t, computefake.Options{})
	// A real guest takes seconds to apply: its reports are polled as in production, within the ration.
	b.guestPollInitial, b.guestPollMax = defaultGuestPollInitial, defaultGuestPollMax
	spec := testSpec("uid-guest", "us-central1-a")
	// With a service account, the password's hash (and at boot 3 the TLS key) is in the proxy's Secret
	// Manager secret, which the script reads with the token the metadata server hands the VM.
	spec.Placement.Options = &Options{ServiceAccount: "proxy@" + testProject + ".iam.gserviceaccount.com"}
	spec.Proxy.AllowedClientCIDRs = []string{"198.18.0.0/24"}
	spec.Proxy.AllowedDestinations = []string{"allowed.example", "own.example", "external.example", "later.example"}
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	fake.MetadataInstance(testProject, "us-central1-a", spec.Name)
	// The script differs from the one Create wrote only in its watch interval (the default's "sleep 10" is
	// TestRenderStartupScript's): 2 seconds, so that each in-place change at boot 3 is applied by the second or
	// third of the backend's polls. At 10 seconds the two changes took 16 and 15 seconds to apply, and their
	// polls used up the ration of guest queries, so that the second Reconfigure then waited 29 more seconds
	// for it. Set before boot 1: at every later boot the watch service starts from the copy an earlier boot made.
	fastWatch, err := gcpguest.RenderStartupScript(gcpguest.StartupScriptOptions{WatchInterval: 2})
	if err != nil {
		t.Fatal(err)
	}
	fake.SetInstanceMetadata(testProject, "us-central1-a", spec.Name, gcpguest.MetadataStartupScript, string(fastWatch))
	configID, _ := metadataValue(fake.Instance(testProject, "us-central1-a", spec.Name), gcpguest.MetadataConfigID)
	applied := func() string {
		return fake.GuestAttribute(testProject, "us-central1-a", spec.Name, gcpguest.GuestAttributeNamespace+"/"+gcpguest.GuestAttributeApplied)
	}

	ns, peer := testNetns(t)
	testutil.ServeInNetns(t, ns, "169.254.169.254:80", fake.MetadataHandler())
	// Secret Manager's public endpoint, which the script calls, over TLS with a certificate the guest trusts.
	smCert := serveTLSInNetns(t, ns, "169.254.169.254:443", secretManagerHost, sm.Handler())
	if _, has := metadataValue(fake.Instance(testProject, "us-central1-a", spec.Name), gcpguest.MetadataHtpasswd); has {
		t.Fatal("the password's hash is in metadata: the guest would not need its secret")
	}
	testutil.ServeInNetns(t, peer, upstreamIP+":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "upstream "+r.Host)
	}))

	upper := t.TempDir()
	writeGuestFiles(t, upper, inst.EgressAddress)
	// Only the test's certificate is trusted in the guest: the secret can come from the fake alone.
	testutil.WriteGuestFiles(t, upper, map[string]string{"etc/ssl/certs/ca-certificates.crt": smCert})
	client := testutil.ProxyClient{Dial: testutil.DialFromNetns(peer, clientIP, guestIP+":3128"), User: "u", Password: "correct-horse-battery"}

	files := []string{proxyconf.ConfPath, proxyconf.HtpasswdPath, "/var/lib/egress-proxy/applied"}
	var first map[string]fileState
	for boot := 1; boot <= 2; boot++ {
		if boot == 2 {
			// An address the guest did not have at its first boot: the second boot must list it.
			testutil.IPIn(t, ns, "addr", "add", laterIP+"/24", "dev", guestLink)
		}
		start := time.Now()
		switch boot {
		case 1:
			// Guest attributes off, as on a VM whose metadata does not turn them on: the script's report is
			// refused by the metadata server, and nothing reaches the API.
			fake.SetInstanceMetadata(testProject, "us-central1-a", spec.Name, MetadataEnableGuestAttributes, "FALSE")
		case 2:
			// On for the whole project and not set on the instance: the project's metadata turns them on.
			fake.SetInstanceMetadata(testProject, "us-central1-a", spec.Name, MetadataEnableGuestAttributes, "")
			fake.SetProjectMetadata(testProject, MetadataEnableGuestAttributes, "TRUE")
		}
		guest := testutil.BootGuest(t, tree, upper, ns, fmt.Sprintf("boot%d", boot))
		if boot == 1 {
			refused := func() bool {
				for _, w := range fake.RefusedGuestWrites() {
					if strings.HasSuffix(w, "/"+spec.Name+" "+gcpguest.GuestAttributeNamespace+"/"+gcpguest.GuestAttributeApplied) {
						return true
					}
				}
				return false
			}
			guest.WaitFor(ctx, t, "boot 1: the guest's report refused while guest attributes are off", refused)
			if got := applied(); got != "" {
				t.Fatalf("boot 1: with guest attributes off the guest's report reached the API: %q", got)
			}
			t.Logf("boot 1: report refused with guest attributes off, %s after start; turning them on as Create does", time.Since(start).Round(time.Second))
			fake.SetInstanceMetadata(testProject, "us-central1-a", spec.Name, MetadataEnableGuestAttributes, "TRUE")
		}
		guest.WaitFor(ctx, t, fmt.Sprintf("boot %d: the guest reports config %s applied", boot, configID), func() bool { return applied() == configID })
		t.Logf("boot %d: config applied and reported %s after start", boot, time.Since(start).Round(time.Second))
		if boot == 1 && !readBySecretManager(sm, "proxy@"+testProject+".iam.gserviceaccount.com") {
			t.Errorf("boot 1: the guest never read its secret with its service account's token\n%s", guest.Log())
		}

		// Without the guard, a request for one of the guest's own addresses would be a 503: nothing listens
		// there on port 80, or (the external address) there is no route to it.
		for _, c := range []struct {
			name     string
			url      string
			auth     bool
			want     int
			fromBoot int
		}{
			{name: "allowed destination", url: "http://allowed.example/", auth: true, want: http.StatusOK},
			{name: "denied destination", url: "http://denied.example/", auth: true, want: http.StatusForbidden},
			{name: "no credentials", url: "http://allowed.example/", want: http.StatusProxyAuthRequired},
			{name: "the guest's interface address", url: "http://own.example/", auth: true, want: http.StatusForbidden},
			{name: "the guest's external address", url: "http://external.example/", auth: true, want: http.StatusForbidden},
			{name: "an address added since the first boot", url: "http://later.example/", auth: true, want: http.StatusForbidden, fromBoot: 2},
		} {
			if boot < c.fromBoot {
				continue
			}
			if got := client.Get(ctx, t, c.url, c.auth); got != c.want {
				t.Errorf("boot %d, %s: %s through the guest's Squid = %d, want %d\n%s", boot, c.name, c.url, got, c.want, guest.Log())
			}
		}
		checkBackstop(t, guest, boot)

		// The 403s above are the own-address guard's: the list the guest wrote at this boot names them.
		own := " " + strings.Join(strings.Fields(statIn(t, upper, proxyconf.OwnAddressesPath).Content), " ") + " "
		want := []string{guestIP, inst.EgressAddress}
		if boot >= 2 {
			want = append(want, laterIP)
		}
		for _, a := range want {
			if !strings.Contains(own, " "+a+" ") {
				t.Errorf("boot %d: the guest's own addresses%slack %s", boot, own, a)
			}
		}

		states := map[string]fileState{}
		for _, f := range files {
			states[f] = statIn(t, upper, f)
		}
		if boot == 1 {
			first = states
		} else {
			// A reboot runs the script again: the config already applied and Squid running, it rewrites
			// nothing (same content, same modification time) and only reports the config again.
			for _, f := range files {
				if states[f] != first[f] {
					t.Errorf("the second boot changed %s: %+v, was %+v", f, states[f], first[f])
				}
			}
		}
		guest.Stop(t)
		// The guest reports again at the next boot: clear what this boot reported.
		if err := fake.SetGuestAttribute(testProject, "us-central1-a", spec.Name, gcpguest.GuestAttributeNamespace+"/"+gcpguest.GuestAttributeApplied, ""); err != nil {
			t.Fatal(err)
		}
	}

	// Boot 3: TLS turned on in place while the guest runs. Its watch service applies the new metadata; the
	// proxy port then speaks TLS only, with the certificate and key the script installed from their own keys.
	guest := testutil.BootGuest(t, tree, upper, ns, "boot3")
	guest.WaitFor(ctx, t, "boot 3: the guest reports config "+configID+" applied", func() bool { return applied() == configID })
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	withTLS := spec.Proxy
	// With a client CA and its CRL, from their own metadata keys: clients present a certificate it signed.
	clientCA := testutil.NewClientCA(t, "egress test client CA")
	clientCRL := clientCA.CRL(t, 1)
	withTLS.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: clientCA.PEM, ClientCRLPEM: clientCRL}
	// A private range allowed in the same change: the guest's backstop follows it.
	withTLS.AllowedPrivateCIDRs = []string{"10.1.0.0/16"}
	if _, err := b.Reconfigure(ctx, inst.ID, withTLS); err != nil {
		t.Fatalf("turning TLS on in place: %v\n%s", err, guest.Log())
	}
	if _, has := metadataValue(fake.Instance(testProject, "us-central1-a", spec.Name), gcpguest.MetadataTLSKey); has {
		t.Error("the TLS key is in metadata: the guest would not need its secret")
	}
	if set, err := guest.Exec(t, "nft", "list", "set", "inet", proxyconf.NftablesTable, "refused_v4"); err != nil ||
		strings.Contains(set, "10.0.0.0/8") || !strings.Contains(set, "10.0.0.0/16") || !strings.Contains(set, "169.254.0.0/16") {
		t.Errorf("the guest's backstop after allowing 10.1.0.0/16 in place (%v): want 10.0.0.0/8 split around it\n%s", err, set)
	}
	checkBackstop(t, guest, 3)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(cert))
	tlsClient := client
	tlsClient.TLS = &tls.Config{RootCAs: roots, ServerName: "proxy.test", MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{clientCA.ClientCertificate(t, "workload-1")}}
	for url, want := range map[string]int{"http://allowed.example/": http.StatusOK, "http://denied.example/": http.StatusForbidden} {
		if got := tlsClient.Get(ctx, t, url, true); got != want {
			t.Errorf("with TLS: %s through the guest's Squid = %d, want %d\n%s", url, got, want, guest.Log())
		}
	}
	for _, f := range []struct {
		path, content string
		mode          os.FileMode
	}{{proxyconf.TLSCertPath, cert, 0o644}, {proxyconf.TLSKeyPath, key, 0o640}, {proxyconf.ClientCAPath, clientCA.PEM, 0o644}, {proxyconf.ClientCRLPath, clientCRL, 0o644}} {
		fi, err := os.Stat(filepath.Join(upper, f.path))
		if err != nil {
			t.Errorf("%s in the guest: %v", f.path, err)
			continue
		}
		if fi.Mode().Perm() != f.mode || statIn(t, upper, f.path).Content != f.content {
			t.Errorf("%s in the guest: mode %v, want the content from metadata or the secret with mode %v", f.path, fi.Mode().Perm(), f.mode)
		}
	}

	// Issue 39's policy turned on in place: rule sets by certificate subject, "payments" enforced and
	// "workloads" reported, and a deny list. The script must install it and Squid judge by it: a reported
	// client's unlisted destination is forwarded and logged would_deny, an enforced one's refused, the denied
	// destination refused in both modes.
	withPolicy := withTLS
	withPolicy.AllowedDestinations = []string{"allowed.example", "report.example"}
	withPolicy.DeniedDestinations = []string{"denied.example"}
	withPolicy.RuleSets = []proxyconf.RuleSet{
		{Name: "payments", Clients: proxyconf.RuleSetClients{CertificateSubjects: []string{"payments"}}, Destinations: []string{"allowed.example"}},
		{Name: "workloads", Clients: proxyconf.RuleSetClients{CertificateSubjects: []string{"workload-1"}}, Destinations: []string{"allowed.example"},
			Mode: proxyconf.RuleSetReport},
	}
	if _, err := b.Reconfigure(ctx, inst.ID, withPolicy); err != nil {
		t.Fatalf("turning rule sets on in place: %v\n%s", err, guest.Log())
	}
	paymentsClient := tlsClient
	paymentsTLS := tlsClient.TLS.Clone()
	paymentsTLS.Certificates = []tls.Certificate{clientCA.ClientCertificate(t, "payments")}
	paymentsClient.TLS = paymentsTLS
	for _, c := range []struct {
		name                      string
		client                    testutil.ProxyClient
		host                      string
		want                      int
		ruleSet, decision, reason string
	}{
		{"workload-1", tlsClient, "allowed.example", http.StatusOK, "workloads", "allow", "-"},
		{"workload-1", tlsClient, "report.example", http.StatusOK, "workloads", "would_deny", proxyconf.ReasonDestinationNotAllowed},
		{"workload-1", tlsClient, "denied.example", http.StatusForbidden, "-", "deny", proxyconf.ReasonDeniedDestination},
		{"payments", paymentsClient, "report.example", http.StatusForbidden, "payments", "deny", proxyconf.ReasonDestinationNotAllowed},
	} {
		// Only the lines after this request's: the boots before asked for these hosts too.
		before := statIn(t, upper, proxyconf.AccessLogPath).Content
		if got := c.client.Get(ctx, t, "http://"+c.host+"/", true); got != c.want {
			t.Errorf("with rule sets, %s: %s through the guest's Squid = %d, want %d\n%s", c.name, c.host, got, c.want, guest.Log())
		}
		// Found by its host alone, whatever its status, so that a wrong one fails the check below and not the wait.
		want := fmt.Sprintf(" host=%s port=80 ", c.host)
		var line string
		guest.WaitFor(ctx, t, "the access log's line for "+c.name+"'s request for "+c.host, func() bool {
			for _, l := range strings.Split(strings.TrimPrefix(statIn(t, upper, proxyconf.AccessLogPath).Content, before), "\n") {
				if strings.Contains(l, want) {
					line = l
				}
			}
			return line != ""
		})
		if wantFields := fmt.Sprintf("ruleset=%s decision=%s", c.ruleSet, c.decision); !strings.Contains(line, wantFields) ||
			!strings.Contains(line, " reason="+c.reason+" ") || !strings.Contains(line, fmt.Sprintf(" status=%d ", c.want)) {
			t.Errorf("with rule sets, %s: %s logged %q, want status=%d %s reason=%s", c.name, c.host, line, c.want, wantFields, c.reason)
		}
	}
	guest.Stop(t)
}

// checkBackstop: the backstop below Squid, which the guest loaded at this boot before Squid started, keeps a
// program running as the proxy user (Squid's) from the metadata server, which root in the guest reaches (the
// startup script itself reads it there), and counts what it refused. The programs run inside the container,
// with its own tools, through nsenter.
func checkBackstop(t *testing.T, g *testutil.Guest, boot int) {
	t.Helper()
	metadata := "http://169.254.169.254/computeMetadata/v1/instance/attributes/"
	curl := []string{"curl", "-sS", "-o", "/dev/null", "--max-time", "20", "-H", "Metadata-Flavor: Google", metadata}
	if out, err := g.Exec(t, curl...); err != nil {
		t.Errorf("boot %d: root in the guest could not reach the metadata server: %v\n%s", boot, err, out)
	}
	out, err := g.Exec(t, append([]string{"runuser", "-u", "proxy", "--"}, curl...)...)
	if err == nil || !strings.Contains(out, "Failed to connect") {
		t.Errorf("boot %d: the proxy user reaching the metadata server: %v %s; want it refused", boot, err, out)
	}
	rules, err := g.Exec(t, "nft", "list", "chain", "inet", proxyconf.NftablesTable, "from_proxy")
	if err != nil || !strings.Contains(rules, "@refused_v4 counter packets") || strings.Contains(rules, "@refused_v4 counter packets 0 ") {
		t.Errorf("boot %d: the backstop's chain in the guest (%v):\n%s", boot, err, rules)
	}
}

// writeGuestFiles puts into the container's upper layer what a GCE VM has and the image has not: the metadata
// server's name, the guest environment's unit running the startup script, and no cloud-init (which would look
// for a data source in vain and only slow the boot).
func writeGuestFiles(t *testing.T, upper, externalIP string) {
	t.Helper()
	unit := `[Unit]
Description=Run the startup-script metadata attribute, as the GCE guest environment does
Wants=network-online.target
# On a VM the guest environment and Squid start in either order; here Squid comes first, so that a reboot
# with the config already applied shows the script changing nothing at all.
After=network-online.target squid.service

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'curl -fsS -H "Metadata-Flavor: Google" http://metadata.google.internal/computeMetadata/v1/instance/attributes/startup-script >/run/startup-script && exec /bin/sh /run/startup-script'
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
`
	testutil.WriteGuestFiles(t, upper, map[string]string{
		"etc/hosts": "127.0.0.1 localhost\n169.254.169.254 metadata.google.internal " + secretManagerHost + "\n" + loggingIP + " " + loggingHost + "\n" +
			upstreamIP + " allowed.example denied.example report.example\n" +
			guestIP + " own.example\n" + externalIP + " external.example\n" + laterIP + " later.example\n",
		"etc/systemd/system/google-startup-scripts.service": unit,
		"etc/cloud/cloud-init.disabled":                     "",
	})
	testutil.EnableGuestUnit(t, upper, "google-startup-scripts.service")
}

type fileState struct {
	Content string
	ModTime time.Time
}

// statIn reads a file the guest must have written, from the upper layer.
func statIn(t *testing.T, upper, name string) fileState {
	t.Helper()
	content, mod, ok := testutil.StatIn(t, upper, name)
	if !ok {
		t.Fatalf("the guest did not write %s", name)
	}
	return fileState{Content: content, ModTime: mod}
}

// The guest test's addresses, all in 198.18.0.0/24, a benchmarking range the proxy's guards do not refuse.
const (
	guestIP    = "198.18.0.1" // the guest's interface, where Squid listens
	clientIP   = "198.18.0.2"
	upstreamIP = "198.18.0.3"
	laterIP    = "198.18.0.9" // added to the guest's interface between its first and second boot
	guestLink  = "eg0"
)

// testNetns makes two network namespaces of the test's own joined by a veth pair: the guest's, with its
// address on the link and the metadata server's on loopback, and the peer, with the client's and the
// upstream's addresses.
func testNetns(t *testing.T) (guest, peer string) {
	t.Helper()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	guest = "egress-gcp-" + hex.EncodeToString(suffix)
	peer = guest + "-peer"
	testutil.AddNetns(t, guest)
	testutil.AddNetns(t, peer)
	testutil.IPIn(t, guest, "link", "add", guestLink, "type", "veth", "peer", "name", "eg1", "netns", peer)
	testutil.IPIn(t, guest, "addr", "add", "169.254.169.254/32", "dev", "lo")
	testutil.IPIn(t, guest, "addr", "add", guestIP+"/24", "dev", guestLink)
	testutil.IPIn(t, guest, "link", "set", guestLink, "up")
	for _, a := range []string{clientIP, upstreamIP} {
		testutil.IPIn(t, peer, "addr", "add", a+"/24", "dev", "eg1")
	}
	testutil.IPIn(t, peer, "link", "set", "eg1", "up")
	return guest, peer
}

// secretManagerHost is Secret Manager's public endpoint, where the startup script reads the proxy's secret.
const secretManagerHost = "secretmanager.googleapis.com"

// serveTLSInNetns serves h over TLS at address in netns, with a certificate for host made here, and returns
// the certificate for the guest to trust.
func serveTLSInNetns(t *testing.T, netns, address, host string, h http.Handler) string {
	t.Helper()
	certPEM, keyPEM := testutil.SelfSignedPEM(t, host)
	pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		t.Fatal(err)
	}
	l, err := testutil.ListenInNetns(netns, "tcp", address)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
	go func() {
		_ = srv.Serve(tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}))
	}()
	t.Cleanup(func() { _ = srv.Close() })
	return certPEM
}

// readBySecretManager says whether the service account email read a secret's version, and was answered.
func readBySecretManager(sm *secretmanagerfake.Server, email string) bool {
	for _, r := range sm.Requests() {
		if r.Member == "serviceAccount:"+email && strings.HasSuffix(r.Path, ":access") && r.Status == http.StatusOK {
			return true
		}
	}
	return false
}
