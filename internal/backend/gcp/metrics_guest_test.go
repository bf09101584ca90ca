package gcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/metrics"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/metricstest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// outsiderIP is a client in the peer namespace outside every metrics range the guest tests give.
const outsiderIP = "198.18.0.5"

// checkMetricsInGuest turns metrics on in place (Reconfigure) on a guest that runs (booted as in
// TestGuestShipsAccessLogToCloudLogging, whose spec logs JSON), for the client alone: the startup script's
// watcher runs Debian's mtail and prometheus-squid-exporter from the image, mtail's egress_proxy_requests_total
// moves by exactly the requests sent through Squid, the exporter reads Squid's cache manager (squid_up 1), and
// a client outside the metrics ranges is refused on both ports. Then the ranges widen to that client and mtail
// moves to another port, in place: the outsider is served there, and the old port is closed. The caller turns
// metrics off (checkMetricsOffInGuest).
func checkMetricsInGuest(ctx context.Context, t *testing.T, b *Backend, guest *testutil.Guest, peer string, inst backend.Instance,
	spec *backend.Spec, client testutil.ProxyClient,
) {
	t.Helper()
	// Within a bound of its own: each step takes seconds.
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	testutil.IPIn(t, peer, "addr", "add", outsiderIP+"/24", "dev", "eg1")
	spec.Proxy.Metrics = &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{clientIP + "/32"}}
	defer func() {
		if t.Failed() {
			out, _ := guest.Exec(t, "journalctl", "--no-pager", "-n", "60", "-u", "egress-proxy-watch.service", "-u", vmguest.MtailUnit, "-u", vmguest.SquidExporterUnit)
			t.Logf("the metrics units' journal:\n%s", out)
			out, _ = guest.Exec(t, "sh", "-c", "cat /var/lib/egress-proxy/applied; ls -la /etc/systemd/system/mtail.service.d /etc/mtail; systemctl status mtail prometheus-squid-exporter; curl -sS -H 'Metadata-Flavor: Google' http://169.254.169.254/computeMetadata/v1/instance/attributes/egress-config-id; echo; curl -sS -H 'Metadata-Flavor: Google' http://169.254.169.254/computeMetadata/v1/instance/attributes/egress-mtail-dropin; journalctl --no-pager -n 40")
			t.Logf("guest state:\n%s", out)
		}
	}()
	start := time.Now()
	if _, err := b.Reconfigure(ctx, inst.ID, spec.Proxy); err != nil {
		t.Fatalf("turning metrics on in place: %v\n%s", err, guest.Log())
	}
	port, squidPort := spec.Proxy.Metrics.Ports()
	mtailAt, exporterAt := net.JoinHostPort(guestIP, strconv.Itoa(port)), net.JoinHostPort(guestIP, strconv.Itoa(squidPort))
	var fromExporter metricstest.Samples
	guest.WaitFor(ctx, t, "mtail and the Squid exporter to answer the metrics client", func() bool {
		_, err1 := scrapeFrom(ctx, peer, clientIP, mtailAt)
		_, err2 := scrapeFrom(ctx, peer, clientIP, exporterAt)
		return err1 == nil && err2 == nil
	})
	t.Logf("metrics on: both programs answer %s after the update began", time.Since(start).Round(time.Second))
	guest.WaitFor(ctx, t, "the exporter to read Squid's cache manager (squid_up 1)", func() bool {
		s, err := scrapeFrom(ctx, peer, clientIP, exporterAt)
		fromExporter = s
		return err == nil && s["squid_up"] == 1
	})
	if _, ok := fromExporter["squid_client_http_requests_total"]; !ok {
		t.Errorf("the exporter serves no squid_client_http_requests_total")
	}
	for _, at := range []string{mtailAt, exporterAt} {
		if err := connectFrom(ctx, peer, outsiderIP, at); err == nil {
			t.Errorf("a client outside the metrics ranges connected to %s", at)
		}
	}

	// mtail reads the log from its end: a request of its own first, counted once mtail is at the end.
	requests := func() (allow, deny float64) {
		s, err := scrapeFrom(ctx, peer, clientIP, mtailAt)
		if err != nil {
			return -1, -1
		}
		return s[metricstest.Series(metrics.RequestsTotal, "decision", "allow")], s[metricstest.Series(metrics.RequestsTotal, "decision", "deny")]
	}
	before, _ := requests()
	client.Get(ctx, t, "http://allowed.example/", true)
	guest.WaitFor(ctx, t, "mtail to count a first request", func() bool { a, _ := requests(); return a > before })
	allow0, deny0 := requests()
	const allowed, denied = 3, 2
	for range allowed {
		if got := client.Get(ctx, t, "http://allowed.example/", true); got != http.StatusOK {
			t.Errorf("allowed.example through the guest's Squid = %d", got)
		}
	}
	for range denied {
		if got := client.Get(ctx, t, "http://denied.example/", true); got != http.StatusForbidden {
			t.Errorf("denied.example through the guest's Squid = %d", got)
		}
	}
	var allow, deny float64
	guest.WaitFor(ctx, t, fmt.Sprintf("mtail to count %d allowed and %d denied requests", allowed, denied), func() bool {
		allow, deny = requests()
		return allow-allow0 >= allowed && deny-deny0 >= denied
	})
	if allow-allow0 != allowed || deny-deny0 != denied {
		t.Errorf("%s moved by allow %v, deny %v; want exactly %d and %d", metrics.RequestsTotal, allow-allow0, deny-deny0, allowed, denied)
	}

	// Widened to the outsider, mtail moved: in place, the outsider is served on the new port and the old one
	// is closed.
	spec.Proxy.Metrics = &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{clientIP + "/32", outsiderIP + "/32"}, Port: 3904}
	if _, err := b.Reconfigure(ctx, inst.ID, spec.Proxy); err != nil {
		t.Fatalf("moving mtail in place: %v\n%s", err, guest.Log())
	}
	moved := net.JoinHostPort(guestIP, "3904")
	guest.WaitFor(ctx, t, "mtail to answer the widened range on its new port", func() bool {
		_, err := scrapeFrom(ctx, peer, outsiderIP, moved)
		return err == nil
	})
	if _, err := scrapeFrom(ctx, peer, outsiderIP, exporterAt); err != nil {
		t.Errorf("the exporter refuses the widened range: %v", err)
	}
	if err := connectFrom(ctx, peer, clientIP, mtailAt); err == nil {
		t.Errorf("mtail's old port %s still takes connections", mtailAt)
	}
	t.Logf("metrics on, counted and moved in place in %s", time.Since(start).Round(time.Second))
}

