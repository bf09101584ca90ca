package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from what the tables print now")

// TestTables holds the tables the benchmark scripts print to their format: a change of a heading, a column, a
// width or a rounding fails here. The golden files were printed by the scripts' own awk and bash arithmetic,
// before it moved here, from the same timings; -update rewrites them when a change is meant.
func TestTables(t *testing.T) {
	t.Parallel()
	tests := []struct {
		golden string
		args   []string
	}{
		{"k8s-generic", []string{"k8s-table", "10", "30"}},
		{"k8s-no-generic", []string{"k8s-table", "5"}},
		{"kvm-window", []string{"kvm-table", "-proxies", "30", "-instance", "bench", "-window", "10"}},
		{"kvm-fixed-no-window", []string{"kvm-table", "-proxies", "8", "-instance", "acc", "-window", "0", "-fixed-ip"}},
		// Printed here first (no script had this arithmetic before): -update rewrites it when a change is meant.
		{"dataplane", []string{"dataplane-table"}},
	}
	for _, tc := range tests {
		t.Run(tc.golden, func(t *testing.T) {
			t.Parallel()
			input := filepath.Join("testdata", tc.golden+".timings")
			if tc.args[0] == "dataplane-table" {
				input = filepath.Join("testdata", tc.golden+".results")
			}
			in, err := os.Open(input)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = in.Close() }()
			var out bytes.Buffer
			if err := run(context.Background(), tc.args, in, &out); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tc.golden+".golden")
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if out.String() != string(want) {
				t.Errorf("bench %s printed\n%s\nwant (%s)\n%s", strings.Join(tc.args, " "), out.String(), golden, want)
			}
		})
	}
}

// TestScriptsCallWhatExists reads the benchmark scripts: every subcommand they run must be one of bench's, and
// the labels they time must be the ones the tables read.
func TestScriptsCallWhatExists(t *testing.T) {
	t.Parallel()
	call := regexp.MustCompile(`"\$bench" ([a-z0-9-]+)`)
	scripts := map[string][]string{
		// bench-k8s.sh times each step of each leg under LEG-STEP-N (timed LABEL ...).
		"bench-k8s.sh": {`timed "raw-apply-$n"`, `timed "raw-destroy-$n"`, `legs=(egress)`, `legs+=(generic)`,
			`timed "$d-plan-$n"`, `timed "$d-apply-$n"`, `timed "$d-refresh-$n"`, `timed "$d-destroy-$n"`},
		// bench-kvm.sh records each step under its label (record LABEL START).
		"bench-kvm.sh": {"record raw-create ", "record raw-destroy ", "record window-create ", "record window-destroy ",
			"record egress-plan-new ", "record egress-apply ", "record egress-plan ", "record egress-destroy "},
		// bench-measure.sh, which both data-plane scripts source, records each measurement of a subject
		// (record "$s" WHAT) and prints the table and the check (measure_all), which both scripts call.
		"bench-measure.sh": {`record "$s" hold`, `record "$s" http`, `record "$s" tunnels`, `record "$s" http-half`,
			`record "$s" http-half-floor`, `record "$s" tunnels-half`, `record "$s" tunnels-half-floor`, `"$bench" dataplane-table`, `"$bench" dataplane-check`},
		"bench-dataplane.sh":     {`bench-measure.sh"`, `measure_all "${subjects[@]}"`},
		"bench-dataplane-k8s.sh": {`bench-measure.sh"`, `measure_all "${subjects[@]}"`},
	}
	for script, labels := range scripts {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "scripts", script))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		calls := call.FindAllStringSubmatch(text, -1)
		if len(calls) == 0 {
			t.Errorf("%s runs no bench subcommand: the pattern %s is stale", script, call)
		}
		for _, c := range calls {
			if _, ok := commands[c[1]]; !ok {
				t.Errorf("%s runs bench %s, which is no subcommand of bench", script, c[1])
			}
		}
		for _, label := range labels {
			if !strings.Contains(text, label) {
				t.Errorf("%s lacks %q: the table reads that step's seconds", script, label)
			}
		}
	}
}
