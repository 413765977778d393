package relaysim

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/serve-zone/ingress/relay"
)

func TestFailCallsEchoesTextAndData(t *testing.T) {
	s, origin := start(t)
	s.FailCalls("getClusterIngressRouteTable", "echo the-bearer", []byte(`{"reason":"the-bearer"}`), 1)
	p := dialPeer(t, origin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := p.Call(ctx, "getClusterIngressRouteTable", map[string]any{"knownRevision": nil})
	var re *relay.RemoteError
	if !errors.As(err, &re) || re.Text != "echo the-bearer" || string(re.Data) != `{"reason":"the-bearer"}` {
		t.Fatalf("first call: %v, want the injected error", err)
	}
	if _, err := p.Call(ctx, "getClusterIngressRouteTable", map[string]any{"knownRevision": nil}); err != nil {
		t.Fatalf("second call (the fault used up): %v", err)
	}
}

func TestFrameFaults(t *testing.T) {
	s, origin := start(t)
	s.SetFrameFault(FrameGarbage, 1)
	r := dialRaw(t, origin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.c.Write(ctx, websocket.MessageText, regFrame(t, nil)); err != nil {
		t.Fatal(err)
	}
	typ, b, err := r.c.Read(ctx)
	if err != nil || typ != websocket.MessageBinary || len(b) == 0 {
		t.Fatalf("garbage session's first frame: %v %q %v", typ, b, err)
	}
	r.c.CloseNow()

	s.SetFrameFault(FrameOversized, 1)
	r = dialRaw(t, origin)
	if err := r.c.Write(ctx, websocket.MessageText, regFrame(t, nil)); err != nil {
		t.Fatal(err)
	}
	// 64 MiB through the race detector's instrumented reader on a loaded 2-core CI machine
	// took longer than 5 s once; the bound is only there to end a hung test.
	bigCtx, bigCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer bigCancel()
	if _, b, err = r.c.Read(bigCtx); err != nil || int64(len(b)) != OversizedBytes {
		t.Fatalf("oversized frame: %d bytes, %v; want %d", len(b), err, OversizedBytes)
	}
	r.c.CloseNow()

	// The faults were used up: the next session speaks the protocol.
	r = dialRaw(t, origin)
	if b := r.roundTrip(regFrame(t, nil)); len(b) == 0 || b[0] != '{' {
		t.Fatalf("after the faults: %q", b)
	}
}

func TestKillResetsSessions(t *testing.T) {
	s, origin := start(t)
	p := dialPeer(t, origin)
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the session outlived Kill")
	}
}

// dialPeer connects a relay.Peer as an ingress would and runs it until the test ends.
func dialPeer(t *testing.T, origin string) *relay.Peer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p, err := relay.Dial(ctx, origin, relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return p
}
