package proxyhdr

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/serve-zone/ingress/internal/rawnet"
	"github.com/serve-zone/ingress/internal/testwait"
)

// TestReadInPieces: a header that arrives in two segments, the second only after the
// reader took the first (the socket's queue is empty), is read whole, whatever the
// split, and the request that follows it in the second segment is left unread. The
// socket is wrapped as the listeners wrap it (rawnet).
func TestReadInPieces(t *testing.T) {
	for _, v := range validHeaders(t) {
		for _, at := range []int{1, 5, 12, 14, 15, 16, 20, len(v.b) - 2, len(v.b) - 1} {
			if at <= 0 || at >= len(v.b) {
				continue
			}
			t.Run(fmt.Sprintf("%s/%d", v.name, at), func(t *testing.T) {
				srv, cli := socketPair(t)
				type result struct {
					h   Header
					err error
				}
				done := make(chan result, 1)
				go func() {
					h, err := Read(rawnet.Wrap(srv))
					done <- result{h, err}
				}()
				write(t, cli, v.b[:at])
				testwait.Until(t, 5*time.Second, "the first piece taken", func() bool { return queued(t, srv) == 0 })
				write(t, cli, append(bytes.Clone(v.b[at:]), rest...))
				r := <-done
				if r.err != nil || r.h != v.want {
					t.Fatalf("Read: %+v, %v; want %+v", r.h, r.err, v.want)
				}
				expectRest(t, srv, rest)
			})
		}
	}
}

// queued is how many bytes wait in c's receive queue (SIOCINQ).
func queued(t *testing.T, c net.Conn) int {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil || ierr != nil {
		t.Fatalf("SIOCINQ: %v %v", err, ierr)
	}
	return n
}
