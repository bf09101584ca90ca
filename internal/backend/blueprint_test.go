package backend

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The blueprint (README.md here, with CONTRACT.md and FEATURES.md beside it, and each backend's doc.go) cites
// code by path#Symbol and links files; code moves under it. These checks resolve every citation to a
// declaration in the file it names, and keep every backend package in the feature matrix and every backend kind
// in the matrix, the provider docs and the examples, so the documents fail the build rather than quietly going
// stale.

const (
	// blueprintFile is the guide: the contract in brief and the checklist. The root README links it.
	blueprintFile = "README.md"
	// featuresFile holds the feature matrix.
	featuresFile = "FEATURES.md"
	docsTemplate = "templates/index.md.tmpl"
	// packageDoc is the file of a backend package that holds its package comment: its own rules.
	packageDoc = "doc.go"
)

// blueprintFiles are the blueprint's documents in this directory, each checked alike.
var blueprintFiles = []string{blueprintFile, "CONTRACT.md", featuresFile}

const (
	// descriptorTable is the file of the provider's table of backend descriptors, backendDescriptors.
	descriptorTable = "internal/provider/backends.go"
	// descriptorFile is each kind's descriptor in the Terraform layer, with %s the kind.
	descriptorFile = "internal/provider/backend_%s.go"
)

// kindsOf lists the backend kinds: the Kind constant each package under internal/backend declares. This
// package names none (the contract names no backend), so the packages are where kinds come from.
func kindsOf(root string) ([]Kind, error) {
	dirs, err := os.ReadDir(filepath.Join(root, "internal", "backend"))
	if err != nil {
		return nil, err
	}
	var kinds []Kind
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		dir := filepath.Join(root, "internal", "backend", d.Name())
		files, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		for _, file := range files {
			if !strings.HasSuffix(file.Name(), ".go") || strings.HasSuffix(file.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, file.Name()), nil, 0)
			if err != nil {
				return nil, err
			}
			if k, ok := kindConst(f); ok {
				kinds = append(kinds, k)
			}
		}
	}
	slices.Sort(kinds)
	return kinds, nil
}

// kindConst finds `const Kind ... = "x"` at the top level of f.
func kindConst(f *ast.File) (Kind, bool) {
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs, ok := spec.(*ast.ValueSpec)
			if !ok {
				continue
			}
			for i, name := range vs.Names {
				if name.Name != "Kind" || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					return Kind(strings.Trim(lit.Value, "`\"")), true
				}
			}
		}
	}
	return "", false
}

// registeredDescriptors lists the type names in the provider's backendDescriptors table, such as
// "kvmDescriptor".
func registeredDescriptors(root string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, filepath.FromSlash(descriptorTable)), nil, 0)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.VAR {
			continue
		}
		for _, spec := range gen.Specs {
			vs, ok := spec.(*ast.ValueSpec)
			if !ok {
				continue
			}
			for i, name := range vs.Names {
				if name.Name != "backendDescriptors" || i >= len(vs.Values) {
					continue
				}
				table, ok := vs.Values[i].(*ast.CompositeLit)
				if !ok {
					return nil, fmt.Errorf("%s: backendDescriptors is not a table literal", descriptorTable)
				}
				for _, elt := range table.Elts {
					if lit, ok := elt.(*ast.CompositeLit); ok {
						if id, ok := lit.Type.(*ast.Ident); ok {
							names = append(names, id.Name)
						}
					}
				}
			}
		}
	}
	if names == nil {
		return nil, fmt.Errorf("%s declares no backendDescriptors table", descriptorTable)
	}
	return names, nil
}

var (
	// A citation by symbol: a path with at least one directory, '#', then a declared name, or Receiver.Method.
	symbolRefRE = regexp.MustCompile("`((?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.-]+\\.[A-Za-z0-9]+)#([A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)?)`")
	// A citation by line, the form this document no longer uses: lines move, symbols do not.
	lineRefRE = regexp.MustCompile(`((?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.-]+\.[A-Za-z0-9]+):([0-9]+)`)
	// A Markdown inline link; images too, which resolve the same way.
	linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// The feature matrix is the first table under this heading.
	matrixHeadingRE = regexp.MustCompile(`(?m)^## Feature matrix\s*$`)
	matrixCellRE    = regexp.MustCompile(`^(yes|partial|no)\b`)
	// A citation in a package comment, where backticks are no markup: file.go#Symbol from the package's
	// directory, or path/to/file.go#Symbol from the repository root.
	docRefRE = regexp.MustCompile(`(?:^|[\s(])((?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_.-]+\.go)#([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)`)
)

