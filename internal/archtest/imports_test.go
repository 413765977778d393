package archtest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/serve-zone/ingress/"

// domainFree are the internal packages that know nothing of the ingress's domain: any
// package may import them.
var domainFree = []string{
	"internal/ascii", "internal/atomicfile", "internal/jsonx", "internal/rawnet", "internal/redact",
	"internal/testcert",
}

// testSupport are imported by tests (and by each other) only, never by shipped code.
var testSupport = []string{
	"internal/binarytest", "internal/echotest", "internal/floodtest", "internal/pebbletest", "internal/redistest", "internal/testwait", "internal/toolbin",
}

// allowed says which of our packages each package's non-test files may import, besides
// domainFree. A package missing here fails the test: a new package takes a line (and a
// row in docs/architecture.md).
var allowed = map[string][]string{
	"env":                     nil,
	"relay":                   nil,
	"stats":                   nil,
	"routetable":              {"stats"},
	"relaysim":                {"relay", "routetable"},
	"register":                {"relay", "routetable", "stats", "env"},
	"acme":                    {"routetable", "acme/internal/redisstore"},
	"proxy":                   {"routetable", "stats", "proxy/internal/clients", "proxy/internal/h1wire", "proxy/internal/h2", "proxy/internal/park", "proxy/internal/penalty", "proxy/internal/proxyhdr", "proxy/internal/tlsbuf", "proxy/internal/upstream"},
	"proxy/internal/clients":  {"proxy/internal/penalty"},
	"proxy/internal/h1wire":   nil,
	"proxy/internal/h2":       {"proxy/internal/park"},
	"proxy/internal/park":     nil,
	"proxy/internal/penalty":  nil,
	"proxy/internal/proxyhdr": nil,
	"proxy/internal/tlsbuf":   nil,
	"proxy/internal/upstream": nil,
	"internal/archtest":       nil,
	"internal/ascii":          nil,
	"internal/atomicfile":     nil,
	"internal/jsonx":          nil,
	"internal/rawnet":         nil,
	"internal/redact":         nil,
	"internal/testcert":       nil,
	"internal/testwait":       nil,
	"internal/echotest":       nil,
	"internal/toolbin":        nil,
	"internal/pebbletest":     {"internal/toolbin"},
	"internal/redistest":      {"internal/toolbin"},
	"internal/binarytest":     {"routetable"},
	"internal/floodtest":      nil,

	"acme/internal/redisstore": nil,
}

// unruled are the packages that may import any of ours (wiring, tools, tests of the
// whole): the binary, the benchmark tools, the reliability suite and its browser suite.
func unruled(pkg string) bool {
	return pkg == "cmd/ingress" || strings.HasPrefix(pkg, "bench/") || pkg == "reliability" || pkg == "reliability/browser"
}

// TestImportRules checks every non-test import of ours in the module against allowed.
func TestImportRules(t *testing.T) {
	root := moduleRoot(t)
	imports := map[string]map[string]bool{} // package dir -> our imports (non-test files)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "bin" || name == "out") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		if imports[pkg] == nil {
			imports[pkg] = map[string]bool{}
		}
		for _, is := range f.Imports {
			p, _ := strconv.Unquote(is.Path.Value)
			if strings.HasPrefix(p, module) {
				imports[pkg][strings.TrimPrefix(p, module)] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"proxy", "register", "routetable", "stats", "proxy/internal/h2"} {
		if imports[must] == nil {
			t.Fatalf("package %s not found under %s: the walk is broken", must, root)
		}
	}
	pkgs := make([]string, 0, len(imports))
	for p := range imports {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, pkg := range pkgs {
		if unruled(pkg) {
			if pkg == "cmd/ingress" { // shipped: no test support in the binary
				for imp := range imports[pkg] {
					if slices.Contains(testSupport, imp) {
						t.Errorf("%s imports the test support package %s", pkg, imp)
					}
				}
			}
			continue
		}
		rule, ok := allowed[pkg]
		if !ok {
			t.Errorf("package %s has no import rule: add it to allowed (and to docs/architecture.md)", pkg)
			continue
		}
		for imp := range imports[pkg] {
			if slices.Contains(domainFree, imp) || slices.Contains(rule, imp) {
				continue
			}
			t.Errorf("%s imports %s, which its rule does not allow (allowed: %v and the domain-free internal packages)", pkg, imp, rule)
		}
	}
}

// moduleRoot is the module's directory, two levels up from this test's.
func moduleRoot(t *testing.T) string {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found from the test's directory: %v", err)
	}
	return root
}
