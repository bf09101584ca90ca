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
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out := t.TempDir()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join("..", "..", "..", "scripts", "bench-dataplane.sh"))
	cmd.Env = append(os.Environ(), "BENCH_SECONDS=1", "BENCH_BIN="+self, asCommand+"=1", "OUT="+out)
	output, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bench-dataplane.sh: %v\n%s", err, output)
	}
	table, err := os.ReadFile(filepath.Join(out, "table.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| direct |", "| squid-plain |", "| rendered-large-tls |", "| tinyproxy |", "| smokescreen |"} {
		if !strings.Contains(string(table), s) {
			t.Errorf("the table has no row %s:\n%s", s, table)
		}
	}
	t.Logf("%s", output)
}
