package floodtest

import (
	"os"
	"strconv"
	"syscall"
)

// renice gives every thread of the process niceness n (Linux keeps it per thread; a
// thread started later takes its starter's). Two passes catch a thread started during
// the first.
func renice(n int) error {
	for range 2 {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, n); err != nil && err != syscall.ESRCH {
				return err
			}
		}
	}
	return nil
}
