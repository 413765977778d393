// Package toolbin finds the pinned external binaries that some tests run (Pebble, h2spec),
// the same way for each: through an environment variable naming the file, then PATH, then
// $GOPATH/bin. .ci/run installs each pinned version and sets its variable.
//
// It is test support only: tests and test-support packages (internal/pebbletest) import
// it, nothing else. Without the binary a test is skipped with the reason and the install
// line, unless CI is set: then it fails, so that CI cannot pass by skipping.
package toolbin

import (
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
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
	msg := what + " was not found in $" + tool.Env + ", PATH or $GOPATH/bin; install it with: go install " + tool.Install
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (CI is set, so this fails instead of skipping)")
	}
	t.Skip(msg)
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
