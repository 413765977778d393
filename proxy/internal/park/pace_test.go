package park

import (
	"testing"
	"time"
)

func TestPaceAwake(t *testing.T) {
	const soon, limit = 50 * time.Millisecond, 10 * time.Second
	at := epoch.Add(time.Hour)
	var p Pace
	if d := p.Awake(soon, soon, limit); d != soon {
		t.Fatalf("no request yet: %v, want the base", d)
	}
	p.Note(at)
	if d := p.Awake(soon, soon, limit); d != soon {
		t.Fatalf("one request: %v, want the base (no pace yet)", d)
	}
	p.Note(at.Add(200 * time.Millisecond))
	if d, want := p.Awake(soon, soon, limit), 2*200*time.Millisecond+soon; d != want {
		t.Fatalf("a gap of 200 ms: %v, want %v", d, want)
	}
	p.Note(at.Add(300 * time.Millisecond)) // gaps 200 and 100: the longer counts
	if d, want := p.Awake(soon, soon, limit), 2*200*time.Millisecond+soon; d != want {
		t.Fatalf("gaps of 200 and 100 ms: %v, want %v", d, want)
	}
	if d := p.Awake(2*time.Second, soon, limit); d != 2*time.Second {
		t.Fatalf("a base longer than the pace asks for: %v, want the base", d)
	}
	p.Note(at.Add(time.Hour))
	if d := p.Awake(soon, soon, limit); d != limit {
		t.Fatalf("a gap of an hour: %v, want the limit", d)
	}
	// A hot connection: gaps of a microsecond ask for nothing beyond the base.
	for i := range 3 {
		p.Note(at.Add(time.Hour + time.Duration(i)*time.Microsecond))
	}
	if d := p.Awake(soon, soon, limit); d != soon+2*time.Microsecond {
		t.Fatalf("gaps of a microsecond: %v", d)
	}
}

func TestCoarse(t *testing.T) {
	for _, off := range []time.Duration{0, 1, Quantum - 1, Quantum, 7*Quantum + 3} {
		in := epoch.Add(time.Hour + off)
		got := Coarse(in)
		if got.Before(in) || got.Sub(in) >= Quantum || got.Sub(epoch)%Quantum != 0 {
			t.Errorf("Coarse(+%v) = +%v: want the next multiple of %v at or after it", in.Sub(epoch), got.Sub(epoch), Quantum)
		}
	}
}

func TestDeadline(t *testing.T) {
	now := epoch.Add(time.Hour + 3*time.Millisecond)
	if got := Deadline(now, 50*time.Millisecond); !got.Equal(now.Add(50 * time.Millisecond)) {
		t.Errorf("a short wait is rounded: %v", got.Sub(now))
	}
	if got := Deadline(now, time.Second); !got.Equal(Coarse(now.Add(time.Second))) {
		t.Errorf("a wait of a second is not rounded: %v", got.Sub(now))
	}
}
