package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestCommentNames fails for a comment that names an identifier which exists neither in
// the comment's package (any identifier its files use) nor among what the packages it
// imports declare: a name left behind by a rename or a removal. A comment names an
// identifier when it back-quotes it, links it (a doc link in brackets), or spells it as
// only code spells a word: camel case that starts in lower case, or qualified by the
// name of a package it imports. Words a wire speaks (any word of the module's string
// literals: JSON fields, method names) and what a comment puts in double quotes are no
// identifiers of ours.
func TestCommentNames(t *testing.T) {
	root := moduleRoot(t)
	listed := listPackages(t, root)
	decls := map[string]map[string]bool{} // by import path: the names its files declare
	declared := func(path string) map[string]bool {
		if d, ok := decls[path]; ok {
			return d
		}
		d := map[string]bool{}
		if p, ok := listed[path]; ok {
			for _, f := range p.files {
				addDecls(d, filepath.Join(p.dir, f))
			}
		}
		decls[path] = d
		return d
	}
	var pkgs []*commentPkg
	wire := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "bin" || name == "out") {
			return filepath.SkipDir
		}
		if p := parseDir(t, path, wire); p != nil {
			pkgs = append(pkgs, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var stale []string
	for _, p := range pkgs {
		stale = append(stale, p.check(root, listed, declared, wire)...)
	}
	sort.Strings(stale)
	for _, s := range stale {
		t.Error(s)
	}
}

// commentPkg is the Go files of one directory: a package and its tests.
type commentPkg struct {
	fset  *token.FileSet
	files []*ast.File
	own   map[string]bool // every identifier the files use
}

// parseDir parses dir's Go files (nil when it has none), adding the words of their
// string literals to wire.
func parseDir(t *testing.T, dir string, wire map[string]bool) *commentPkg {
	names, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	if len(names) == 0 {
		return nil
	}
	p := &commentPkg{fset: token.NewFileSet(), own: map[string]bool{}}
	for _, name := range names {
		f, err := parser.ParseFile(p.fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p.files = append(p.files, f)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Ident:
				p.own[n.Name] = true
			case *ast.BasicLit:
				if n.Kind == token.STRING {
					for _, w := range identWord.FindAllString(n.Value, -1) {
						wire[w] = true
					}
				}
			}
			return true
		})
	}
	return p
}

// check returns a line for every name a comment of p names that names nothing.
func (p *commentPkg) check(root string, listed map[string]listedPkg, declared func(string) map[string]bool, wire map[string]bool) []string {
	// What the package's imports declare, by the name its files give each.
	byLocal := map[string]map[string]bool{}
	imported := map[string]bool{}
	for _, f := range p.files {
		for _, is := range f.Imports {
			path, _ := strconv.Unquote(is.Path.Value)
			local := ""
			if l, ok := listed[path]; ok {
				local = l.name
			}
			if is.Name != nil {
				local = is.Name.Name
			}
			d := declared(path)
			byLocal[local] = d
			for k := range d {
				imported[k] = true
			}
		}
	}
	known := func(name string) bool { return p.own[name] || imported[name] || universe[name] || wire[name] }
	var stale []string
	for _, f := range p.files {
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				for _, ref := range commentRefs(c.Text, byLocal) {
					if !resolves(ref, byLocal, known) {
						pos := p.fset.Position(c.Pos())
						rel, _ := filepath.Rel(root, pos.Filename)
						stale = append(stale, rel+":"+strconv.Itoa(pos.Line)+": "+ref+" names nothing in the package or its imports")
					}
				}
			}
		}
	}
	return stale
}

// resolves reports whether every part of the dotted ref names something: after an
// imported package's name, a name it declares; anywhere else a known name. A plural
// ("two bytes.Buffers") names what its singular does.
func resolves(ref string, byLocal map[string]map[string]bool, known func(string) bool) bool {
	if r, ok := strings.CutSuffix(ref, "s"); ok && resolves(r, byLocal, known) {
		return true
	}
	parts := strings.Split(ref, ".")
	if d, ok := byLocal[parts[0]]; ok && len(parts) > 1 {
		if !d[parts[1]] {
			return false
		}
		parts = parts[2:]
	}
	for _, p := range parts {
		if !known(p) {
			return false
		}
	}
	return true
}

