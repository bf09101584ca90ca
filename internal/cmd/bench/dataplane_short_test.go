package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// asCommand, set in the environment, makes this test binary the bench command itself: the short run below
// hands it to scripts/bench-dataplane.sh (BENCH_BIN), so make test compiles no second bench for it.
const asCommand = "EGRESS_BENCH_TEST_AS_COMMAND"

func TestMain(m *testing.M) {
	if os.Getenv(asCommand) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestDataplaneShortRun runs scripts/bench-dataplane.sh over every subject for a second a measurement: not a
// benchmark (make test runs beside it), a proof that each leg still starts its proxy, measures through it
// without an error or a refusal (bench dataplane-check, the script's last step), and prints its table. It
// needs root, for the network namespaces, and the packages make test-deps installs (wrk, hey, tinyproxy,
// squid-openssl).
//
// It saturates both CPUs for most of its minute, which would slow the packages tested beside it past their
// deadlines, so it runs alone: make test runs it (make bench-short, which sets EGRESS_BENCH_SHORT) after the test
// groups, and a plain go test skips it.
func TestDataplaneShortRun(t *testing.T) {
	if os.Getenv("EGRESS_BENCH_SHORT") != "1" {
		t.Skip("the short run of the data-plane benchmark saturates the CPUs for a minute, so it runs alone: make bench-short (make test runs it after the test groups) sets EGRESS_BENCH_SHORT=1")
	}
	if os.Geteuid() != 0 {
		t.Skip("the data-plane benchmark makes network namespaces: run as root (make test does)")
	}
	runDataplaneScript(t, 10*time.Minute, "bench-dataplane.sh", nil, []string{"BENCH_SECONDS=1"},
		"| direct |", "| squid-plain |", "| rendered-large-tls |", "| tinyproxy |", "| smokescreen |")
}

// runDataplaneScript runs scripts/SCRIPT with args as the benchmark's short run, this test binary standing in
// for the bench command, env added to the test's, and fails the test unless it passes and its table has every
// one of rows.
func runDataplaneScript(t *testing.T, timeout time.Duration, script string, args, env []string, rows ...string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := t.TempDir()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join("..", "..", "..", "scripts", script)}, args...)...)
	cmd.Env = append(append(os.Environ(), env...), "BENCH_BIN="+self, asCommand+"=1", "OUT="+out)
	output, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, output)
	}
	table, err := os.ReadFile(filepath.Join(out, "table.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rows {
		if !strings.Contains(string(table), s) {
			t.Errorf("the table has no row %s:\n%s", s, table)
		}
	}
	t.Logf("%s", output)
}
