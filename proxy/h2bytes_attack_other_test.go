//go:build !linux

package proxy

import "net"

// unacked cannot tell outside Linux.
func unacked(net.Conn) (int, bool) { return 0, false }
