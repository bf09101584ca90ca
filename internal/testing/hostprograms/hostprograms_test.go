package hostprograms

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const repoRoot = "../../.."

// row is one line of scripts/host-programs.tsv.
type row struct {
	program     string // a name looked up on PATH, or an absolute path
	providedBy  string // the package whose files hold it, "-" for the Go toolchain and the optional CLI
	installedAs string // the package a script names: providedBy or one that depends on it
	installedBy string // base, go, optional, or "SCRIPT [ARG]"
	line        int
}

// Installers that are not scripts.
const (
	installedByBase     = "base"
	installedByGo       = "go"
	installedByOptional = "optional"
)

func readTable(t *testing.T) []row {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "scripts", "host-programs.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []row
	seen := map[string]int{}
	scanner := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; scanner.Scan(); n++ {
		line := scanner.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) != 4 || slices.Contains(fields, "") {
			t.Errorf("host-programs.tsv:%d: want 4 tab-separated fields (program, provided by, installed as, installed by), got %q", n, line)
			continue
		}
		if prev, ok := seen[fields[0]]; ok {
			t.Errorf("host-programs.tsv:%d: %s is listed already on line %d", n, fields[0], prev)
		}
		seen[fields[0]] = n
		rows = append(rows, row{program: fields[0], providedBy: fields[1], installedAs: fields[2], installedBy: fields[3], line: n})
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("host-programs.tsv lists no program")
	}
	return rows
}

// TestEveryProgramRunIsListed fails when Go code, a script or the makefile runs a program of the machine that the
// table does not name: the next missing package then fails here, on any machine, not only on a bare one.
func TestEveryProgramRunIsListed(t *testing.T) {
	t.Parallel()
	listed := map[string]bool{}
	for _, r := range readTable(t) {
		listed[r.program] = true
	}
	uses, err := allUses(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(uses) == 0 {
		t.Fatal("the scan found no program at all: it is broken")
	}
	missing := map[string][]string{}
	for _, u := range uses {
		if !listed[u.program] {
			missing[u.program] = append(missing[u.program], u.where)
		}
	}
	for _, program := range slices.Sorted(mapKeys(missing)) {
		where := missing[program]
		if len(where) > 3 {
			where = append(where[:3], fmt.Sprintf("and %d more", len(where)-3))
		}
		t.Errorf("%s is run (%s) but scripts/host-programs.tsv does not name it: add its Debian package there and to the script that installs it (make test-deps runs them)",
			program, strings.Join(where, ", "))
	}
}

// TestEveryListedPackageIsInstalledByAScript fails when a package of the table is installed by no script that
// make test-deps runs: the script named must name the package, and test-deps must run the script.
func TestEveryListedPackageIsInstalledByAScript(t *testing.T) {
	t.Parallel()
	testDeps := makeRecipe(t, "test-deps")
	texts := map[string]string{}
	for _, r := range readTable(t) {
		switch r.installedBy {
		case installedByBase, installedByGo, installedByOptional:
			if (r.installedBy == installedByBase) == (r.providedBy == "-") {
				t.Errorf("host-programs.tsv:%d: %s installed by %s must name its package (only go and optional name none)", r.line, r.program, r.installedBy)
			}
			continue
		}
		script := strings.Fields(r.installedBy)[0]
		text, ok := texts[script]
		if !ok {
			b, err := os.ReadFile(filepath.Join(repoRoot, script))
			if err != nil {
				t.Errorf("host-programs.tsv:%d: %s is installed by %s, which cannot be read: %v", r.line, r.program, script, err)
				continue
			}
			text = withoutComments(string(b))
			texts[script] = text
		}
		if !regexp.MustCompile(`(^|[\s(:])` + regexp.QuoteMeta(r.installedAs) + `($|[\s);])`).MatchString(text) {
			t.Errorf("host-programs.tsv:%d: %s names %s as what installs %s, but that script does not name the package",
				r.line, r.program, script, r.installedAs)
		}
		if script != ".ci/run" && !strings.Contains(testDeps, script+" ") {
			t.Errorf("host-programs.tsv:%d: %s is installed by %q, which make test-deps does not run: a bare machine would lack it until that script runs, if ever",
				r.line, r.program, r.installedBy)
		}
	}
}

// TestListedProgramsComeFromTheirPackage checks each row against the package database where the package is
// installed: the package's files hold the program (by name in a bin directory, or the path given). A row whose
// package is not installed here is checked by scripts/rehearse-fresh-root.sh instead, and counted below.
func TestListedProgramsComeFromTheirPackage(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("no dpkg-query: not a Debian machine")
	}
	checked, notInstalled := 0, 0
	for _, r := range readTable(t) {
		if r.providedBy == "-" {
			continue
		}
		out, err := exec.Command("dpkg-query", "-L", r.providedBy).Output()
		if err != nil {
			notInstalled++
			continue
		}
		checked++
		if r.installedBy == installedByBase {
			// base means every Debian 12 has it, the smallest too: only priority required is that.
			priority, err := exec.Command("dpkg-query", "-W", "-f=${Priority}", r.installedAs).Output()
			if err != nil || string(priority) != "required" {
				t.Errorf("host-programs.tsv:%d: %s is base, but %s is of priority %q, not required: a minimal Debian 12 lacks it; name a script that installs it",
					r.line, r.program, r.installedAs, priority)
			}
		}
		files := strings.Split(string(out), "\n")
		if !slices.ContainsFunc(files, func(f string) bool { return holds(f, r.program) }) &&
			!slices.ContainsFunc(files, func(f string) bool { return isAlternative(f, r.program) }) {
			t.Errorf("host-programs.tsv:%d: %s is not among the files of %s (dpkg-query -L): name the package that holds it",
				r.line, r.program, r.providedBy)
		}
	}
	t.Logf("%d rows checked against the package database, %d of packages not installed here", checked, notInstalled)
	if checked == 0 {
		t.Error("no row's package is installed here: make test-deps runs before the tests")
	}
}

