// Command testsummary reads `go test -json` on standard input, keeps the whole output in a log file, and prints
// what a reader of a CI run needs: each package's result, every test that failed with its whole output, and
// every test that skipped with the reason it gave, so that a skip is never mistaken for a pass. It exits 1
// when a test or a package failed (a build failure among them), and also when -no-skips is set and any test
// skipped.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type testKey struct{ pkg, test string }

func main() {
	logPath := flag.String("log", "", "file that gets the whole output, as plain text")
	noSkips := flag.Bool("no-skips", false, "fail when a test skips")
	flag.Parse()
	log := io.Discard
	if *logPath != "" {
		f, err := os.Create(*logPath)
		if err != nil {
			_, _ = fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(2)
		}
		defer func() { _ = f.Close() }()
		log = f
	}
	s := summarize(os.Stdin, log, os.Stdout)
	switch {
	case s.failed:
		os.Exit(1)
	case *noSkips && len(s.skipped) > 0:
		fmt.Printf("testsummary: %d tests skipped where none may\n", len(s.skipped))
		os.Exit(1)
	}
}

type summary struct {
	failed  bool
	skipped []testKey
}

// summarize copies every output line to log and writes the report to out.
func summarize(in io.Reader, log, out io.Writer) summary {
	outputs := map[testKey][]string{}
	var s summary
	var failedTests []testKey
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			// Not an event: go's own messages (a build failure before -json applies) are shown as they are.
			line := sc.Text() + "\n"
			_, _ = io.WriteString(log, line)
			_, _ = io.WriteString(out, line)
			if strings.HasPrefix(line, "FAIL") || strings.Contains(line, "build failed") {
				s.failed = true
			}
			continue
		}
		k := testKey{e.Package, e.Test}
		switch e.Action {
		case "output", "build-output":
			_, _ = io.WriteString(log, e.Output)
			if e.Test != "" {
				outputs[k] = append(outputs[k], e.Output)
			}
		case "fail", "build-fail":
			s.failed = true
			if e.Test != "" {
				failedTests = append(failedTests, k)
			} else {
				_, _ = fmt.Fprintf(out, "FAIL\t%s\t%.1fs\n", e.Package, e.Elapsed)
			}
		case "skip":
			if e.Test != "" {
				s.skipped = append(s.skipped, k)
			}
		case "pass":
			if e.Test == "" {
				_, _ = fmt.Fprintf(out, "ok\t%s\t%.1fs\n", e.Package, e.Elapsed)
			}
		}
	}
	if err := sc.Err(); err != nil {
		_, _ = fmt.Fprintln(out, "testsummary: reading the test output:", err)
		s.failed = true
	}
	for _, k := range failedTests {
		_, _ = fmt.Fprintf(out, "\n--- FAIL: %s (%s)\n%s", k.test, k.pkg, strings.Join(outputs[k], ""))
	}
	sort.Slice(s.skipped, func(i, j int) bool {
		return s.skipped[i].pkg+" "+s.skipped[i].test < s.skipped[j].pkg+" "+s.skipped[j].test
	})
	_, _ = fmt.Fprintf(out, "%d tests skipped\n", len(s.skipped))
	for _, k := range s.skipped {
		_, _ = fmt.Fprintf(out, "  SKIP %s %s: %s\n", k.pkg, k.test, skipReason(outputs[k]))
	}
	return s
}

// skipReason is what a skipped test said, on one line, without the "=== RUN" and "--- SKIP" lines.
func skipReason(lines []string) string {
	var kept []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		kept = append(kept, l)
	}
	return strings.Join(kept, " | ")
}