// checkMetricsOffInGuest waits for the guest to stop both programs once metrics are off, and for their ports
// to close to the client that could scrape them.
func checkMetricsOffInGuest(ctx context.Context, t *testing.T, guest *testutil.Guest, peer string) {
	t.Helper()
	guest.WaitFor(ctx, t, "the guest stops mtail and the Squid exporter", func() bool {
		out, _ := guest.Exec(t, append([]string{"systemctl", "is-active"}, vmguest.MetricsUnits...)...)
		return strings.Count(out, "inactive") == len(vmguest.MetricsUnits)
	})
	for _, at := range []string{net.JoinHostPort(guestIP, "3904"), net.JoinHostPort(guestIP, strconv.Itoa(proxyconf.DefaultSquidMetricsPort))} {
		if err := connectFrom(ctx, peer, clientIP, at); err == nil {
			t.Errorf("metrics off: %s still takes connections", at)
		}
	}
	for _, p := range vmguest.MetricsPaths {
		if out, err := guest.Exec(t, "test", "-e", p); err == nil {
			t.Errorf("metrics off: %s is still in the guest %s", p, out)
		}
	}
}

// connectFrom opens a TCP connection to address from localIP in netns and reads from it until the peer
// answers or closes: nil only for a connection that stays open (a reset by the backstop is an error).
func connectFrom(ctx context.Context, netns, localIP, address string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := testutil.DialFromNetns(netns, localIP, address)(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil // open, waiting for a request
		}
		return err
	}
	return nil
}

// scrapeFrom reads http://address/metrics from localIP in netns, without mtail's prog label and summed over
// reason and rule_set (and the exporter's host label, the cache manager's address).
func scrapeFrom(ctx context.Context, netns, localIP, address string) (metricstest.Samples, error) {
	return metricstest.TryScrapeFromNetns(ctx, netns, localIP, address, "prog", "reason", "rule_set", "host")
}
