# shellcheck shell=bash disable=SC2154
# The measurements of one data-plane subject, shared by scripts/bench-dataplane.sh (network namespaces) and
# scripts/bench-dataplane-k8s.sh (pods), so that both tables come from the same steps. Sourced, not run.
#
# The sourcing script defines start_proxy SUBJECT (sets proxy_ip, proxy_url, proxy_pid, auth_file, ca),
# stop_proxy SUBJECT, client COMMAND... (runs where the client runs) and record SUBJECT KIND (appends its input
# to the results), and sets bench, seconds, held, sources, client_threads, tmp, results, origin_url (the
# origin's HTTP URL), origin_tunnel (the host:port a tunnel reaches) and proxy_name (the name on the proxy's
# certificate when its address is not, or "").

# wrk_script prints the Lua script wrk runs: through a forward proxy a request names its destination in full,
# and carries the proxy's login when it asks for one; done() prints what the table reads.
wrk_script() {
	cat <<'LUA'
-- Through a forward proxy a request names its destination in full; BENCH_TARGET is that URL, the Host its
-- host. BENCH_PROXY_AUTH is the Proxy-Authorization value, when the proxy asks for a login.
local target = os.getenv("BENCH_TARGET")
if target and target ~= "" then
	wrk.path = target
	wrk.headers["Host"] = target:match("^%a+://([^/]+)")
end
local auth = os.getenv("BENCH_PROXY_AUTH")
if auth and auth ~= "" then
	wrk.headers["Proxy-Authorization"] = auth
end
function done(summary, latency, requests)
	local e = summary.errors
	io.write(string.format("wrk-result requests=%d seconds=%.6f connect=%d read=%d write=%d status=%d timeout=%d\n",
		summary.requests, summary.duration / 1e6, e.connect, e.read, e.write, e.status, e.timeout))
end
LUA
}

# measure SUBJECT: every figure of a subject, into the results: memory first, on a proxy that has served
# nothing yet; then requests and tunnels at saturation; then the latency added at half of each, through the
# proxy and straight at the same rate.
measure() {
	local s=$1 proxy_args=() wrk_url hey_proxy=() auth="" rate
	[ -f "$tmp/proxy.lua" ] || wrk_script >"$tmp/proxy.lua"
	if [ "$s" = direct ]; then
		wrk_url=$origin_url
	else
		start_proxy "$s"
		auth=$(cat "$auth_file")
		proxy_args=(-proxy "$proxy_ip:3128" -auth-file "$auth_file")
		[ -n "$ca" ] && proxy_args+=(-proxy-ca "$ca")
		[ -n "$ca" ] && [ -n "$proxy_name" ] && proxy_args+=(-proxy-name "$proxy_name")
		wrk_url=$proxy_url/
		hey_proxy=(-x "$proxy_url")
		[ -n "$auth" ] && hey_proxy+=(-H "Proxy-Authorization: $auth")
		client "$bench" hold "${proxy_args[@]}" -target "$origin_tunnel" -sources "$sources" -n "$held" -pid "$proxy_pid" | record "$s" hold
	fi
	log "$s: requests at saturation"
	BENCH_TARGET=$([ "$s" = direct ] || echo "$origin_url") BENCH_PROXY_AUTH=$auth \
		client wrk -t "$client_threads" -c 64 -d "${seconds}s" --timeout 10s -s "$tmp/proxy.lua" "$wrk_url" >"$tmp/$s.wrk" 2>&1 ||
		{ cat "$tmp/$s.wrk" >&2; die "$s: wrk failed"; }
	grep '^wrk-result ' "$tmp/$s.wrk" | sed 's/^wrk-result //' | record "$s" http
	log "$s: tunnels at saturation"
	client "$bench" tunnels "${proxy_args[@]}" -target "$origin_tunnel" -sources "$sources" -duration "${seconds}s" | record "$s" tunnels
	if [ "$s" != direct ]; then
		rate=$("$bench" dataplane-half "$s" http <"$results")
		log "$s: latency at $rate requests/s, through it and straight"
		# hey's -q is per worker: 10 workers on 10 connections.
		client hey -z "${seconds}s" -c 10 -q "$(awk -v r="$rate" 'BEGIN { printf "%.3f", r / 10 }')" -o csv "${hey_proxy[@]}" "$origin_url" >"$tmp/$s.hey.csv"
		"$bench" hey-summary -seconds "$seconds" <"$tmp/$s.hey.csv" | record "$s" http-half
		client hey -z "${seconds}s" -c 10 -q "$(awk -v r="$rate" 'BEGIN { printf "%.3f", r / 10 }')" -o csv "$origin_url" >"$tmp/$s.floor.csv"
		"$bench" hey-summary -seconds "$seconds" <"$tmp/$s.floor.csv" | record "$s" http-half-floor
		rate=$("$bench" dataplane-half "$s" tunnels <"$results")
		log "$s: tunnel latency at $rate tunnels/s, through it and straight"
		client "$bench" tunnels "${proxy_args[@]}" -target "$origin_tunnel" -sources "$sources" -duration "${seconds}s" -rate "$rate" | record "$s" tunnels-half
		client "$bench" tunnels -target "$origin_tunnel" -sources "$sources" -duration "${seconds}s" -rate "$rate" | record "$s" tunnels-half-floor
		stop_proxy "$s"
	fi
}

# measure_all SUBJECT...: measures each subject in turn, prints the table (kept in $OUT when set) and fails if
# any subject saw an error or a refusal.
measure_all() {
	local s
	for s in "$@"; do
		measure "$s"
	done
	log "load average at end: $(cat /proc/loadavg)"
	"$bench" dataplane-table <"$results" | tee "$tmp/table.md"
	if [ -n "${OUT:-}" ]; then
		mkdir -p "$OUT"
		cp "$results" "$tmp/table.md" "$OUT/"
	fi
	"$bench" dataplane-check "$@" <"$results"
}
