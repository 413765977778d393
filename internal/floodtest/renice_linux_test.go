package floodtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

const reniceEnv = "FLOODTEST_RENICE_CHILD"

// TestRenice: after renice, every thread of the process has the niceness, also one
// started after it. The test runs itself again as the process to renice (niceness
// cannot be lowered back).
func TestRenice(t *testing.T) {
	if os.Getenv(reniceEnv) != "" {
		if err := renice(7); err != nil {
			t.Fatal(err)
		}
		started := make(chan struct{})
		go func() {
			runtime.LockOSThread() // a thread of its own, started after renice
			close(started)
			select {}
		}()
		<-started
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join("/proc/self/task", e.Name(), "stat"))
			if err != nil {
				continue // ended meanwhile
			}
			// Fields after the command's closing parenthesis; niceness is field 19.
			f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
			if n, _ := strconv.Atoi(f[16]); n != 7 {
				t.Errorf("thread %s has niceness %s, want 7", e.Name(), f[16])
			}
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRenice$", "-test.count=1")
	cmd.Env = append(os.Environ(), reniceEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
