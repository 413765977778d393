package main

// The README and docs/ against the binary (issue 34): every flag of -h documented in
// docs/flags.md and back, every file a usage text or a page names exists, every link
// and anchor resolves, every documented go command carries GOTOOLCHAIN, the shipped
// examples validate, and the README's quick start runs as printed.

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/serve-zone/ingress/internal/binarytest"
)

// root is the module's root, seen from this package's directory.
const root = "../.."

// helpText is `ingress [COMMAND] -h` as the binary prints it.
func helpText(t *testing.T, cmd string) string {
	t.Helper()
	args := []string{"-h"}
	if cmd != "" {
		args = []string{cmd, "-h"}
	}
	var stdout bytes.Buffer
	if code := realMain(args, &stdout, io.Discard, func(string) (string, bool) { return "", false }); code != 0 {
		t.Fatalf("ingress %s -h: exit status %d", cmd, code)
	}
	return stdout.String()
}

// helpFlags are the flags a usage text lists ("  --name ...").
func helpFlags(help string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^  --([a-z0-9-]+)`).FindAllStringSubmatch(help, -1) {
		out = append(out, m[1])
	}
	sort.Strings(out)
	return out
}

// docsFlags reads docs/flags.md: the flags of each "## `ingress …`" section's table, by
// command ("" for the ingress itself).
func docsFlags(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "flags.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	cmd, in := "", false
	row := regexp.MustCompile("^\\| `--([a-z0-9-]+)` \\|")
	for _, line := range strings.Split(string(data), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			c, isCmd := strings.CutPrefix(h, "`ingress")
			in = isCmd
			cmd = strings.TrimSpace(strings.TrimSuffix(c, "`"))
			if _, seen := out[cmd]; in && !seen {
				out[cmd] = nil // the section exists, flags or not
			}
			continue
		}
		if m := row.FindStringSubmatch(line); in && m != nil {
			out[cmd] = append(out[cmd], m[1])
		}
	}
	for c := range out {
		sort.Strings(out[c])
	}
	return out
}

// TestHelpFlagsDocumented: each command's -h lists exactly the flags docs/flags.md gives
// it: `ingress`'s table; proxy's and the demo's, `ingress`'s but the hidden ones, plus
// their own; validate's and healthcheck's own.
func TestHelpFlagsDocumented(t *testing.T) {
	docs := docsFlags(t)
	for _, cmd := range []string{"", "proxy", "demo", "validate", "healthcheck", "version"} {
		name := strings.TrimSpace("ingress " + cmd)
		want, ok := docs[cmd]
		if !ok && cmd != "version" {
			t.Errorf("docs/flags.md has no section ## `%s`", name)
		}
		if cmd == "proxy" || cmd == "demo" {
			for _, f := range docs[""] {
				if !slices.Contains(hiddenFlags[cmd], f) {
					want = append(want, f)
				}
			}
			sort.Strings(want)
		}
		got := helpFlags(helpText(t, cmd))
		for _, f := range got {
			if !slices.Contains(want, f) {
				t.Errorf("%s -h lists --%s, which docs/flags.md does not document for it", name, f)
			}
		}
		for _, f := range want {
			if !slices.Contains(got, f) {
				t.Errorf("docs/flags.md documents --%s for %s, whose -h does not list it", f, name)
			}
		}
	}
	// What proxy and the demo refuse is not listed (issue 34: help proxy listed --routes).
	for _, cmd := range []string{"proxy", "demo"} {
		help := helpText(t, cmd)
		for _, f := range []string{"routes", "relay-ca", "allow-insecure-relay"} {
			if slices.Contains(helpFlags(help), f) {
				t.Errorf("ingress %s -h lists --%s, which it refuses", cmd, f)
			}
		}
	}
}

