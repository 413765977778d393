// Package toolbin finds the pinned external binaries that some tests run (Pebble, h2spec),
// the same way for each: through an environment variable naming the file, then PATH, then
// $GOPATH/bin. .ci/run installs each pinned version and sets its variable.
//
// It is test support only: tests and test-support packages (internal/pebbletest) import
// it, nothing else. Without the binary a test is skipped with the reason and the install
// line, unless CI is set: then it fails, so that CI cannot pass by skipping. Every test
// that needs a tool it may not find (Pebble, h2spec, nghttp, chromium, ...) goes through
// Missing or Skip, which also say so on the terminal: `go test ./...` shows a passing
// package's skips only with -v.
package toolbin

import (
	"fmt"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Tool is one pinned binary.
type Tool struct {
	// Name is the binary's file name, e.g. "h2spec".
	Name string
	// Env is the variable that names the binary's path, e.g. "H2SPEC"; a path in it
	// that does not exist fails the test.
	Env string
	// About, when set, follows the name in the messages, e.g. "(ACME test server)".
	About string
	// Install is what .ci/run passes to go install: module path and version.
	Install string
}

// Find returns the path of the tool's binary, skipping the test (or failing it when the CI
// variable is set) when there is none.
func (tool Tool) Find(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(tool.Env); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
		t.Fatalf("%s=%s: no such file", tool.Env, p)
	}
	if p, err := exec.LookPath(tool.Name); err == nil {
		return p
	}
	if p := filepath.Join(build.Default.GOPATH, "bin", tool.Name); fileExists(p) {
		return p
	}
	what := "the " + tool.Name + " binary"
	if tool.About != "" {
		what += " " + tool.About
	}
	Missing(t, what+" was not found in $"+tool.Env+", PATH or $GOPATH/bin; install it with: GOTOOLCHAIN=go1.27.3 go install "+tool.Install)
	return ""
}

// Missing ends a test that lacks a tool, msg saying which and how to install it: with the
// CI variable set the test fails (CI cannot pass by skipping), otherwise it is skipped
// as Skip does.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (CI is set, so this fails instead of skipping)")
	}
	Skip(t, msg)
}

// Skip skips a test that lacks a tool, and writes one line saying so to the terminal
// (/dev/tty) when the test runs with one: in package-list mode (`go test ./...`) the go
// command shows a passing package's output, t.Skip's reason included, only with -v, and
// it captures the test binary's stdout and stderr, but not the terminal. Without a
// terminal (a pipe, CI) the line is left out and the reason stays in -v's output. The
// package's result is not cached, so that the next run says it again.
func Skip(t testing.TB, msg string) {
	t.Helper()
	announce(fmt.Sprintf("SKIP %s %s: %s", packageDir(), t.Name(), msg))
	t.Skip(msg)
}

// terminal is the process's terminal (a file in this package's own test).
var terminal = "/dev/tty"

// announce writes line to the terminal, if the process has one, and to bin/last-skip in
// the module (ignored by git, like the tools .ci/run puts in bin/): the go command caches
// no test result that opened a file of the module changed within the last two seconds,
// so a cached "ok" never hides a skip.
func announce(line string) {
	if root := moduleRoot(); root != "" {
		bin := filepath.Join(root, "bin")
		if os.MkdirAll(bin, 0o755) == nil {
			_ = os.WriteFile(filepath.Join(bin, "last-skip"), []byte(line+"\n"), 0o644)
		}
	}
	tty, err := os.OpenFile(terminal, os.O_WRONLY, 0)
	if err != nil {
		return
	}
	defer tty.Close()
	_, _ = fmt.Fprintln(tty, line)
}

// packageDir is the test's package as a directory of the module ("./proxy/internal/h2"):
// a test runs in its package's directory.
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "?"
	}
	rel, err := filepath.Rel(moduleRoot(), wd)
	if err != nil || strings.HasPrefix(rel, "..") {
		return wd
	}
	return "./" + filepath.ToSlash(rel)
}

// moduleRoot is the directory above the test's that holds go.mod, or "".
func moduleRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if fileExists(filepath.Join(dir, "go.mod")) {
			return dir
		}
		if filepath.Dir(dir) == dir {
			return ""
		}
	}
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
