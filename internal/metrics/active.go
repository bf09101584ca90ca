package metrics

import (
	"fmt"
	"strconv"
	"strings"
)

// What is in flight now: Squid 5.7 logs a request when it ends, so the access log cannot tell how many requests
// and CONNECT tunnels a proxy holds open, and prometheus-squid-exporter 1.10.3 serves no such gauge. Squid's
// cache manager can: its active_requests report has one block a client request in flight, the tunnels among
// them, from the manager port that is open on 127.0.0.1 for the exporter already. ActiveScript reads that
// report every ActiveInterval seconds with bash and awk (in every proxy image: the kubernetes image has no
// curl) and hands one line, ActiveLinePrefix and three counts, to mtail, whose Program sets the three gauges
// from it. A block of the report, as Squid 5.7 writes it (TestActiveRequestsGauges reads the real one):
//
//	Connection: 0x55a80b756a98
//		FD 19, read 65, wrote 39
//		FD desc: Reading next request
//		in: buf 0x55a80b7a8e30, used 0, free 4030
//		remote: 127.0.0.1:54721
//		local: 127.0.0.1:38421
//		nrequests: 1
//	uri allowed.test:33963
//	logType TCP_TUNNEL
//	...
//
// A connection that waits for its next request (an idle keep-alive one) has no block; the report's own request
// has one, on the manager port, and is left out with every other request on the manager and health ports.

// ActiveInterval is how many seconds apart ActiveScript reads the report: the gauges are that old at most.
const ActiveInterval = 10

// ActiveLinePrefix starts the line ActiveScript hands to mtail; no access log line starts so (they start with a
// timestamp or a JSON object), and Program counts it as no log line.
const ActiveLinePrefix = "egress_proxy_active"

// The gauges Program sets from ActiveScript's line.
const (
	// ActiveRequests is the number of client requests in flight, CONNECT tunnels included.
	ActiveRequests = "egress_proxy_active_requests"
	// ActiveTunnels is the number of those that are CONNECT tunnels Squid relays.
	ActiveTunnels = "egress_proxy_active_tunnels"
	// ClientActiveRequestsMax is the number of requests in flight of the client address with the most: how close
	// the busiest client is to max_connections_per_client (no label names the client: one series a proxy).
	ClientActiveRequestsMax = "egress_proxy_client_active_requests_max"
)

// activeAWK reads Squid's active_requests report (after the HTTP response's header) and prints the line; it
// prints nothing and fails when it read no report (the report always has its own request's block). skip holds
// the local ports whose requests are not the clients', each between spaces.
const activeAWK = `!body { if ($0 ~ /^\r?$/) body = 1; next }
/^Connection: / { count(); open = 1; seen = 1; client = ""; port = ""; tunnel = 0; next }
$1 == "remote:" { client = $2; sub(/:[0-9]+$/, "", client); next }
$1 == "local:" { port = $2; sub(/^.*:/, "", port); next }
$1 == "logType" && $2 == "TCP_TUNNEL" { tunnel = 1 }
END {
	count()
	if (!seen) exit 1
	printf "` + ActiveLinePrefix + ` requests=%d tunnels=%d busiest_client=%d\n", requests, tunnels, busiest
}
function count() {
	if (open && !index(skip, " " port " ")) {
		requests++
		tunnels += tunnel
		if (++n[client] > busiest) busiest = n[client]
	}
	open = 0
}`

// ActiveScript is a bash script that reads Squid's active_requests report from the cache manager on
// 127.0.0.1:managerPort every interval seconds (ActiveInterval but in tests), leaving out the requests on
// managerPort and healthPort, and hands ActiveLinePrefix's line to mtail at to: a file, which it replaces
// whole each time (a new file mtail reads from its start, as after a rotation: nothing grows), or
// udp://127.0.0.1:PORT, one datagram a line. It stops at SIGTERM, also as a container's first process.
func ActiveScript(managerPort, healthPort, interval int, to string) string {
	deliver := ">'" + to + ".new' && mv -f '" + to + ".new' '" + to + "'"
	if hostPort, ok := strings.CutPrefix(to, "udp://"); ok {
		host, port, _ := strings.Cut(hostPort, ":")
		deliver = ">/dev/udp/" + host + "/" + port
	}
	return fmt.Sprintf(`# Squid's requests in flight, for mtail (internal/metrics/active.go). Written by terraform-provider-egress.
trap 'exit 0' TERM INT
while :; do
	{
		printf 'GET /squid-internal-mgr/active_requests HTTP/1.0\r\n\r\n' >&3 &&
			timeout 5 awk -v skip=' %d %d ' '
%s' <&3
	} 3<>/dev/tcp/127.0.0.1/%d %s
	sleep %s & wait $!
done
`, managerPort, healthPort, activeAWK, managerPort, deliver, strconv.Itoa(interval))
}
