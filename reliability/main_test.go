package reliability

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// long turns on the long soaks (30 s of swaps instead of 10 s, and the like).
var long = flag.Bool("reliability.long", false, "run the long soaks of the reliability suite")

// binary is the ingress built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	if err := raiseNoFile(); err != nil {
		fmt.Fprintln(os.Stderr, "reliability:", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "ingress-reliability")
	if err != nil {
		fmt.Fprintln(os.Stderr, "reliability:", err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "ingress")
	// No -race: the proxy's timing under attack is the point.
	build := exec.Command("go", "build", "-o", binary, "github.com/serve-zone/ingress/cmd/ingress")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "reliability: go build: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// raiseNoFile lifts the soft descriptor limit to the hard one, for this process and the
// binaries it starts (10,000 idle connections need 10,000 descriptors on each side).
// Setting it explicitly also stops os/exec from restoring the original soft limit in
// children.
func raiseNoFile() error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	l.Cur = l.Max
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
}

// noFileLimit returns the soft descriptor limit.
func noFileLimit(t *testing.T) uint64 {
	t.Helper()
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	return l.Cur
}
