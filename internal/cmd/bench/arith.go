package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// The scripts computed with awk and printed with bash's printf; the figures here are the same, digit for
// digit: elapsed prints as awk's print did, the ratios as awk's printf did, and a figure rounded for a table
// as bash's printf rounded it.

// runElapsed prints the seconds from START to END (each `date +%s.%N`): as awk's print printed a number, or
// with -decimals N fixed to N decimals (awk's printf "%.Nf").
func runElapsed(_ context.Context, args []string, _ io.Reader, stdout io.Writer) error {
	fs := newFlagSet("elapsed")
	decimals := fs.Int("decimals", -1, "print this many decimals instead of awk's print format")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("%w: elapsed takes START and END", errUsage)
	}
	start, err := parseNumber(fs.Arg(0))
	if err != nil {
		return err
	}
	end, err := parseNumber(fs.Arg(1))
	if err != nil {
		return err
	}
	s := awkNumber(end - start)
	if *decimals >= 0 {
		s = cFixed(end-start, *decimals)
	}
	_, err = fmt.Fprintln(stdout, s)
	return err
}

// runK8sTable prints scripts/bench-k8s.sh's table for the proxy counts given, from its timings.
func runK8sTable(_ context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: k8s-table takes the proxy counts", errUsage)
	}
	t, err := readTimings(stdin)
	if err != nil {
		return err
	}
	return k8sTable(stdout, args, t)
}

// runKVMTable prints scripts/bench-kvm.sh's table, from its timings.
func runKVMTable(_ context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlagSet("kvm-table")
	var h kvmHeading
	fs.IntVar(&h.proxies, "proxies", 0, "how many proxies each side made")
	fs.StringVar(&h.instance, "instance", "", "the libvirt instance")
	fs.StringVar(&h.window, "window", "", "how many at a time the raw side's second run made (0: none)")
	fs.BoolVar(&h.fixedIP, "fixed-ip", false, "the proxies had fixed IPs (DHCP reservations)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 || h.proxies <= 0 || h.instance == "" || h.window == "" {
		return fmt.Errorf("%w: kvm-table takes -proxies, -instance and -window", errUsage)
	}
	t, err := readTimings(stdin)
	if err != nil {
		return err
	}
	return kvmTable(stdout, h, t)
}

// timings are the seconds of each timed step by label, as the script recorded them: text, since the
// scripts computed from the figure elapsed printed, not from the clock's.
type timings map[string]string

// readTimings reads lines of a label and its seconds; a label given twice keeps its last figure.
func readTimings(r io.Reader) (timings, error) {
	t := timings{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("timings line %d: want a label and its seconds, got %q", n, sc.Text())
		}
		if _, err := parseNumber(fields[1]); err != nil {
			return nil, fmt.Errorf("timings line %d: %w", n, err)
		}
		t[fields[0]] = fields[1]
	}
	return t, sc.Err()
}

// need is the figure of a label the table cannot do without.
func (t timings) need(label string) (string, error) {
	s, ok := t[label]
	if !ok {
		return "", fmt.Errorf("the timings have no %s", label)
	}
	return s, nil
}

// k8sSteps are the rows of each proxy count, in order.
var k8sSteps = []string{"plan", "apply", "refresh", "destroy"}

