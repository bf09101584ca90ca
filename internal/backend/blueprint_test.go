package backend

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The blueprint (README.md here) cites code by path:line and links files; code moves under it. These checks keep
// every citation pointing into a file that exists and every backend package in its feature matrix, so the
// document fails the build rather than quietly going stale.

const blueprintFile = "README.md"

var (
	// A path:line citation: at least one directory, a file with an extension, a line number.
	lineRefRE = regexp.MustCompile(`((?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.-]+\.[A-Za-z0-9]+):([0-9]+)`)
	// A Markdown inline link; images too, which resolve the same way.
	linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// The feature matrix is the first table under this heading.
	matrixHeadingRE = regexp.MustCompile(`(?m)^## 5\. Feature matrix\s*$`)
	matrixCellRE    = regexp.MustCompile(`^(yes|partial|no)\b`)
)

// lineRefProblems reports citations that name a missing file, or a line the file does not have. Paths are
// relative to the repository root.
func lineRefProblems(doc, root string) []string {
	var problems []string
	for _, m := range lineRefRE.FindAllStringSubmatch(doc, -1) {
		path, line := m[1], m[2]
		n, _ := strconv.Atoi(line)
		lines, err := countLines(filepath.Join(root, filepath.FromSlash(path)))
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s:%s: %v", path, line, err))
		case n < 1 || n > lines:
			problems = append(problems, fmt.Sprintf("%s:%s: the file has %d lines", path, line, lines))
		}
	}
	return problems
}

func countLines(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		n++
	}
	return n, sc.Err()
}

// linkProblems reports relative links that resolve to nothing, from the document's directory. Links with a
// scheme and links to an anchor of the document itself are not files.
func linkProblems(doc, dir string) []string {
	var problems []string
	for _, m := range linkRE.FindAllStringSubmatch(doc, -1) {
		target := m[1]
		if strings.HasPrefix(target, "#") || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		target, _, _ = strings.Cut(target, "#")
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(target))); err != nil {
			problems = append(problems, fmt.Sprintf("link %s: %v", m[1], err))
		}
	}
	return problems
}

// matrixColumns returns the backend columns of the feature matrix and its rows' cells.
func matrixColumns(doc string) (columns []string, rows [][]string, err error) {
	loc := matrixHeadingRE.FindStringIndex(doc)
	if loc == nil {
		return nil, nil, fmt.Errorf("no %q heading", "## 5. Feature matrix")
	}
	var table []string
	for _, line := range strings.Split(doc[loc[1]:], "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "|") {
			table = append(table, line)
			continue
		}
		if len(table) > 0 || strings.HasPrefix(line, "## ") {
			break
		}
	}
	if len(table) < 3 {
		return nil, nil, fmt.Errorf("the feature matrix has no header, separator and rows")
	}
	split := func(line string) []string {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		return cells
	}
	header := split(table[0])
	for _, line := range table[2:] {
		rows = append(rows, split(line))
	}
	return header[1:], rows, nil
}

// backendPackages lists the directories under dir that hold a backend.go: the backend packages.
func backendPackages(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var pkgs []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "backend.go")); err == nil {
			pkgs = append(pkgs, e.Name())
		}
	}
	return pkgs, nil
}