// declarations lists the top-level names a Go file declares: functions, methods as Receiver.Method (the
// receiver's type name, without * or type parameters), types, vars and consts. Files are parsed once.
type declarations struct {
	mu    sync.Mutex
	files map[string]map[string]bool
}

func (d *declarations) of(path string) (map[string]bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if names, ok := d.files[path]; ok {
		return names, nil
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, decl := range f.Decls {
		switch decl := decl.(type) {
		case *ast.FuncDecl:
			if decl.Recv == nil || len(decl.Recv.List) == 0 {
				names[decl.Name.Name] = true
				continue
			}
			if recv := receiverName(decl.Recv.List[0].Type); recv != "" {
				names[recv+"."+decl.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, spec := range decl.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					names[spec.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range spec.Names {
						names[n.Name] = true
					}
				}
			}
		}
	}
	if d.files == nil {
		d.files = map[string]map[string]bool{}
	}
	d.files[path] = names
	return names, nil
}

// receiverName is the type name of a method's receiver: T for T, *T, T[K] and *T[K, V].
func receiverName(expr ast.Expr) string {
	for {
		switch e := expr.(type) {
		case *ast.StarExpr:
			expr = e.X
		case *ast.IndexExpr:
			expr = e.X
		case *ast.IndexListExpr:
			expr = e.X
		case *ast.ParenExpr:
			expr = e.X
		case *ast.Ident:
			return e.Name
		default:
			return ""
		}
	}
}

// symbolRefProblems reports citations whose file is missing, is not Go, or declares no such symbol at the top
// level. Paths are relative to the repository root.
func symbolRefProblems(doc, root string, decls *declarations) []string {
	var problems []string
	for _, m := range symbolRefRE.FindAllStringSubmatch(doc, -1) {
		ref, path, symbol := m[1]+"#"+m[2], m[1], m[2]
		if !strings.HasSuffix(path, ".go") {
			problems = append(problems, fmt.Sprintf("%s: not a Go file: cite a Go symbol, or link the file", ref))
			continue
		}
		if p := resolve(ref, filepath.Join(root, filepath.FromSlash(path)), path, symbol, decls); p != "" {
			problems = append(problems, p)
		}
	}
	return problems
}

// resolve says what is wrong with the citation ref of symbol in the Go file at file (path as cited), "" when
// nothing is.
func resolve(ref, file, path, symbol string, decls *declarations) string {
	names, err := decls.of(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("%s: no such file", ref)
	case err != nil:
		return fmt.Sprintf("%s: %v", ref, err)
	case !names[symbol]:
		return fmt.Sprintf("%s: %s declares no top-level %s (a function, Receiver.Method, type, var or const)", ref, path, symbol)
	}
	return ""
}

// packageDocProblems checks the package comments of the backend packages under root's internal/backend: each
// is in doc.go alone (go doc would join a second one to it), and each file.go#Symbol it cites resolves, from
// the package's directory or, for a path with a directory, from root. It returns the citations' count too.
func packageDocProblems(root string, decls *declarations) (problems []string, refs int) {
	backends := filepath.Join(root, "internal", "backend")
	pkgs, err := backendPackages(backends)
	if err != nil {
		return []string{err.Error()}, 0
	}
	for _, pkg := range pkgs {
		dir := filepath.Join(backends, pkg)
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			return []string{err.Error()}, refs
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			rel := "internal/backend/" + pkg + "/" + filepath.Base(file)
			if f.Doc == nil {
				continue
			}
			if filepath.Base(file) != packageDoc {
				problems = append(problems, fmt.Sprintf("%s: a package comment outside %s: move it there", rel, packageDoc))
				continue
			}
			for _, m := range docRefRE.FindAllStringSubmatch(f.Doc.Text(), -1) {
				refs++
				path, symbol := m[1], m[2]
				file := filepath.Join(dir, path)
				if strings.Contains(path, "/") {
					file = filepath.Join(root, filepath.FromSlash(path))
				}
				if p := resolve(rel+": "+path+"#"+symbol, file, path, symbol, decls); p != "" {
					problems = append(problems, p)
				}
			}
		}
	}
	return problems, refs
}

// lineRefProblems reports every path:line citation: the document cites by symbol, since lines move.
func lineRefProblems(doc string) []string {
	var problems []string
	for _, m := range lineRefRE.FindAllString(doc, -1) {
		problems = append(problems, fmt.Sprintf("%s: cite by symbol (path#Symbol), not by line", m))
	}
	return problems
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
		return nil, nil, fmt.Errorf("no %q heading", "## Feature matrix")
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

// testDoubleColumns are the matrix's columns for backends that only tests use, and where they live, from
// internal/backend.
var testDoubleColumns = map[string]string{"memory": "../testing/memory"}

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
	// The test doubles have a column too, though they live with the other test-only packages.
	for column, pkg := range testDoubleColumns {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(pkg), "backend.go")); err == nil {
			pkgs = append(pkgs, column)
		}
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

// kindProblems reports a backend kind that lacks its descriptor (its file, and its line in the provider's
// table), its column in the feature matrix (doc is FEATURES.md's text), its package under internal/backend
// and that package's doc.go, its bullet and heading in the docs template, or its example under
// examples/backends (which the template must include). root is the repository root; template is the docs
// template's text.
func kindProblems(kinds []Kind, doc, template, root string) []string {
	columns, _, err := matrixColumns(doc)
	if err != nil {
		return []string{err.Error()}
	}
	// The "## Backends" section: from its heading to the next heading of its level.
	backends := ""
	if _, after, ok := strings.Cut(template, "\n## Backends\n"); ok {
		backends, _, _ = strings.Cut(after, "\n## ")
	}
	registered, err := registeredDescriptors(root)
	if err != nil {
		return []string{err.Error()}
	}
	sections := map[string]Kind{} // heading -> the kind whose example it holds
	var problems []string
	for _, k := range kinds {
		descriptor := fmt.Sprintf(descriptorFile, k)
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(descriptor))); err != nil {
			problems = append(problems, fmt.Sprintf("kind %s has no descriptor file: %v", k, err))
		}
		if !slices.Contains(registered, string(k)+"Descriptor") {
			problems = append(problems, fmt.Sprintf("kind %s has no %sDescriptor{} in backendDescriptors (%s)", k, k, descriptorTable))
		}
		if !slices.Contains(columns, string(k)) {
			problems = append(problems, fmt.Sprintf("kind %s has no column in the feature matrix", k))
		}
		if _, err := os.Stat(filepath.Join(root, "internal", "backend", string(k), "backend.go")); err != nil {
			problems = append(problems, fmt.Sprintf("kind %s has no backend package: %v", k, err))
		} else if _, err := os.Stat(filepath.Join(root, "internal", "backend", string(k), packageDoc)); err != nil {
			problems = append(problems, fmt.Sprintf("kind %s has no package doc (its own rules, in internal/backend/%s/%s): %v", k, k, packageDoc, err))
		}
		if bullet := "- **`" + string(k) + "`**"; !strings.Contains(backends, bullet) {
			problems = append(problems, fmt.Sprintf("kind %s has no bullet %q under ## Backends in %s", k, bullet, docsTemplate))
		}
		example := "examples/backends/" + string(k) + "/main.tf"
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(example))); err != nil {
			problems = append(problems, fmt.Sprintf("kind %s has no example: %v", k, err))
		}
		include := `{{ tffile "` + example + `" }}`
		if !strings.Contains(template, include) {
			problems = append(problems, fmt.Sprintf("kind %s: %s does not include its example (%s)", k, docsTemplate, include))
			continue
		}
		// The section the example is in introduces this kind and no other.
		switch heading := sectionOf(template, include); {
		case heading == "":
			problems = append(problems, fmt.Sprintf("kind %s: %s includes its example under no heading", k, docsTemplate))
		case sections[heading] != "":
			problems = append(problems, fmt.Sprintf("kinds %s and %s share the section %q of %s: give each its own", sections[heading], k, heading, docsTemplate))
		default:
			sections[heading] = k
		}
	}
	return problems
}