// k8sTable prints the seconds of each step of raw (raw-STEP-N), generic (generic-STEP-N) and egress
// (egress-STEP-N), and the ratios of egress to raw, to generic, and of egress's own share to raw: its apply
// less its plan, its destroy less its refresh (the plan before it). A step a leg did not time is a "-".
func k8sTable(w io.Writer, counts []string, t timings) error {
	// egress times every step; the raw and generic legs only some, or none.
	for _, n := range counts {
		for _, step := range k8sSteps {
			if _, err := t.need("egress-" + step + "-" + n); err != nil {
				return err
			}
		}
	}
	secs := func(label string) string {
		if s, ok := t[label]; ok {
			return bashFixed(s, 1)
		}
		return "-"
	}
	ratio := func(a, b string) string {
		if _, ok := t[b]; ok {
			return quotient(mustNumber(t[a]), mustNumber(t[b]))
		}
		return "-"
	}
	own := func(step, n string) string {
		less := map[string]string{"apply": "plan", "destroy": "refresh"}[step]
		raw, ok := t["raw-"+step+"-"+n]
		if less == "" || !ok {
			return "-"
		}
		// The script printed the difference with awk, then divided what it printed.
		diff := awkNumber(mustNumber(t["egress-"+step+"-"+n]) - mustNumber(t["egress-"+less+"-"+n]))
		return quotient(mustNumber(diff), mustNumber(raw))
	}
	var b strings.Builder
	b.WriteString("\n| proxies | step | raw REST, 10 at a time | generic provider | egress_proxy | egress/raw | egress less plan or refresh, /raw | egress/generic |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, n := range counts {
		for _, step := range k8sSteps {
			raw, generic, egress := "raw-"+step+"-"+n, "generic-"+step+"-"+n, "egress-"+step+"-"+n
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", n, step, secs(raw), secs(generic), secs(egress),
				ratio(egress, raw), own(step, n), ratio(egress, generic))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// kvmHeading is what scripts/bench-kvm.sh's table says of the run above it.
type kvmHeading struct {
	proxies  int
	instance string
	window   string
	fixedIP  bool
}

// kvmTable prints raw virsh (raw-create, raw-destroy; window-create, window-destroy when it also ran WINDOW at
// a time) against egress_proxy (egress-plan-new, egress-apply, egress-plan, egress-destroy): seconds, the
// ratios egress/raw, and egress's apply less its plan, its destroy less its refresh, over raw.
func kvmTable(w io.Writer, h kvmHeading, t timings) error {
	need := map[string]string{}
	for _, label := range []string{"raw-create", "raw-destroy", "egress-plan-new", "egress-apply", "egress-plan", "egress-destroy"} {
		s, err := t.need(label)
		if err != nil {
			return err
		}
		need[label] = s
	}
	// Without a window run the script had 0 for its seconds: printed so, and no ratio to it.
	window := func(label string) string {
		if s, ok := t[label]; ok {
			return s
		}
		return "0"
	}
	ratio := func(a, b string) string {
		if mustNumber(b) > 0 {
			return quotient(mustNumber(a), mustNumber(b))
		}
		return "-"
	}
	own := func(a, less, b string) string {
		if mustNumber(b) > 0 {
			return quotient(mustNumber(a)-mustNumber(less), mustNumber(b))
		}
		return "-"
	}
	const (
		heading = "| %-14s | %-14s | %-14s | %-14s | %-12s | %-12s | %-22s |\n"
		alone   = "| %-14s | %14s | %14s | %12s s | %-12s | %-12s | %-22s |\n"
		row     = "| %-14s | %12s s | %12s s | %12s s | %-12s | %-12s | %-22s |\n"
	)
	fixed := ""
	if h.fixedIP {
		fixed = ", fixed IPs (DHCP reservations)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d proxies on %s%s\n", h.proxies, h.instance, fixed)
	fmt.Fprintf(&b, heading, "step", fmt.Sprintf("raw, %d at once", h.proxies), "raw, "+h.window+" at a time", "egress_proxy",
		"egress/raw", "egress/raw "+h.window, "(egress - plan)/raw")
	fmt.Fprintf(&b, heading, "---", "---", "---", "---", "---", "---", "---")
	for _, step := range []struct{ name, alone, aloneLabel, raw, window, egress string }{
		{"create", "plan (new)", "egress-plan-new", "raw-create", "window-create", "egress-apply"},
		{"destroy", "refresh (plan)", "egress-plan", "raw-destroy", "window-destroy", "egress-destroy"},
	} {
		less := need[step.aloneLabel]
		fmt.Fprintf(&b, alone, step.alone, "-", "-", less, "-", "-", "-")
		raw, win, egress := need[step.raw], window(step.window), need[step.egress]
		fmt.Fprintf(&b, row, step.name, raw, win, egress, ratio(egress, raw), ratio(egress, win), own(egress, less, raw))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// parseNumber reads a figure as awk did a number given with -v, except that text that is no number is an
// error here, not 0.
func parseNumber(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number of seconds", s)
	}
	return f, nil
}

// mustNumber reads a figure already checked (readTimings) or printed here.
func mustNumber(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// awkNumber prints x as mawk's print does: an integer within int32's range as one, else OFMT, "%.6g".
func awkNumber(x float64) string {
	if x == math.Trunc(x) && math.Abs(x) <= math.MaxInt32 {
		return strconv.FormatInt(int64(x), 10) // -0 too prints as 0
	}
	if s, ok := cSpecial(x); ok {
		return s
	}
	return fmt.Sprintf("%.6g", x)
}

// cFixed prints x as C's printf "%.Nf" does (awk's printf is C's).
func cFixed(x float64, decimals int) string {
	if s, ok := cSpecial(x); ok {
		return s
	}
	return strconv.FormatFloat(x, 'f', decimals, 64)
}

// quotient is the scripts' ratio, a/b as "%.2fx".
func quotient(a, b float64) string {
	return cFixed(a/b, 2) + "x"
}

// cSpecial is how C's printf spells infinities and NaN (a division by a zero figure).
func cSpecial(x float64) (string, bool) {
	switch {
	case math.IsInf(x, 1):
		return "inf", true
	case math.IsInf(x, -1):
		return "-inf", true
	case math.IsNaN(x):
		return "nan", true
	}
	return "", false
}

// bashFixed rounds a figure as bash's printf "%.Nf" does: it reads the text as a long double, a 64-bit
// mantissa on amd64, not a float64, so a figure such as 12.35 rounds up where a float64 would round it down.
func bashFixed(s string, decimals int) string {
	f, _, err := big.ParseFloat(s, 10, 64, big.ToNearestEven)
	if err != nil {
		return s
	}
	if f.IsInf() {
		return map[bool]string{false: "inf", true: "-inf"}[f.Signbit()]
	}
	return f.Text('f', decimals)
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %s: %w", errUsage, fs.Name(), err)
	}
	return nil
}