// holds says whether a file of a package is the program: the path itself, or a file of that name in a bin
// directory (Debian 12's merged /usr lists /bin/bash for /usr/bin/bash).
func holds(file, program string) bool {
	if strings.HasPrefix(program, "/") {
		return file == program || "/usr"+file == program
	}
	dir := filepath.Dir(file)
	return filepath.Base(file) == program && (strings.HasSuffix(dir, "/bin") || strings.HasSuffix(dir, "/sbin"))
}

// isAlternative says whether the program, found on PATH and its links followed, is the file: awk is mawk and
// iptables is iptables-nft through Debian's alternatives.
func isAlternative(file, program string) bool {
	path, err := exec.LookPath(program)
	if err != nil || !strings.Contains(file, "/bin/") && !strings.Contains(file, "/sbin/") {
		return false
	}
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false
	}
	resolved, err := filepath.EvalSymlinks(file)
	return err == nil && resolved == target
}

// withoutComments drops a script's comment lines: a package named in a comment installs nothing.
func withoutComments(script string) string {
	var out strings.Builder
	for _, line := range strings.Split(script, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			out.WriteString(line + "\n")
		}
	}
	return out.String()
}

// makeRecipe is the text of one target's recipe in the makefile.
func makeRecipe(t *testing.T, target string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "GNUmakefile"))
	if err != nil {
		t.Fatal(err)
	}
	var recipe strings.Builder
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, target+":"):
			in = true
		case in && strings.HasPrefix(line, "\t"):
			recipe.WriteString(line + "\n")
		case in:
			return recipe.String()
		}
	}
	if recipe.Len() == 0 {
		t.Fatalf("GNUmakefile has no recipe for %s", target)
	}
	return recipe.String()
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
