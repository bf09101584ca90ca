package hostprograms

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// A use is one place where the repository runs a program of the machine's.
type use struct {
	program string
	where   string // file:line, relative to the repository root
}

// goUses finds the programs Go code starts or looks up: the first argument of exec.Command, exec.LookPath and
// the second of exec.CommandContext when it is a string constant, a name bound to one, or a range variable over a
// literal list of them; and the program after "ip netns exec NS", which is the machine's too. A program named
// only at run time (a CLI path from the environment, args[0] of a helper) is not seen: those are the project's
// own builds or the callers' literals, which this scan finds where they are written.
func goUses(root string) ([]use, error) {
	fset := token.NewFileSet()
	files := map[string][]*ast.File{} // by directory: a package's names are bound across its files
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDir(root, path, d) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files[filepath.Dir(path)] = append(files[filepath.Dir(path)], file)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var uses []use
	for _, pkg := range files {
		global := bindings{}
		for _, file := range pkg {
			for _, decl := range file.Decls {
				if gen, ok := decl.(*ast.GenDecl); ok {
					global.add(gen)
				}
			}
		}
		for _, file := range pkg {
			for _, decl := range file.Decls {
				if fn, ok := decl.(*ast.FuncDecl); ok {
					local := bindings{}
					for k, v := range global {
						local[k] = v
					}
					local.add(fn)
					uses = append(uses, local.execUses(root, fset, fn)...)
				}
			}
		}
	}
	return uses, nil
}

func (b bindings) execUses(root string, fset *token.FileSet, fn *ast.FuncDecl) []use {
	var uses []use
	ast.Inspect(fn, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "exec" {
			return true
		}
		first := 0
		switch sel.Sel.Name {
		case "Command", "LookPath":
		case "CommandContext":
			first = 1
		default:
			return true
		}
		if len(call.Args) <= first {
			return true
		}
		pos := fset.Position(call.Pos())
		rel, _ := filepath.Rel(root, pos.Filename)
		at := fmt.Sprintf("%s:%d", rel, pos.Line)
		names := b.values(call.Args[first])
		for _, name := range names {
			if !isProjectPath(name) {
				uses = append(uses, use{program: name, where: at})
			}
		}
		// ip netns exec NS PROGRAM: PROGRAM is the machine's, run in a namespace.
		if len(names) == 1 && names[0] == "ip" && len(call.Args) > first+4 && b.words(call.Args[first+1:first+3]) == "netns exec" {
			for _, name := range b.values(call.Args[first+4]) {
				uses = append(uses, use{program: name, where: at})
			}
		}
		return true
	})
	return uses
}

// bindings are what names are set to: a package's constants and variables, and within a function its own
// declarations, := assignments and range variables over a literal list. A name set in several places in one
// function has all their values: the scan reads code, not its flow, and would rather name a program too many than
// miss one. (Shadowing a package's name inside a function adds to it, for the same reason.)
type bindings map[string][]ast.Expr

func (b bindings) add(node ast.Node) {
	ast.Inspect(node, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			for i, name := range n.Names {
				if i < len(n.Values) {
					b[name.Name] = append(b[name.Name], n.Values[i])
				}
			}
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE && len(n.Lhs) == len(n.Rhs) {
				for i, l := range n.Lhs {
					if id, ok := l.(*ast.Ident); ok {
						b[id.Name] = append(b[id.Name], n.Rhs[i])
					}
				}
			}
		case *ast.RangeStmt:
			if id, ok := n.Value.(*ast.Ident); ok {
				if list, ok := n.X.(*ast.CompositeLit); ok {
					b[id.Name] = append(b[id.Name], list.Elts...)
				}
			}
		}
		return true
	})
}

// values is what an expression names: a string literal, or the literals a name is bound to.
func (b bindings) values(e ast.Expr) []string {
	return b.valuesSeen(e, map[string]bool{})
}