// matrixProblems reports a backend package without a column, a column without a package, and cells that do
// not start with yes, partial or no.
func matrixProblems(doc, dir string) []string {
	columns, rows, err := matrixColumns(doc)
	if err != nil {
		return []string{err.Error()}
	}
	pkgs, err := backendPackages(dir)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	for _, p := range pkgs {
		if !slices.Contains(columns, p) {
			problems = append(problems, fmt.Sprintf("backend package %s has no column in the feature matrix", p))
		}
	}
	for _, c := range columns {
		if !slices.Contains(pkgs, c) {
			problems = append(problems, fmt.Sprintf("matrix column %s names no backend package", c))
		}
	}
	for _, row := range rows {
		if len(row) != len(columns)+1 {
			problems = append(problems, fmt.Sprintf("matrix row %q has %d cells, want %d", row[0], len(row)-1, len(columns)))
			continue
		}
		for i, cell := range row[1:] {
			if !matrixCellRE.MatchString(cell) {
				problems = append(problems, fmt.Sprintf("matrix row %q, column %s: %q does not start with yes, partial or no", row[0], columns[i], cell))
			}
		}
	}
	return problems
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

func TestBlueprint(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(blueprintFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, root := string(data), repoRoot(t)
	if n := len(lineRefRE.FindAllString(doc, -1)); n < 50 {
		t.Fatalf("found %d path:line references in %s: the pattern no longer matches how the document cites code", n, blueprintFile)
	}
	for name, problems := range map[string][]string{
		"path:line references": lineRefProblems(doc, root),
		"relative links":       linkProblems(doc, "."),
		"feature matrix":       matrixProblems(doc, "."),
	} {
		for _, p := range problems {
			t.Errorf("%s, %s: %s", blueprintFile, name, p)
		}
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "(internal/backend/README.md)") {
		t.Error("README.md does not link the backend blueprint, internal/backend/README.md")
	}
}

// The checks must catch what they are for: each broken document below gives a problem, the sound one none.
func TestBlueprintChecksCatchBreakage(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	// Four backend packages and one directory that is not one, as the tree has.
	pkgs := t.TempDir()
	for _, name := range []string{"gcp", "kubernetes", "kvm", "memory", "helpers"} {
		if err := os.Mkdir(filepath.Join(pkgs, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if name != "helpers" {
			if err := os.WriteFile(filepath.Join(pkgs, name, "backend.go"), []byte("package "+name+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	matrix := func(header, row string) string {
		return "## 5. Feature matrix\n\n" + header + "\n| --- | --- | --- | --- | --- |\n" + row + "\n\nNotes\n"
	}
	fullHeader := "| concern | gcp | kubernetes | kvm | memory |"
	fullRow := "| identity | yes: a | partial: b | no: c | yes |"
	tests := map[string]struct {
		check func(doc string) []string
		doc   string
		want  string // "" for no problem
	}{
		"line within file":   {func(d string) []string { return lineRefProblems(d, root) }, "see `internal/backend/backend.go:1`", ""},
		"line past end":      {func(d string) []string { return lineRefProblems(d, root) }, "see `internal/backend/backend.go:99999`", "the file has"},
		"line zero":          {func(d string) []string { return lineRefProblems(d, root) }, "see `internal/backend/backend.go:0`", "the file has"},
		"missing file":       {func(d string) []string { return lineRefProblems(d, root) }, "see `internal/backend/nothere.go:3`", "no such file"},
		"link resolves":      {func(d string) []string { return linkProblems(d, ".") }, "[c](backend.go) [k](kvm) [a](#x) [w](https://example.com/y)", ""},
		"link broken":        {func(d string) []string { return linkProblems(d, ".") }, "[c](nothere.go#L3)", "no such file"},
		"matrix complete":    {func(d string) []string { return matrixProblems(d, pkgs) }, matrix(fullHeader, fullRow), ""},
		"column missing":     {func(d string) []string { return matrixProblems(d, pkgs) }, matrix("| concern | gcp | kubernetes | memory |", "| identity | yes | yes | yes |"), "kvm has no column"},
		"column of nothing":  {func(d string) []string { return matrixProblems(d, pkgs) }, matrix("| concern | gcp | kubernetes | kvm | memory | aws |", "| identity | yes | yes | yes | yes | no |"), "aws names no backend"},
		"cell without value": {func(d string) []string { return matrixProblems(d, pkgs) }, matrix(fullHeader, "| identity | yes | maybe | yes | yes |"), "does not start with"},
		"no matrix":          {func(d string) []string { return matrixProblems(d, pkgs) }, "## 4. Identity\n", "no \"## 5. Feature matrix\" heading"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			problems := tc.check(tc.doc)
			if tc.want == "" {
				if len(problems) > 0 {
					t.Fatalf("want no problem, got %q", problems)
				}
				return
			}
			if len(problems) != 1 || !strings.Contains(problems[0], tc.want) {
				t.Fatalf("want one problem containing %q, got %q", tc.want, problems)
			}
		})
	}
}
