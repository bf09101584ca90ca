package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// scripts/bench-dataplane.sh records what each tool printed for a subject (a proxy, or "direct") as lines of
// the subject, what was measured and the tool's key=value figures:
//
//	SUBJECT http key=value...               wrk at saturation: requests, seconds, and its error counts
//	SUBJECT tunnels key=value...            bench tunnels at saturation: tunnels, seconds
//	SUBJECT http-half key=value...          hey at half the subject's requests/s: n, bad, seconds, p50_ms, p99_ms
//	SUBJECT http-half-floor key=value...    the same rate straight to the origin
//	SUBJECT tunnels-half key=value...       bench tunnels at half the subject's tunnels/s: tunnels, p50_ms, p99_ms
//	SUBJECT tunnels-half-floor key=value... the same rate straight to the origin
//	SUBJECT hold key=value...               bench hold: rss_idle_kib, rss_held_kib, held
//
// dataplane-half and dataplane-table read them.
type dataplaneResults struct {
	subjects []string                                // in the order first recorded
	figures  map[string]map[string]map[string]string // subject, measurement, key: value
}

func readDataplaneResults(r io.Reader) (*dataplaneResults, error) {
	res := &dataplaneResults{figures: map[string]map[string]map[string]string{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 3 {
			return nil, fmt.Errorf("results line %d: want a subject, a measurement and figures, got %q", n, sc.Text())
		}
		subject, what := fields[0], fields[1]
		if res.figures[subject] == nil {
			res.figures[subject] = map[string]map[string]string{}
			res.subjects = append(res.subjects, subject)
		}
		kv := map[string]string{}
		for _, f := range fields[2:] {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				return nil, fmt.Errorf("results line %d: %q is not key=value", n, f)
			}
			if _, err := strconv.ParseFloat(v, 64); err != nil {
				return nil, fmt.Errorf("results line %d: %s is not a number", n, f)
			}
			kv[k] = v
		}
		res.figures[subject][what] = kv
	}
	return res, sc.Err()
}

// figure is one figure, and whether it was recorded.
func (r *dataplaneResults) figure(subject, what, key string) (float64, bool) {
	v, ok := r.figures[subject][what][key]
	if !ok {
		return 0, false
	}
	return mustNumber(v), true
}

// rate is a measurement's count over its seconds: requests/s or tunnels/s.
func (r *dataplaneResults) rate(subject, what string) (float64, bool) {
	count := map[string]string{"http": "requests", "tunnels": "tunnels", "http-half": "n", "http-half-floor": "n",
		"tunnels-half": "tunnels", "tunnels-half-floor": "tunnels"}[what]
	n, ok1 := r.figure(subject, what, count)
	s, ok2 := r.figure(subject, what, "seconds")
	if !ok1 || !ok2 || s <= 0 {
		return 0, false
	}
	return n / s, true
}

// runDataplaneHalf prints half the rate SUBJECT reached at saturation in MEASUREMENT (http or tunnels), a
// whole number of requests or tunnels a second, at least 1: the load its latency is measured at.
func runDataplaneHalf(_ context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 2 || args[1] != "http" && args[1] != "tunnels" {
		return fmt.Errorf("%w: dataplane-half takes SUBJECT http|tunnels", errUsage)
	}
	res, err := readDataplaneResults(stdin)
	if err != nil {
		return err
	}
	r, ok := res.rate(args[0], args[1])
	if !ok {
		return fmt.Errorf("the results have no %s rate of %s", args[1], args[0])
	}
	_, err = fmt.Fprintln(stdout, max(1, int(math.Round(r/2))))
	return err
}

// runHeySummary reads hey's CSV output (-o csv: one line per answer, its time in seconds first and its status
// code seventh) and prints n (answers), bad (answers other than 200) and their p50 and p99 in milliseconds,
// with -seconds, the run's length, for the rate. hey leaves requests that failed without an answer out of its
// CSV: a rate below the one asked for shows them.
func runHeySummary(_ context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlagSet("hey-summary")
	seconds := fs.Float64("seconds", 0, "the run's length")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 || *seconds <= 0 {
		return fmt.Errorf("%w: hey-summary takes -seconds, and hey's CSV on standard input", errUsage)
	}
	rd := csv.NewReader(stdin)
	rd.FieldsPerRecord = -1
	var times []time.Duration
	bad := 0
	for line := 1; ; line++ {
		rec, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if line == 1 && rec[0] == "response-time" {
			continue // the heading
		}
		if len(rec) < 7 {
			return fmt.Errorf("hey CSV line %d: want at least 7 fields, got %d", line, len(rec))
		}
		secs, err1 := strconv.ParseFloat(rec[0], 64)
		status, err2 := strconv.Atoi(rec[6])
		if err1 != nil || err2 != nil {
			return fmt.Errorf("hey CSV line %d: %q", line, strings.Join(rec, ","))
		}
		times = append(times, time.Duration(secs*float64(time.Second)))
		if status != 200 {
			bad++
		}
	}
	_, err := fmt.Fprintf(stdout, "n=%d bad=%d seconds=%s p50_ms=%.3f p99_ms=%.3f\n", len(times), bad,
		strconv.FormatFloat(*seconds, 'f', -1, 64), ms(percentile(times, 50)), ms(percentile(times, 99)))
	return err
}