var (
	backQuoted = regexp.MustCompile("`([^`\n]+)`")
	quoted     = regexp.MustCompile(`"[^"\n]*"`)
	docLink    = regexp.MustCompile(`\[\*?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\]`)
	identWord  = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	dotted     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:\(\))?$`)
	// A dotted word, not inside a path, a URL, an escape or a hyphenated word.
	word  = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./\-\\%])([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)`)
	urlRe = regexp.MustCompile(`[a-z]+://\S+`)
)

// prose are words spelled like identifiers that comments use as words.
var prose = map[string]bool{"eBPF": true, "iOS": true, "macOS": true, "gRPC": true, "kB": true}

// fileExt are the extensions of the files comments name.
var fileExt = map[string]bool{"go": true, "md": true, "json": true, "sh": true, "txt": true, "yaml": true, "mod": true, "sum": true, "pem": true, "cfg": true, "conf": true}

// commentRefs returns what comment text names as identifiers (see TestCommentNames),
// byLocal being the package's imports by the name its files give them.
func commentRefs(text string, byLocal map[string]map[string]bool) []string {
	text = urlRe.ReplaceAllString(text, " ")
	var refs []string
	for _, m := range backQuoted.FindAllStringSubmatch(text, -1) {
		if dotted.MatchString(m[1]) {
			refs = append(refs, strings.TrimSuffix(m[1], "()"))
		}
	}
	text = backQuoted.ReplaceAllString(text, " ")
	text = quoted.ReplaceAllString(text, " ")
	for _, m := range docLink.FindAllStringSubmatch(text, -1) {
		if strings.ToUpper(m[1]) != m[1] { // not a placeholder in capitals
			refs = append(refs, m[1])
		}
	}
	for _, m := range word.FindAllStringSubmatchIndex(text, -1) {
		w := text[m[2]:m[3]]
		if end := m[3]; end < len(text) && (text[end] == '/' || text[end] == '-') {
			continue // a path or a hyphenated word
		}
		w = strings.TrimRight(w, ".")
		if ext := w[strings.LastIndexByte(w, '.')+1:]; w != ext && fileExt[ext] {
			continue // a file's name
		}
		if codeSpelled(w, byLocal) {
			refs = append(refs, w)
		}
	}
	return refs
}

// codeSpelled reports a dotted word that only code spells: a part of it in camel case
// that starts in lower case, or a name qualified by an imported package's.
func codeSpelled(w string, byLocal map[string]map[string]bool) bool {
	parts := strings.Split(w, ".")
	for _, p := range parts {
		if prose[p] {
			return false
		}
		if len(p) > 1 && 'a' <= p[0] && p[0] <= 'z' && strings.ToLower(p) != p {
			return true
		}
	}
	_, imported := byLocal[parts[0]]
	return imported && len(parts) > 1
}

// universe are Go's predeclared identifiers.
var universe = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range strings.Fields(`any bool byte comparable complex64 complex128 error float32 float64
		int int8 int16 int32 int64 rune string uint uint8 uint16 uint32 uint64 uintptr
		true false iota nil append cap clear close complex copy delete imag len make max min
		new panic print println real recover`) {
		m[n] = true
	}
	return m
}()

// addDecls adds the names file declares (funcs, methods, types, their fields and
// methods, vars, consts) to d.
func addDecls(d map[string]bool, file string) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		return // a file that does not parse declares nothing a comment may name
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			d[n.Name.Name] = true
			return false
		case *ast.TypeSpec:
			d[n.Name.Name] = true
		case *ast.ValueSpec:
			for _, id := range n.Names {
				d[id.Name] = true
			}
		case *ast.Field:
			for _, id := range n.Names {
				d[id.Name] = true
			}
			if len(n.Names) == 0 { // embedded: its type's name is the field's
				if id := embeddedName(n.Type); id != "" {
					d[id] = true
				}
			}
		}
		return true
	})
}

func embeddedName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return embeddedName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

type listedPkg struct {
	name, dir string
	files     []string
}

// listPackages lists every package the module's packages and tests import, with its
// directory and files for this platform (go list).
func listPackages(t *testing.T, root string) map[string]listedPkg {
	cmd := exec.Command("go", "list", "-e", "-deps", "-test", "-f", "{{.ImportPath}}\t{{.Name}}\t{{.Dir}}\t{{join .GoFiles \" \"}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	m := map[string]listedPkg{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 4 || strings.Contains(f[0], " ") {
			continue // a test variant: the package itself is listed too
		}
		m[f[0]] = listedPkg{name: f[1], dir: f[2], files: strings.Fields(f[3])}
	}
	return m
}
