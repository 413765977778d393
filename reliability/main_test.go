package reliability

import (
	"flag"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/floodtest"
)

// long turns on the long soaks (30 s of swaps instead of 10 s, and the like).
var long = flag.Bool("reliability.long", false, "run the long soaks of the reliability suite")

// ingress is the binary under test. No -race: the proxy's timing under attack is the point.
var ingress = &binarytest.Binary{Package: binarytest.IngressPackage, Env: []string{"CGO_ENABLED=0"}}

// binary is the ingress built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	if floodProcess() || floodtest.RunChild(preopenEnv) {
		return
	}
	flag.Parse()
	if err := raiseNoFile(); err != nil {
		fmt.Fprintln(os.Stderr, "reliability:", err)
		os.Exit(1)
	}
	var err error
	if binary, err = ingress.Build(); err != nil {
		fmt.Fprintln(os.Stderr, "reliability:", err)
		os.Exit(1)
	}
	code := m.Run()
	ingress.Remove()
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
