package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
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

// startGCPercent is the GOGC of the start, while the first route table is read and
// applied: that work allocates about as much as the table keeps (a 100,000-route table
// keeps about 110 MB), and at defaultGCPercent the heap could grow to three times what
// is live before the collector ran, raising the peak resident memory by 50 MB for
// nothing; the request path's garbage comes later.
const startGCPercent = 100

// startGC holds GOGC at startGCPercent until the returned function is called (once the
// first table is applied), which restores what was set before (tuneRuntime's default).
// An operator's GOGC is left alone.
func startGC(lookup func(string) (string, bool)) (steady func()) {
	if _, ok := lookup("GOGC"); ok {
		return func() {}
	}
	old := debug.SetGCPercent(startGCPercent)
	var once sync.Once
	return func() { once.Do(func() { debug.SetGCPercent(old) }) }
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
