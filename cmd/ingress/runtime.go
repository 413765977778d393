package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// defaultGCPercent is the GOGC the binary uses unless GOGC is set. A proxy's heap is
// mostly short-lived request garbage over a small live set (the route table, pools), so
// collecting half as often buys throughput for a little memory; GOMEMLIMIT below keeps
// that from ever pushing a container into its OOM killer.
const defaultGCPercent = 200

// tuneRuntime applies the binary's GC defaults. Operators override them with the usual
// GOGC and GOMEMLIMIT variables, which the runtime has already read.
func tuneRuntime(lookup func(string) (string, bool)) {
	if _, ok := lookup("GOGC"); !ok {
		debug.SetGCPercent(defaultGCPercent)
	}
	if _, ok := lookup("GOMEMLIMIT"); !ok {
		if limit := cgroupMemoryLimit(); limit > 0 {
			debug.SetMemoryLimit(limit / 10 * 9)
		}
	}
}

// cgroupMemoryLimit returns the cgroup v2 memory limit in bytes, or 0 when there is none.
func cgroupMemoryLimit() int64 {
	b, err := os.ReadFile("/sys/fs/cgroup/memory.max")
	if err != nil {
		return 0
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}
