package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	const (
		pass = `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":0.1}
`
		skip = `{"Action":"output","Package":"p","Test":"TestB","Output":"=== RUN   TestB\n"}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:9: needs EGRESS_X\n"}
{"Action":"output","Package":"p","Test":"TestB","Output":"--- SKIP: TestB (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestB","Elapsed":0}
`
		fail = `{"Action":"output","Package":"p","Test":"TestC","Output":"    c_test.go:3: got 1, want 2\n"}
{"Action":"fail","Package":"p","Test":"TestC","Elapsed":0.2}
{"Action":"fail","Package":"p","Elapsed":0.5}
`
		pkgPass     = `{"Action":"pass","Package":"p","Elapsed":0.5}` + "\n"
		buildFailed = "# p\n./a.go:1:1: syntax error\nFAIL\tp [build failed]\n"
	)
	tests := map[string]struct {
		in         string
		wantFailed bool
		wantSkips  int
		wantOut    []string
	}{
		"all pass":        {in: pass + pkgPass, wantOut: []string{"ok\tp\t0.5s", "0 tests skipped"}},
		"a skip is named": {in: pass + skip + pkgPass, wantSkips: 1, wantOut: []string{"1 tests skipped", "SKIP p TestB: b_test.go:9: needs EGRESS_X"}},
		"a failure shows its output": {in: pass + fail, wantFailed: true,
			wantOut: []string{"FAIL\tp\t0.5s", "--- FAIL: TestC (p)", "c_test.go:3: got 1, want 2"}},
		"a build failure fails": {in: buildFailed, wantFailed: true, wantOut: []string{"syntax error"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var log, out bytes.Buffer
			s := summarize(strings.NewReader(tc.in), &log, &out)
			if s.failed != tc.wantFailed || len(s.skipped) != tc.wantSkips {
				t.Errorf("failed %v, %d skipped; want %v, %d\n%s", s.failed, len(s.skipped), tc.wantFailed, tc.wantSkips, out.String())
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("report lacks %q:\n%s", w, out.String())
				}
			}
			if strings.Contains(tc.in, "TestA") && !strings.Contains(log.String(), "=== RUN   TestA") {
				t.Errorf("log lacks the tests' output:\n%s", log.String())
			}
		})
	}
}
