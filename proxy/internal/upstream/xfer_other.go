//go:build !linux

package upstream

// xfer is Linux-only.
type xfer struct{}

// WriteRead writes req and reads the first bytes of the answer into buf.
func (uc *Conn) WriteRead(req, buf []byte) (int, error) { return uc.writeThenRead(req, buf) }
