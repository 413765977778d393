package reliability

// The running binary: started as a child process on loopback by the shared harness
// (internal/binarytest), its stdout and stderr collected (JSON log lines on stderr), its
// admin listener scraped.

import (
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
)

// waitLimit bounds every wait for an event of the binary on a loaded 2-core box.
const waitLimit = 10 * time.Second

// stopLimit bounds a graceful stop (the drain included).
const stopLimit = waitLimit + 30*time.Second

// tailLines is how much of stderr failure messages quote.
const tailLines = 60

// proc is one running ingress binary.
type proc = binarytest.Proc

// start runs the binary with only PATH and env in its environment and waits for its
// "ingress started" line. The cleanup kills a process still running.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := binarytest.Exec(t, binary, env, args...)
	p.TailLines = tailLines
	p.AwaitStarted(waitLimit)
	return p
}
