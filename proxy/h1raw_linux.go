package proxy

import "github.com/serve-zone/ingress/internal/rawnet"

// canRawLoop: plain connections are served inside one RawConn.Read (h1raw.go).
const canRawLoop = true

// sysRead is read(2) on a non-blocking descriptor, without the scheduler (rawnet).
func sysRead(fd int, b []byte) (int, error) { return rawnet.Read(fd, b) }