// Subjects the table compares with: plain Squid is what the targets are set against; tinyproxy, what the
// rendered config must beat.
const (
	subjectDirect     = "direct"
	subjectPlainSquid = "squid-plain"
	subjectLarge      = "rendered-large"
	subjectTinyproxy  = "tinyproxy"
)

// runDataplaneTable prints the benchmark's table from its results: per subject the requests/s and tunnels/s
// at saturation with their ratio to plain Squid's, the latency each adds over the origin straight at half
// that load (the same rate straight to the origin is the floor), its memory idle and with 1,000 tunnels
// open; then the targets, met or not, and what TLS on the proxy port costs.
func runDataplaneTable(_ context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 0 {
		return fmt.Errorf("%w: dataplane-table takes no arguments", errUsage)
	}
	res, err := readDataplaneResults(stdin)
	if err != nil {
		return err
	}
	return dataplaneTable(stdout, res)
}

// A subject the run left out shows as "-", and so do the ratios to it and the targets that need it.
func dataplaneTable(w io.Writer, res *dataplaneResults) error {
	num := func(x float64, ok bool, decimals int) string {
		if !ok {
			return "-"
		}
		return cFixed(x, decimals)
	}
	ratio := func(subject, what string) string {
		a, ok1 := res.rate(subject, what)
		b, ok2 := res.rate(subjectPlainSquid, what)
		if !ok1 || !ok2 || b == 0 {
			return "-"
		}
		return quotient(a, b)
	}
	var b strings.Builder
	b.WriteString("\n| subject | requests/s | /squid | tunnels/s | /squid | requests/s at half load | added p50 ms | added p99 ms | tunnels/s at half load | tunnel added p50 ms | tunnel added p99 ms | RSS idle MiB | RSS, 1,000 tunnels MiB |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, s := range res.subjects {
		httpRate, okH := res.rate(s, "http")
		tunRate, okT := res.rate(s, "tunnels")
		halfRate, okHH := res.rate(s, "http-half")
		tunHalf, okTH := res.rate(s, "tunnels-half")
		p50, ok50 := res.added(s, "http-half", "p50_ms")
		p99, ok99 := res.added(s, "http-half", "p99_ms")
		t50, okT50 := res.added(s, "tunnels-half", "p50_ms")
		t99, okT99 := res.added(s, "tunnels-half", "p99_ms")
		idle, okI := res.figure(s, "hold", "rss_idle_kib")
		held, okR := res.figure(s, "hold", "rss_held_kib")
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s,
			num(httpRate, okH, 0), ratio(s, "http"), num(tunRate, okT, 0), ratio(s, "tunnels"),
			num(halfRate, okHH, 0), num(p50, ok50, 2), num(p99, ok99, 2),
			num(tunHalf, okTH, 0), num(t50, okT50, 2), num(t99, okT99, 2),
			num(idle/1024, okI, 1), num(held/1024, okR, 1))
	}
	b.WriteString("\n")
	for _, line := range res.targets() {
		b.WriteString(line + "\n")
	}
	for _, line := range res.tlsCost() {
		b.WriteString(line + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// added is the latency a subject adds over the origin straight at the same rate: its figure less the floor's.
func (r *dataplaneResults) added(subject, what, key string) (float64, bool) {
	v, ok1 := r.figure(subject, what, key)
	floor, ok2 := r.figure(subject, what+"-floor", key)
	if !ok1 || !ok2 {
		return 0, false
	}
	return v - floor, true
}

// targets are issue 42's, each said met or missed with its figures: the large rendered config within 0.9x of
// plain Squid's requests/s and tunnels/s, at most 1 ms more added p99 than plain Squid's at half load, and
// ahead of tinyproxy on both rates.
func (r *dataplaneResults) targets() []string {
	var out []string
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	for _, what := range []string{"http", "tunnels"} {
		unit := map[string]string{"http": "requests/s", "tunnels": "tunnels/s"}[what]
		large, ok1 := r.rate(subjectLarge, what)
		plain, ok2 := r.rate(subjectPlainSquid, what)
		if ok1 && ok2 && plain > 0 {
			out = append(out, fmt.Sprintf("target: %s %s within 0.9x of %s: %s (%s)", subjectLarge, unit, subjectPlainSquid,
				quotient(large, plain), verdict(large >= 0.9*plain)))
		}
		tiny, ok3 := r.rate(subjectTinyproxy, what)
		if ok1 && ok3 && tiny > 0 {
			out = append(out, fmt.Sprintf("target: %s %s ahead of %s: %s (%s)", subjectLarge, unit, subjectTinyproxy,
				quotient(large, tiny), verdict(large > tiny)))
		}
	}
	for _, what := range []string{"http-half", "tunnels-half"} {
		large, ok1 := r.added(subjectLarge, what, "p99_ms")
		plain, ok2 := r.added(subjectPlainSquid, what, "p99_ms")
		if ok1 && ok2 {
			out = append(out, fmt.Sprintf("target: %s added p99 (%s) at most 1 ms over %s's: %+.2f ms (%s)", subjectLarge,
				map[string]string{"http-half": "requests", "tunnels-half": "tunnels"}[what], subjectPlainSquid, large-plain,
				verdict(large-plain <= 1)))
		}
	}
	return out
}

// tlsCost compares each rendered size with TLS on the proxy port to the same size without.
func (r *dataplaneResults) tlsCost() []string {
	var out []string
	for _, size := range []string{"rendered-small", "rendered-large"} {
		tls := size + "-tls"
		for _, what := range []string{"http", "tunnels"} {
			a, ok1 := r.rate(tls, what)
			b, ok2 := r.rate(size, what)
			if ok1 && ok2 && b > 0 {
				out = append(out, fmt.Sprintf("TLS on the proxy port, %s %s: %s of plain", size,
					map[string]string{"http": "requests/s", "tunnels": "tunnels/s (a full handshake each)"}[what], quotient(a, b)))
			}
		}
		for _, what := range []string{"http-half", "tunnels-half"} {
			a, ok1 := r.added(tls, what, "p99_ms")
			b, ok2 := r.added(size, what, "p99_ms")
			if ok1 && ok2 {
				out = append(out, fmt.Sprintf("TLS on the proxy port, %s added p99 (%s): %+.2f ms", size,
					map[string]string{"http-half": "requests", "tunnels-half": "tunnels"}[what], a-b))
			}
		}
	}
	return out
}

// runDataplaneCheck fails unless the results hold, for every subject named, every measurement of a proxy
// (direct: its two rates), with no error and no refused answer: the short run in make test proves so that
// each leg still measures what it says, not that it is fast.
func runDataplaneCheck(_ context.Context, args []string, stdin io.Reader, _ io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: dataplane-check takes the subjects", errUsage)
	}
	res, err := readDataplaneResults(stdin)
	if err != nil {
		return err
	}
	var problems []string
	for _, s := range args {
		whats := []string{"http", "tunnels", "http-half", "http-half-floor", "tunnels-half", "tunnels-half-floor", "hold"}
		if s == subjectDirect {
			whats = whats[:2]
		}
		for _, what := range whats {
			if _, ok := res.figures[s][what]; !ok {
				problems = append(problems, fmt.Sprintf("%s has no %s figures", s, what))
			}
		}
		// Not wrk's read errors: it counts one for every connection the server closes after a complete
		// answer, which a proxy that keeps no client connection alive (tinyproxy) does after each request.
		// hey's answers, below, are each checked.
		for _, e := range []string{"connect", "write", "status", "timeout"} {
			if v, _ := res.figure(s, "http", e); v > 0 {
				problems = append(problems, fmt.Sprintf("%s: wrk counted %v %s errors", s, v, e))
			}
		}
		for _, what := range []string{"http-half", "http-half-floor"} {
			if v, _ := res.figure(s, what, "bad"); v > 0 {
				problems = append(problems, fmt.Sprintf("%s: hey got %v answers other than 200 (%s)", s, v, what))
			}
		}
		for _, what := range whats {
			if r, ok := res.rate(s, what); ok && r <= 0 {
				problems = append(problems, fmt.Sprintf("%s: no %s completed", s, what))
			}
		}
		if held, ok := res.figure(s, "hold", "rss_held_kib"); ok && held <= 0 {
			problems = append(problems, fmt.Sprintf("%s: no memory read with the tunnels open", s))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
