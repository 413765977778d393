package proxy

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

// The descriptor-table helpers of the tests that run out of descriptors.

// inChildProcess runs test name in a child process of the test binary, with env set
// there, and reports whether the caller is that child (which then runs the body): a
// body that lowers the process's descriptor limit must not take the suite with it.
func inChildProcess(t *testing.T, env string) bool {
	t.Helper()
	if os.Getenv(env) != "" {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the child process failed (%v):\n%s", err, out)
	}
	return false
}

// exhaustDescriptors leaves no descriptor to spare: the limit just above the highest
// open one, and every free number below it taken. restore gives them back and the old
// limit (also at the test's end).
func exhaustDescriptors(t *testing.T) (restore func()) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	high := 0
	for _, en := range ents {
		if n, err := strconv.Atoi(en.Name()); err == nil {
			high = max(high, n)
		}
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = uint64(high + 1)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	var fill []int
	restore = func() {
		for _, fd := range fill {
			_ = syscall.Close(fd)
		}
		fill = nil
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	}
	t.Cleanup(restore)
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			if err != syscall.EMFILE {
				t.Fatalf("filling the descriptor table: %v", err)
			}
			return restore
		}
		fill = append(fill, fd)
	}
}
