package proxy

import (
	"fmt"
	"testing"
	"time"
)

func TestRhythmAwake(t *testing.T) {
	at := rhythmEpoch.Add(time.Hour)
	var r rhythm
	if d := r.awake(h1ParkSoon); d != h1ParkSoon {
		t.Fatalf("no request yet: %v, want the base", d)
	}
	r.note(at)
	if d := r.awake(h1ParkSoon); d != h1ParkSoon {
		t.Fatalf("one request: %v, want the base (no pace yet)", d)
	}
	r.note(at.Add(200 * time.Millisecond))
	if d, want := r.awake(h1ParkSoon), 2*200*time.Millisecond+h1ParkSoon; d != want {
		t.Fatalf("a gap of 200 ms: %v, want %v", d, want)
	}
	r.note(at.Add(300 * time.Millisecond)) // gaps 200 and 100: the longer counts
	if d, want := r.awake(h1ParkSoon), 2*200*time.Millisecond+h1ParkSoon; d != want {
		t.Fatalf("gaps of 200 and 100 ms: %v, want %v", d, want)
	}
	if d := r.awake(h1ParkAfter); d != h1ParkAfter {
		t.Fatalf("a base longer than the pace asks for: %v, want the base", d)
	}
	r.note(at.Add(time.Hour))
	if d := r.awake(h1ParkSoon); d != h1AwakeMax {
		t.Fatalf("a gap of an hour: %v, want h1AwakeMax", d)
	}
	// A hot connection: gaps of microseconds ask for nothing beyond the base.
	for i := range 3 {
		r.note(at.Add(time.Hour + time.Duration(i)*time.Microsecond))
	}
	if d := r.awake(h1ParkSoon); d != h1ParkSoon+2*time.Microsecond {
		t.Fatalf("gaps of a microsecond: %v", d)
	}
}

func TestCoarseDeadline(t *testing.T) {
	for _, off := range []time.Duration{0, 1, deadlineQuantum - 1, deadlineQuantum, 7*deadlineQuantum + 3} {
		in := rhythmEpoch.Add(time.Hour + off)
		got := coarse(in)
		if got.Before(in) || got.Sub(in) >= deadlineQuantum || got.Sub(rhythmEpoch)%deadlineQuantum != 0 {
			t.Errorf("coarse(+%v) = +%v: want the next multiple of %v at or after it", in.Sub(rhythmEpoch), got.Sub(rhythmEpoch), deadlineQuantum)
		}
	}
}

// TestPaceKeepsConnectionAwake: in a crowd (connections park h1ParkSoon after their
// answer), a client that sends a request every 150 ms keeps its connection awake once
// its pace is known (two requests): it parks at most once, before that (issue 32: it
// parked, slept and woke for every request, a dozen system calls and a new goroutine
// each). When the client stops, the connection parks after about two gaps.
func TestPaceKeepsConnectionAwake(t *testing.T) {
	skipUnlessParking(t)
	e := sleepEnv(t)
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	rc := newRawClient(t, e.http)
	_ = rc.c.SetDeadline(time.Now().Add(60 * time.Second))
	const n, gap = 12, 150 * time.Millisecond
	parks := parkedTotal.Load()
	next := time.Now()
	for i := range n {
		time.Sleep(time.Until(next))
		next = time.Now().Add(gap)
		path := fmt.Sprintf("/pace/%d", i)
		rc.send(get1(path))
		if res, body := rc.read("GET"); res.StatusCode != 200 || body != echoed("GET", path, "") {
			t.Fatalf("GET %s: %d %q", path, res.StatusCode, body)
		}
	}
	// One park is the first gap's (no pace yet); a loaded machine may stall the client
	// once beyond its window.
	if p := parkedTotal.Load() - parks; p > 2 {
		t.Fatalf("%d requests %v apart: the connection parked %d times", n, gap, p)
	}
	waitFor(t, "asleep once the client stopped", func() bool { return sleepers(e.srv) == 1 })
}
