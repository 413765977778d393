package upstream

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

func TestMayReplay(t *testing.T) {
	reset := &net.OpError{Op: "read", Err: syscall.ECONNRESET}
	tests := []struct {
		name                  string
		reused, retried       bool
		read, wrote           int64
		err                   error
		bodyTaken, replayable bool
		want                  bool
	}{
		{"replayable, EOF before any byte", true, false, 0, 10, io.EOF, false, true, true},
		{"replayable, reset", true, false, 0, 10, reset, false, true, true},
		{"replayable, but a fresh connection", false, false, 0, 10, io.EOF, false, true, false},
		{"replayable, already retried once", true, true, 0, 10, io.EOF, false, true, false},
		{"answer bytes were read", true, false, 5, 10, io.ErrUnexpectedEOF, false, true, false},
		{"timeout", true, false, 0, 10, ErrHeaderTimeout, false, true, false},
		{"malformed answer", true, false, 0, 10, errors.New("malformed HTTP response"), false, true, false},
		{"not replayable, written", true, false, 0, 10, io.EOF, false, false, false},
		{"not replayable, nothing written", true, false, 0, 0, net.ErrClosed, false, false, true},
		{"body taken from the client", true, false, 0, 0, io.EOF, true, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &Conn{reused: tc.reused, read: tc.read, wrote: tc.wrote}
			if got := MayReplay(c, tc.retried, tc.err, tc.bodyTaken, tc.replayable); got != tc.want {
				t.Errorf("MayReplay = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReplayable(t *testing.T) {
	for _, tc := range []struct {
		method      string
		body, keyed bool
		want        bool
	}{
		{"GET", false, false, true},
		{"HEAD", false, false, true},
		{"OPTIONS", false, false, true},
		{"TRACE", false, false, true},
		{"GET", true, false, false},
		{"POST", false, false, false},
		{"POST", false, true, true},
		{"POST", true, true, false},
		{"DELETE", false, false, false},
	} {
		if got := Replayable(tc.method, tc.body, tc.keyed); got != tc.want {
			t.Errorf("Replayable(%s, body %v, keyed %v) = %v", tc.method, tc.body, tc.keyed, got)
		}
	}
	for name, want := range map[string]bool{"Idempotency-Key": true, "x-idempotency-KEY": true, "Idempotency-Keys": false, "": false} {
		if IdempotencyKey(name) != want || IdempotencyKey([]byte(name)) != want {
			t.Errorf("IdempotencyKey(%q) != %v", name, want)
		}
	}
}

func TestInterim(t *testing.T) {
	l := DefaultLimits(time.Second)
	for n := 1; n <= l.Max1xx; n++ {
		if interim, err := l.Interim(103, n, false); !interim || err != nil {
			t.Fatalf("103 #%d: interim %v, %v; want dropped", n, interim, err)
		}
	}
	if _, err := l.Interim(100, l.Max1xx+1, false); !errors.Is(err, ErrTooMany1xx) {
		t.Fatalf("one 1xx too many: %v", err)
	}
	if _, err := l.Interim(101, 1, false); !errors.Is(err, ErrUnexpectedUpgrade) {
		t.Fatalf("101 unasked: %v", err)
	}
	if interim, err := l.Interim(101, 2, true); interim || err != nil {
		t.Fatalf("101 to an upgrade: interim %v, %v; want final", interim, err)
	}
	if interim, err := l.Interim(103, 1, true); !interim || err != nil {
		t.Fatalf("103 before an upgrade's 101: interim %v, %v; want dropped", interim, err)
	}
	for _, st := range []int{200, 204, 404, 502} {
		if interim, err := l.Interim(st, 1, false); interim || err != nil {
			t.Fatalf("%d: interim %v, %v; want final", st, interim, err)
		}
	}
}
