//go:build !linux

package rawnet

import "net"

// Wrap returns c: raw calls are made on Linux only.
func Wrap(c net.Conn) net.Conn { return c }
