package park

import (
	"testing"
	"unsafe"
)

// TestStateNames: every state has its name; an unknown one says its number.
func TestStateNames(t *testing.T) {
	want := map[State]string{New: "new", Idle: "idle", Active: "active", Parked: "parked", Sleeping: "sleeping",
		Asleep: "asleep", Waking: "waking", Closing: "closing", Struck: "struck", Struck + 1: "State(9)", -1: "State(-1)"}
	for s, name := range want {
		if s.String() != name {
			t.Errorf("State %d is %q, want %q", int32(s), s.String(), name)
		}
	}
	for s := New; s <= Struck; s++ {
		if s.Ended() != (s == Closing || s == Struck) || s.Held() != (s == Parked || s == Asleep) {
			t.Errorf("%s: Ended %v, Held %v", s, s.Ended(), s.Held())
		}
	}
}

// TestLife: a zero Life is New, moves only from the state it is in, and stays 16 bytes
// (a sleeping connection keeps one).
func TestLife(t *testing.T) {
	var l Life
	if l.State() != New {
		t.Fatalf("zero Life is %s", l.State())
	}
	if l.CompareAndSwap(Idle, Active) || !l.CompareAndSwap(New, Active) || l.State() != Active {
		t.Fatalf("compare-and-swap: now %s, want active", l.State())
	}
	if n := unsafe.Sizeof(l); n != 16 {
		t.Fatalf("a Life is %d bytes, want 16", n)
	}
}
