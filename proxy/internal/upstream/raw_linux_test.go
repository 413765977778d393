package upstream

import (
	"io"
	"testing"

	"github.com/serve-zone/ingress/internal/rawnet"
)

// TestConnectionsUseRawCalls: a dialed target connection reads and writes through
// internal/rawnet (no scheduler bookkeeping per system call on the hot path), and its
// Read and Write still carry an exchange.
func TestConnectionsUseRawCalls(t *testing.T) {
	ps := newPools(t)
	addr, accepted := listen(t)
	uc, peer := dial(t, ps, addr, accepted)
	if _, ok := uc.c.(*rawnet.TCPConn); !ok {
		t.Fatalf("target connection is a %T, want a *rawnet.TCPConn", uc.c)
	}
	go echoPeer(peer)
	uc.Begin(1 << 20)
	if _, err := uc.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(uc, b); err != nil || string(b) != "ping" {
		t.Fatalf("read %q, %v", b, err)
	}
}