// sectionOf is the last Markdown heading line before include in template, "" when none precedes it.
func sectionOf(template, include string) string {
	before, _, _ := strings.Cut(template, include)
	headings := regexp.MustCompile(`(?m)^#{1,6} .*$`).FindAllString(before, -1)
	if len(headings) == 0 {
		return ""
	}
	return strings.TrimSpace(headings[len(headings)-1])
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
	root, decls := repoRoot(t), &declarations{}
	docs := map[string]string{}
	refs := 0
	for _, name := range blueprintFiles {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		docs[name] = string(data)
		refs += len(symbolRefRE.FindAllString(docs[name], -1))
	}
	template, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(docsTemplate)))
	if err != nil {
		t.Fatal(err)
	}
	kinds, err := kindsOf(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(kinds) < 3 {
		t.Fatalf("found the kinds %v: kindsOf no longer finds the backend packages' Kind constants", kinds)
	}
	if refs < 100 {
		t.Fatalf("found %d path#Symbol references in %v: the pattern no longer matches how the documents cite code", refs, blueprintFiles)
	}
	for _, name := range blueprintFiles {
		doc := docs[name]
		for check, problems := range map[string][]string{
			"path#Symbol references": symbolRefProblems(doc, root, decls),
			"path:line references":   lineRefProblems(doc),
			"relative links":         linkProblems(doc, "."),
		} {
			for _, p := range problems {
				t.Errorf("%s, %s: %s", name, check, p)
			}
		}
	}
	for check, problems := range map[string][]string{
		"feature matrix": matrixProblems(docs[featuresFile], "."),
		"backend kinds":  kindProblems(kinds, docs[featuresFile], string(template), root),
	} {
		for _, p := range problems {
			t.Errorf("%s, %s: %s", featuresFile, check, p)
		}
	}
	problems, docRefs := packageDocProblems(root, decls)
	if docRefs < 20 {
		t.Errorf("found %d file#Symbol references in the backends' %s: the pattern no longer matches how they cite code", docRefs, packageDoc)
	}
	for _, p := range problems {
		t.Errorf("package docs: %s", p)
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
	// A tree of one complete kind, "alpha": its package, example and docs; "beta" has only its package, "gamma"
	// only its example.
	tree := t.TempDir()
	// "zeta" has all but its line in the descriptor table, "eta" all but its descriptor file, "iota" all but
	// its package doc; "theta" is as complete as "alpha".
	for _, f := range []string{"internal/backend/alpha/backend.go", "internal/backend/alpha/doc.go", "internal/backend/beta/backend.go",
		"internal/backend/beta/doc.go", "examples/backends/alpha/main.tf", "examples/backends/gamma/main.tf",
		"internal/provider/backend_alpha.go", "internal/provider/backend_beta.go", "internal/provider/backend_gamma.go",
		"internal/backend/zeta/backend.go", "internal/backend/zeta/doc.go", "examples/backends/zeta/main.tf",
		"internal/provider/backend_zeta.go", "internal/backend/eta/backend.go", "internal/backend/eta/doc.go",
		"examples/backends/eta/main.tf", "internal/backend/theta/backend.go", "internal/backend/theta/doc.go",
		"examples/backends/theta/main.tf", "internal/provider/backend_theta.go", "internal/backend/iota/backend.go",
		"examples/backends/iota/main.tf", "internal/provider/backend_iota.go"} {
		p := filepath.Join(tree, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	table := "package provider\n\nvar backendDescriptors = []backendDescriptor{\n\talphaDescriptor{},\n\tbetaDescriptor{},\n\tgammaDescriptor{},\n\tetaDescriptor{},\n\tthetaDescriptor{},\n\tiotaDescriptor{},\n}\n"
	if err := os.WriteFile(filepath.Join(tree, filepath.FromSlash(descriptorTable)), []byte(table), 0o600); err != nil {
		t.Fatal(err)
	}
	// A Go file declaring one of each kind of top-level name, methods on a pointer and on a generic receiver.
	src := "package x\n\nfunc F() {}\n\ntype T struct{}\n\nfunc (*T) M() {}\n\ntype G[K any] struct{}\n\nfunc (g G[K]) N() {}\n\n" +
		"var V = 1\n\nconst (\n\tC1 = iota\n\tC2\n)\n\nfunc init() { var local int; _ = local }\n"
	if err := os.MkdirAll(filepath.Join(tree, "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "pkg", "x.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	matrix := func(header, row string) string {
		return "## Feature matrix\n\n" + header + "\n| --- | --- | --- | --- | --- |\n" + row + "\n\nNotes\n"
	}
	fullHeader := "| concern | gcp | kubernetes | kvm | memory |"
	fullRow := "| identity | yes: a | partial: b | no: c | yes |"
	alphaDoc := matrix("| concern | alpha |", "| identity | yes |")
	alphaTemplate := "# Provider\n\n## Backends\n\n- **`alpha`**: the first.\n\n## Alpha\n\n{{ tffile \"examples/backends/alpha/main.tf\" }}\n"
	symbols := func(d string) []string { return symbolRefProblems(d, tree, &declarations{}) }
	kinds := func(ks []Kind, template string) func(string) []string {
		return func(d string) []string { return kindProblems(ks, d, template, tree) }
	}
	// pkgDoc checks a tree of one backend package, alpha, whose doc.go is the document and whose backend.go
	// declares Backend, Backend.Get and New; other, when set, is a second file of the package.
	pkgDoc := func(other string) func(string) []string {
		return func(d string) []string {
			root := t.TempDir()
			dir := filepath.Join(root, "internal", "backend", "alpha")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, src := range map[string]string{
				"backend.go": "package alpha\n\ntype Backend struct{}\n\nfunc (*Backend) Get() {}\n\nfunc New() {}\n",
				"doc.go":     d,
				"other.go":   other,
			} {
				if src == "" {
					continue
				}
				if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			problems, _ := packageDocProblems(root, &declarations{})
			return problems
		}
	}
	tests := map[string]struct {
		check func(doc string) []string
		doc   string
		want  string // "" for no problem
	}{
		"function":                      {symbols, "`pkg/x.go#F`", ""},
		"type":                          {symbols, "`pkg/x.go#T`", ""},
		"method, pointer receiver":      {symbols, "`pkg/x.go#T.M`", ""},
		"method, generic receiver":      {symbols, "`pkg/x.go#G.N`", ""},
		"var":                           {symbols, "`pkg/x.go#V`", ""},
		"const in a group":              {symbols, "`pkg/x.go#C2`", ""},
		"real tree":                     {func(d string) []string { return symbolRefProblems(d, root, &declarations{}) }, "`internal/backend/registry.go#Registry.Backend`", ""},
		"missing symbol":                {symbols, "`pkg/x.go#Gone`", "declares no top-level Gone"},
		"method on the wrong type":      {symbols, "`pkg/x.go#G.M`", "declares no top-level G.M"},
		"method without receiver":       {symbols, "`pkg/x.go#M`", "declares no top-level M"},
		"local variable":                {symbols, "`pkg/x.go#local`", "declares no top-level local"},
		"missing file":                  {symbols, "`pkg/nothere.go#F`", "no such file"},
		"not a Go file":                 {symbols, "`scripts/env.sh#start`", "not a Go file"},
		"line reference":                {lineRefProblems, "see `internal/backend/backend.go:22`", "cite by symbol"},
		"no line reference":             {lineRefProblems, "see `internal/backend/backend.go#Kinds` and ghcr.io/x/squid:<version>", ""},
		"link resolves":                 {func(d string) []string { return linkProblems(d, ".") }, "[c](backend.go) [k](kvm) [a](#x) [w](https://example.com/y)", ""},
		"link broken":                   {func(d string) []string { return linkProblems(d, ".") }, "[c](nothere.go#L3)", "no such file"},
		"matrix complete":               {func(d string) []string { return matrixProblems(d, pkgs) }, matrix(fullHeader, fullRow), ""},
		"column missing":                {func(d string) []string { return matrixProblems(d, pkgs) }, matrix("| concern | gcp | kubernetes | memory |", "| identity | yes | yes | yes |"), "kvm has no column"},
		"column of nothing":             {func(d string) []string { return matrixProblems(d, pkgs) }, matrix("| concern | gcp | kubernetes | kvm | memory | aws |", "| identity | yes | yes | yes | yes | no |"), "aws names no backend"},
		"cell without value":            {func(d string) []string { return matrixProblems(d, pkgs) }, matrix(fullHeader, "| identity | yes | maybe | yes | yes |"), "does not start with"},
		"no matrix":                     {func(d string) []string { return matrixProblems(d, pkgs) }, "## 4. Identity\n", "no \"## Feature matrix\" heading"},
		"kind complete":                 {kinds([]Kind{"alpha"}, alphaTemplate), alphaDoc, ""},
		"kind without column":           {kinds([]Kind{"alpha"}, alphaTemplate), matrix("| concern | beta |", "| identity | yes |"), "kind alpha has no column"},
		"kind without package":          {kinds([]Kind{"gamma"}, strings.ReplaceAll(alphaTemplate, "alpha", "gamma")), matrix("| concern | gamma |", "| identity | yes |"), "kind gamma has no backend package"},
		"kind bullet outside Backends":  {kinds([]Kind{"alpha"}, strings.Replace(alphaTemplate, "## Backends", "## Other", 1)), alphaDoc, "no bullet"},
		"kind without bullet":           {kinds([]Kind{"alpha"}, strings.Replace(alphaTemplate, "- **`alpha`**", "- alpha", 1)), alphaDoc, "no bullet"},
		"kind example under no heading": {kinds([]Kind{"alpha"}, "{{ tffile \"examples/backends/alpha/main.tf\" }}\n## Backends\n\n- **`alpha`**: the first.\n"), alphaDoc, "includes its example under no heading"},
		"kinds sharing a section": {kinds([]Kind{"alpha", "theta"}, strings.Replace(alphaTemplate, "the first.", "the first.\n- **`theta`**: the last.", 1)+"{{ tffile \"examples/backends/theta/main.tf\" }}\n"),
			matrix("| concern | alpha | theta |", "| identity | yes | yes |"), "kinds alpha and theta share the section \"## Alpha\""},
		"kind without example":         {kinds([]Kind{"beta"}, "# P\n## Backends\n- **`beta`**\n## Beta\n{{ tffile \"examples/backends/beta/main.tf\" }}\n"), matrix("| concern | beta |", "| identity | yes |"), "kind beta has no example"},
		"kind example not included":    {kinds([]Kind{"alpha"}, strings.Replace(alphaTemplate, "{{ tffile", "{{ codefile", 1)), alphaDoc, "does not include its example"},
		"kind with matrix unreadable":  {kinds([]Kind{"alpha"}, alphaTemplate), "## 4. Identity\n", "no \"## Feature matrix\" heading"},
		"kind not registered":          {kinds([]Kind{"zeta"}, strings.ReplaceAll(alphaTemplate, "alpha", "zeta")), matrix("| concern | zeta |", "| identity | yes |"), "kind zeta has no zetaDescriptor{} in backendDescriptors"},
		"kind without descriptor file": {kinds([]Kind{"eta"}, strings.ReplaceAll(alphaTemplate, "alpha", "eta")), matrix("| concern | eta |", "| identity | yes |"), "kind eta has no descriptor file"},
		"kind without package doc":     {kinds([]Kind{"iota"}, strings.ReplaceAll(alphaTemplate, "alpha", "iota")), matrix("| concern | iota |", "| identity | yes |"), "kind iota has no package doc"},
		"package doc resolves":         {pkgDoc(""), "// Package alpha: backend.go#Backend.Get and (backend.go#New), and\n// internal/backend/alpha/backend.go#Backend.\npackage alpha\n", ""},
		"package doc, missing symbol":  {pkgDoc(""), "// Package alpha: backend.go#Gone.\npackage alpha\n", "declares no top-level Gone"},
		"package doc, missing file":    {pkgDoc(""), "// Package alpha: nothere.go#F.\npackage alpha\n", "no such file"},
		"package doc, root path":       {pkgDoc(""), "// Package alpha: internal/backend/beta/backend.go#Backend.\npackage alpha\n", "no such file"},
		"package comment twice":        {pkgDoc("// Package alpha, again.\npackage alpha\n"), "// Package alpha.\npackage alpha\n", "a package comment outside doc.go"},
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