// TestHelpNamesExistingFiles: every file of the repository a usage text names exists
// (issue 34: -h named docs/deployment.md, which did not).
func TestHelpNamesExistingFiles(t *testing.T) {
	path := regexp.MustCompile(`\b(?:docs/[\w./-]+|README\.md)`)
	for _, cmd := range []string{"", "proxy", "demo", "validate", "healthcheck", "version"} {
		for _, p := range path.FindAllString(helpText(t, cmd), -1) {
			p = strings.TrimRight(p, ".,)")
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("ingress %s -h names %s: %v", cmd, p, err)
			}
		}
	}
}

// markdownPages are the README and the docs/ pages.
func markdownPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(root, "README.md")}, pages...)
}

// anchor is GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped,
// spaces as '-'.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the anchors of a markdown page's headings (outside code blocks).
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	code := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			code = !code
		}
		if !code && strings.HasPrefix(line, "#") {
			out[anchor(strings.TrimLeft(line, "#"))] = true
		}
	}
	return out
}

// TestDocsLinksResolve: every relative link of the README and the docs/ pages names a file
// that exists, and an anchor that one of its headings has.
func TestDocsLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range markdownPages(t) {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			dest := page
			if file != "" {
				dest = filepath.Join(filepath.Dir(page), file)
			}
			st, err := os.Stat(dest)
			if err != nil {
				t.Errorf("%s links %s: %v", page, target, err)
				continue
			}
			if frag == "" {
				continue
			}
			text, err := os.ReadFile(dest)
			if err != nil || st.IsDir() || !anchors(string(text))[frag] {
				t.Errorf("%s links %s: no heading with that anchor in %s", page, target, dest)
			}
		}
	}
}

// TestDocumentedGoCommandsCarryToolchain: every go build, install, run or test in the
// README and the docs/ pages says which Go to use (issue 34: `go install ./cmd/ingress`
// with GOTOOLCHAIN=local built with a Go that govulncheck refuses), and the README's two
// commands are exactly these, the second the one .ci/run runs.
func TestDocumentedGoCommandsCarryToolchain(t *testing.T) {
	goCmd := regexp.MustCompile(`\bgo (build|install|run|test)\b`)
	for _, page := range markdownPages(t) {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, loc := range goCmd.FindAllStringIndex(line, -1) {
				if !strings.HasSuffix(line[:loc[0]], "GOTOOLCHAIN="+goToolchain+" ") &&
					!regexp.MustCompile(`GOTOOLCHAIN=`+regexp.QuoteMeta(goToolchain)+` (\w+=\S+ )*$`).MatchString(line[:loc[0]]) {
					t.Errorf("%s:%d: %q without GOTOOLCHAIN=%s before it", page, i+1, line[loc[0]:loc[1]], goToolchain)
				}
			}
		}
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"GOTOOLCHAIN=go1.27.3 go run ./cmd/ingress demo", "GOTOOLCHAIN=go1.27.3 go test -race ./..."} {
		if !strings.Contains(string(readme), "```sh\n"+c+"\n```") {
			t.Errorf("the README does not give %q as a command of its own", c)
		}
	}
	if !regexp.MustCompile(`(?m)^export GOTOOLCHAIN=go1\.27\.3$`).Match(ci) || !regexp.MustCompile(`(?m)^go test -race \./\.\.\.$`).Match(ci) {
		t.Error(".ci/run does not run the README's test command (export GOTOOLCHAIN=go1.27.3, go test -race ./...)")
	}
}

// TestDocsExamplesValidate: the shipped example route files pass `ingress validate` as
// they are (issue 34: docs/examples/routes.json named certificate files that were not
// shipped).
func TestDocsExamplesValidate(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "examples", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		var stdout, stderr bytes.Buffer
		if err := runValidate([]string{f}, nil, &stdout, &stderr); err != nil {
			t.Errorf("ingress validate %s: %v\n%s", f, err, stderr.String())
		}
		if stderr.Len() > 0 || !strings.Contains(stdout.String(), "valid standalone route file") {
			t.Errorf("ingress validate %s:\n%s%s", f, stdout.String(), stderr.String())
		}
	}
}

