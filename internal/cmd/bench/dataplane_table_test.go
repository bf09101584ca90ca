package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDataplaneCheck: the short run in make test passes only on results where every subject measured
// everything without an error or a refusal.
func TestDataplaneCheck(t *testing.T) {
	t.Parallel()
	good, err := os.ReadFile(filepath.Join("testdata", "dataplane.results"))
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		results  string
		subjects []string
		want     string // in the error; "" for none
	}{
		"complete": {results: string(good), subjects: []string{"direct", "squid-plain", "rendered-large", "tinyproxy"}},
		"a subject not run": {results: string(good), subjects: []string{"squid-plain", "smokescreen"},
			want: "smokescreen has no http figures"},
		"a measurement missing": {
			results:  strings.ReplaceAll(string(good), "tinyproxy tunnels-half ", "tinyproxy other "),
			subjects: []string{"tinyproxy"}, want: "tinyproxy has no tunnels-half figures"},
		"refused by the proxy": {
			results:  string(good) + "squid-plain http requests=10 seconds=1 connect=0 read=0 write=0 status=10 timeout=0\n",
			subjects: []string{"squid-plain"}, want: "wrk counted 10 status errors"},
		"a login refused at half load": {
			results:  string(good) + "rendered-large http-half n=100 bad=100 seconds=1 p50_ms=1 p99_ms=1\n",
			subjects: []string{"rendered-large"}, want: "hey got 100 answers other than 200"},
		"nothing completed": {
			results:  string(good) + "tinyproxy tunnels tunnels=0 seconds=1 p50_ms=0 p99_ms=0\n",
			subjects: []string{"tinyproxy"}, want: "tinyproxy: no tunnels completed"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := run(context.Background(), append([]string{"dataplane-check"}, tc.subjects...), strings.NewReader(tc.results), &bytes.Buffer{})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("dataplane-check: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("dataplane-check: got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestDataplaneHalf: the latency is measured at half the subject's own saturation rate.
func TestDataplaneHalf(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		args []string
		want string
	}{
		"requests": {[]string{"squid-plain", "http"}, "4900\n"},  // 98000 in 10.0001 s
		"tunnels":  {[]string{"tinyproxy", "tunnels"}, "1000\n"}, // 20000 in 10 s
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in, err := os.Open(filepath.Join("testdata", "dataplane.results"))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = in.Close() }()
			var out bytes.Buffer
			if err := run(context.Background(), append([]string{"dataplane-half"}, tc.args...), in, &out); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("dataplane-half %v printed %q, want %q", tc.args, out.String(), tc.want)
			}
		})
	}
}

// TestHeySummary reads hey's CSV as hey 0.1.4 writes it (seconds to 4 decimals, the status seventh).
func TestHeySummary(t *testing.T) {
	t.Parallel()
	csv := "response-time,DNS+dialup,DNS,Request-write,Response-delay,Response-read,status-code,offset\n"
	for i := 1; i <= 100; i++ {
		status := "200"
		if i == 7 {
			status = "407"
		}
		csv += fmt.Sprintf("%.4f,0.0000,0.0000,0.0000,0.0001,0.0000,%s,0.0100\n", float64(i)/1000, status)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"hey-summary", "-seconds", "2"}, strings.NewReader(csv), &out); err != nil {
		t.Fatal(err)
	}
	// 1 ms .. 100 ms: the 50th is 50 ms, the 99th 99 ms.
	if want := "n=100 bad=1 seconds=2 p50_ms=50.000 p99_ms=99.000\n"; out.String() != want {
		t.Errorf("hey-summary printed %q, want %q", out.String(), want)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	tests := map[string]struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		"none":              {nil, 99, 0},
		"one":               {ms(7), 99, 7 * time.Millisecond},
		"median of 4":       {ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		"p99 of 10 the max": {ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		"p100":              {ms(3, 1, 2), 100, 3 * time.Millisecond},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := percentile(tc.in, tc.p); got != tc.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
			}
		})
	}
}