func (b bindings) valuesSeen(e ast.Expr, seen map[string]bool) []string {
	switch e := e.(type) {
	case *ast.BasicLit:
		if s, err := strconv.Unquote(e.Value); err == nil && e.Kind == token.STRING {
			return []string{s}
		}
	case *ast.Ident:
		if seen[e.Name] {
			return nil
		}
		seen[e.Name] = true
		var out []string
		for _, v := range b[e.Name] {
			out = append(out, b.valuesSeen(v, seen)...)
		}
		return out
	}
	return nil
}

// words joins the expressions' values when each is exactly one literal, else "".
func (b bindings) words(es []ast.Expr) string {
	var words []string
	for _, e := range es {
		v := b.values(e)
		if len(v) != 1 {
			return ""
		}
		words = append(words, v[0])
	}
	return strings.Join(words, " ")
}

// skipDir leaves out what is not the project's code: VCS data, the generated docs, and the proxy image's own
// files (scripts/image/rootfs), which run inside the guest, not on the machine.
func skipDir(root, path string, d fs.DirEntry) bool {
	rel, _ := filepath.Rel(root, path)
	return (strings.HasPrefix(d.Name(), ".") && rel != ".") || rel == "docs" || rel == filepath.Join("scripts", "image", "rootfs") ||
		d.Name() == "testdata" || d.Name() == "node_modules"
}

// shellUses finds the commands a shell script runs on the machine: the first word of each simple command when it
// is a plain word, looking through the wrappers that run another command (exec, command, env, nice, nohup,
// setsid, timeout, ip netns exec, nsenter and unshare), and into a bash -c script written in place. Functions
// the project's scripts define (defined), shell builtins,
// and paths of the project's own scripts are not programs of the machine. What runs inside a chroot or guest
// (after chroot DIR, in a quoted sh -c string) is the guest's, and is not looked into.
func shellUses(rel string, src []byte, defined map[string]bool) ([]use, error) {
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(string(src)), rel)
	if err != nil {
		return nil, err
	}
	var uses []use
	syntax.Walk(file, func(n syntax.Node) bool {
		call, ok := n.(*syntax.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		for _, name := range commandWords(call.Args) {
			if defined[name] || shellBuiltins[name] || isProjectPath(name) {
				continue
			}
			uses = append(uses, use{program: name, where: fmt.Sprintf("%s:%d", rel, call.Pos().Line())})
		}
		return true
	})
	return uses, nil
}

// commandWords is every program a simple command runs on the machine: the wrapper and what it wraps, and
// the commands of a bash -c or sh -c script written in place (its expansions read as run-time words).
func commandWords(args []*syntax.Word) []string {
	var out []string
	for i := 0; i < len(args); {
		name := args[i].Lit()
		if name == "" {
			return out // a variable or an expansion: a program chosen at run time
		}
		out = append(out, name)
		rest := args[i+1:]
		skip, ok := wrapped(name, rest)
		if !ok {
			if (name == "bash" || name == "sh") && len(rest) > 1 && rest[0].Lit() == "-c" {
				out = append(out, inlineScript(rest[1])...)
			}
			return out
		}
		if name == "exec" || name == "command" {
			out = out[:len(out)-1] // builtins, not programs
		}
		i += 1 + skip
	}
	return out
}

// wrapped says whether the command named runs another, and how many of its arguments come before that one.
func wrapped(name string, rest []*syntax.Word) (skip int, ok bool) {
	options := func(withValue map[string]bool) int {
		for j := 0; j < len(rest); j++ {
			w := rest[j].Lit()
			if w == "" && len(rest[j].Parts) > 0 && strings.HasPrefix(litPrefix(rest[j]), "-") {
				w = litPrefix(rest[j]) // --net="/run/netns/$NETNS": an option with a run-time value
			}
			switch {
			case w == "--":
				return j + 1
			case strings.HasPrefix(w, "-"):
				if withValue[w] {
					j++
				}
			case strings.Contains(w, "=") && name == "env":
			case w == "" && name == "env" && len(rest[j].Parts) > 0 && strings.Contains(litPrefix(rest[j]), "="):
			default:
				return j
			}
		}
		return len(rest)
	}
	switch name {
	case "exec", "nice", "nohup", "setsid", "sudo", "tini":
		return options(map[string]bool{"-n": true, "-a": true}), true
	case "command":
		if len(rest) > 0 && rest[0].Lit() == "-v" {
			return 0, false // a lookup, not a run: the looked-up name is seen where it runs
		}
		return options(nil), true
	case "env":
		return options(map[string]bool{"-u": true, "-C": true, "-S": true}), true
	case "timeout":
		j := options(map[string]bool{"-s": true, "-k": true, "--signal": true, "--kill-after": true})
		return j + 1, true // the duration
	case "ip":
		if len(rest) > 3 && rest[0].Lit() == "netns" && rest[1].Lit() == "exec" {
			return 3, true
		}
	case "nsenter", "unshare":
		return options(map[string]bool{"-t": true, "--target": true, "-S": true, "-G": true, "--propagation": true,
			"--setuid": true, "--setgid": true, "--setgroups": true}), true
	case "flock":
		// flock FILE COMMAND, flock -x N (a descriptor: nothing to run)
		j := options(map[string]bool{"-w": true, "-E": true})
		if j+1 < len(rest) {
			return j + 1, true
		}
	}
	return 0, false
}

