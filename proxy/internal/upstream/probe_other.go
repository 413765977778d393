//go:build !linux

package upstream

import "syscall"

// probe is the per-connection probe (a no-op here).
type probe struct{}

func (p *probe) run(syscall.RawConn) bool { return false }
