package upstream

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
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
	l := DefaultLimits(0)
	for n := 1; n <= l.Max1xx; n++ {
		if err := l.Interim(103, n); err != nil {
			t.Fatalf("interim %d: %v", n, err)
		}
	}
	if err := l.Interim(100, l.Max1xx+1); !errors.Is(err, ErrTooMany1xx) {
		t.Errorf("interim %d: %v, want ErrTooMany1xx", l.Max1xx+1, err)
	}
	if err := l.Interim(101, 1); !errors.Is(err, ErrUnexpectedUpgrade) {
		t.Errorf("101: %v, want ErrUnexpectedUpgrade", err)
	}
}