func litPrefix(w *syntax.Word) string {
	if l, ok := w.Parts[0].(*syntax.Lit); ok {
		return l.Value
	}
	return ""
}

// inlineScript reads a bash -c argument written in place: its literal text, with each expansion as a word the
// scan treats as chosen at run time, parsed as a script of its own.
func inlineScript(w *syntax.Word) []string {
	var text strings.Builder
	// Inside double quotes the shell takes \", \$, \` and \\ as the character alone.
	unescape := strings.NewReplacer(`\"`, `"`, `\$`, `$`, "\\`", "`", `\\`, `\`)
	var add func(parts []syntax.WordPart, quoted bool)
	add = func(parts []syntax.WordPart, quoted bool) {
		for _, p := range parts {
			switch p := p.(type) {
			case *syntax.Lit:
				if quoted {
					text.WriteString(unescape.Replace(p.Value))
					continue
				}
				text.WriteString(p.Value)
			case *syntax.SglQuoted:
				text.WriteString(p.Value)
			case *syntax.DblQuoted:
				add(p.Parts, true)
			default:
				text.WriteString("$RUNTIME")
			}
		}
	}
	add(w.Parts, false)
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(text.String()), "")
	if err != nil {
		return nil // not a script the scan can read as written; its programs are listed by hand if any
	}
	var out []string
	syntax.Walk(file, func(n syntax.Node) bool {
		if call, ok := n.(*syntax.CallExpr); ok && len(call.Args) > 0 {
			out = append(out, commandWords(call.Args)...)
		}
		return true
	})
	return out
}

func isProjectPath(name string) bool {
	return strings.HasPrefix(name, "./") || strings.Contains(name, "/scripts/") || strings.HasPrefix(name, "scripts/") || strings.HasPrefix(name, "../") ||
		strings.HasPrefix(name, ".ci/")
}

// shellBuiltins are bash's builtins and keywords: they run no program.
var shellBuiltins = setOf(`: . [ alias bg bind break builtin caller cd command compgen complete compopt continue
	declare dirs disown echo enable eval exec exit export false fc fg getopts hash help history jobs kill let local
	logout mapfile popd printf pushd pwd read readarray readonly return set shift shopt source suspend test times
	trap true type typeset ulimit umask unalias unset wait`)

func setOf(words string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(words) {
		m[w] = true
	}
	return m
}

// scriptUses scans the project's shell scripts: every file under scripts/ (but the guest's rootfs) and .ci/
// whose first line names a shell. The functions any of them defines are names of the project, not programs (a
// script sources another's), and the makefile's shell is scanned with the same set.
func scriptUses(root string) ([]use, error) {
	scripts := map[string][]byte{}
	for _, dir := range []string{"scripts", ".ci"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path != filepath.Join(root, dir) && skipDir(root, path, d) {
					return filepath.SkipDir
				}
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if shellShebang.Match(src) || strings.HasSuffix(path, ".sh") {
				rel, _ := filepath.Rel(root, path)
				scripts[rel] = src
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	defined := map[string]bool{}
	for rel, src := range scripts {
		file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(string(src)), rel)
		if err != nil {
			return nil, err
		}
		syntax.Walk(file, func(n syntax.Node) bool {
			if f, ok := n.(*syntax.FuncDecl); ok {
				defined[f.Name.Value] = true
			}
			return true
		})
	}
	uses, err := makeUses(root, defined)
	if err != nil {
		return nil, err
	}
	for rel, src := range scripts {
		u, err := shellUses(rel, src, defined)
		if err != nil {
			return nil, err
		}
		uses = append(uses, u...)
	}
	return uses, nil
}

var shellShebang = regexp.MustCompile(`^#!\s*/(usr/)?bin/(env\s+)?(ba)?sh\b`)

// makeUses scans the makefile's shell as make hands it to the shell: each recipe line, and the value of each
// recursively expanded variable (the macros recipes $(call)), continuation lines joined. Make's own references
// ($(VAR), $(call ...)) become a word the scan treats as chosen at run time, $$ becomes $, and a recipe's @, -
// and + prefixes go.
func makeUses(root string, defined map[string]bool) ([]use, error) {
	src, err := os.ReadFile(filepath.Join(root, "GNUmakefile"))
	if err != nil {
		return nil, err
	}
	var uses []use
	lines := strings.Split(string(src), "\n")
	inRule := false
	for n := 0; n < len(lines); n++ {
		start := n + 1
		logical := lines[n]
		for strings.HasSuffix(logical, "\\") && n+1 < len(lines) {
			n++
			logical += "\n" + lines[n]
		}
		var shell string
		switch {
		case strings.HasPrefix(logical, "\t") && inRule:
			shell = strings.TrimLeft(strings.TrimPrefix(logical, "\t"), "@-+")
		case strings.TrimSpace(logical) == "" || strings.HasPrefix(logical, "#") || makeConditional.MatchString(logical):
			continue
		case makeMacro.MatchString(logical):
			inRule = false
			shell = makeMacro.FindStringSubmatch(logical)[1]
		default:
			inRule = makeRule.MatchString(logical)
			continue
		}
		u, err := shellUses("GNUmakefile", []byte(makeToShell(shell)), defined)
		if err != nil {
			return nil, fmt.Errorf("GNUmakefile:%d: %w", start, err)
		}
		for i := range u {
			line, _ := strconv.Atoi(u[i].where[strings.LastIndex(u[i].where, ":")+1:])
			u[i].where = fmt.Sprintf("GNUmakefile:%d", start+line-1)
		}
		uses = append(uses, u...)
	}
	return uses, nil
}

var (
	makeConditional = regexp.MustCompile(`^(ifeq|ifneq|ifdef|ifndef|else|endif)\b`)
	makeMacro       = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\s*=\s*((?s).*)$`)
	makeRule        = regexp.MustCompile(`^[^\t=#]*[^:=]:([^=]|$)`)
)

// makeToShell turns a line of the makefile into the shell make runs: $$ is the shell's $, and each make reference
// ($(VAR), $(call f,args)), balanced parentheses and all, a run-time word.
func makeToShell(line string) string {
	line = strings.ReplaceAll(line, "$$", "\x00")
	var out strings.Builder
	for i := 0; i < len(line); i++ {
		if line[i] != '$' || i+1 >= len(line) || line[i+1] != '(' {
			out.WriteByte(line[i])
			continue
		}
		depth := 0
		j := i + 1
		for ; j < len(line); j++ {
			if line[j] == '(' {
				depth++
			} else if line[j] == ')' {
				depth--
				if depth == 0 {
					break
				}
			}
		}
		out.WriteString("${MAKEREF}")
		i = j
	}
	return strings.ReplaceAll(out.String(), "\x00", "$")
}

// allUses is every program the repository runs on the machine, sorted by program then place.
func allUses(root string) ([]use, error) {
	var all []use
	for _, scan := range []func(string) ([]use, error){goUses, scriptUses} {
		u, err := scan(root)
		if err != nil {
			return nil, err
		}
		all = append(all, u...)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].program != all[j].program {
			return all[i].program < all[j].program
		}
		return all[i].where < all[j].where
	})
	return all, nil
}