// TestREADMEQuickStart runs the README's "in front of your own backend" as printed (on a
// free port instead of :8080): the build line's binary, its proxy line, its curl line.
// Its ACME line is checked for flags only (Pebble runs it in TestProxyACMEPebble).
func TestREADMEQuickStart(t *testing.T) {
	bin := buildBinary(t)
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## In front of your own backend\n")
	if !ok {
		t.Fatal("the README has no section \"In front of your own backend\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks [][]string
	for rest := section; ; {
		_, after, ok := strings.Cut(rest, "```sh\n")
		if !ok {
			break
		}
		block, after2, _ := strings.Cut(after, "```")
		blocks = append(blocks, strings.Split(strings.TrimSpace(block), "\n"))
		rest = after2
	}
	if len(blocks) != 2 || len(blocks[0]) != 3 {
		t.Fatalf("the quick start changed: %q", blocks)
	}
	plain := blocks[0]
	if plain[0] != "GOTOOLCHAIN=go1.27.3 go build -o ingress ./cmd/ingress" || blocks[1][0] != plain[0] {
		t.Fatalf("the quick start's build lines changed: %q", blocks)
	}
	args, ok := strings.CutPrefix(plain[1], "./ingress ")
	if !ok {
		t.Fatalf("the quick start's run line changed: %q", plain[1])
	}
	_, target := echoBackend(t, "backend", 0)
	var runArgs []string
	for _, a := range strings.Fields(args) {
		switch a {
		case "127.0.0.1:3000":
			a = "127.0.0.1:" + strconv.Itoa(target.Port)
		case ":8080":
			a = "127.0.0.1:0"
		}
		runArgs = append(runArgs, a)
	}
	p := binarytest.Start(t, bin, e2eWait, nil, append(runArgs, "--admin-addr", "127.0.0.1:0", "--log-format", "json")...)
	host := regexp.MustCompile(`-H 'Host: ([^']+)' http://127\.0\.0\.1:8080(/\S*)$`).FindStringSubmatch(plain[2])
	if host == nil {
		t.Fatalf("the quick start's curl line changed: %q", plain[2])
	}
	r := mustGet(t, httpClient(t), p.HTTP, host[1], host[2], http.StatusOK)
	if r.body != "backend "+host[1]+" /" {
		t.Fatalf("the backend's answer: %q", r.body)
	}
	p.Stop(e2eWait)

	// The ACME line's flags are proxy's.
	acmeLine := blocks[1][len(blocks[1])-1]
	acmeArgs, ok := strings.CutPrefix(acmeLine, "./ingress proxy ")
	if !ok {
		t.Fatalf("the quick start's ACME line changed: %q", acmeLine)
	}
	proxyFlags := helpFlags(helpText(t, "proxy"))
	for _, a := range strings.Fields(acmeArgs) {
		if name, ok := strings.CutPrefix(a, "--"); ok && !slices.Contains(proxyFlags, name) {
			t.Errorf("the ACME line's --%s is not a flag of ingress proxy", name)
		}
	}
}

// TestDemoSaysWhatItBinds: the demo's -h, the README and docs/flags.md name the addresses
// the demo binds and the flags that move them (issue 34: it bound them without a word).
func TestDemoSaysWhatItBinds(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	flags, err := os.ReadFile(filepath.Join(root, "docs", "flags.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"ingress demo -h": helpText(t, "demo"), "README.md": string(readme), "docs/flags.md": string(flags)} {
		for _, want := range []string{demoHTTPAddr, strings.TrimPrefix(demoHTTPSAddr, "127.0.0.1"), strings.TrimPrefix(demoAdminAddr, "127.0.0.1"), "--http-addr", "--https-addr", "--admin-addr"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s does not say %s", name, want)
			}
		}
	}
}
