package proxy

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// machineMemory is the memory the process may use: the physical memory, or its
// cgroup's limit (v2 memory.max, v1 memory.limit_in_bytes) when that is lower; 0 when
// neither can be read.
func machineMemory() uint64 {
	var mem uint64
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		mem = uint64(si.Totalram) * uint64(si.Unit)
	}
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 && (mem == 0 || v < mem) {
			mem = v // "max" (no limit) does not parse
		}
	}
	return mem
}

// descriptorLimit is the process's soft RLIMIT_NOFILE (Go raises it to the hard one at
// start); 0 when unknown.
func descriptorLimit() uint64 {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	return lim.Cur
}
