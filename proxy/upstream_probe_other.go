//go:build !linux

package proxy

import "syscall"

// peerClosed cannot probe without MSG_PEEK|MSG_DONTWAIT here: a closed idle connection
// is found at its next use (and the retry rule of upstream.RoundTrip covers it).
func peerClosed(syscall.RawConn) bool { return false }

// probe is the per-connection probe (a no-op here).
type probe struct{}

func (p *probe) run(syscall.RawConn) bool { return false }
