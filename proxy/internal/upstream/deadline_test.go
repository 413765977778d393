package upstream

import (
	"net"
	"testing"
	"time"
)

// deadlineConn records the read deadlines set on it.
type deadlineConn struct {
	net.Conn
	set []time.Time
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.set = append(c.set, t)
	return nil
}

// TestReadDeadlineBy: a deadline already set no later than wanted, and within slack of
// it, stands; a later one, one too early, or none at all is replaced.
func TestReadDeadlineBy(t *testing.T) {
	dc := &deadlineConn{}
	uc := newConn(dc, nil)
	base := time.Unix(1000, 0)
	slack := 250 * time.Millisecond
	steps := []struct {
		want time.Time
		set  bool
	}{
		{base, true}, // none yet
		{base.Add(100 * time.Millisecond), false}, // the current one is 100 ms early: stands
		{base.Add(250 * time.Millisecond), false}, // 250 ms early: stands
		{base.Add(251 * time.Millisecond), true},  // too early: replaced
		{base.Add(200 * time.Millisecond), true},  // the current one is later than wanted
		{base.Add(200 * time.Millisecond), false}, // exactly it
	}
	for i, s := range steps {
		before := len(dc.set)
		_ = uc.ReadDeadlineBy(s.want, slack)
		if got := len(dc.set) > before; got != s.set {
			t.Fatalf("step %d: set %v, want %v", i, got, s.set)
		}
		if s.set && !dc.set[len(dc.set)-1].Equal(s.want) {
			t.Fatalf("step %d: set %v, want %v", i, dc.set[len(dc.set)-1], s.want)
		}
	}
	_ = uc.SetReadDeadline(time.Time{}) // cleared: the next one is set
	before := len(dc.set)
	_ = uc.ReadDeadlineBy(base.Add(200*time.Millisecond), slack)
	if len(dc.set) != before+1 {
		t.Fatal("a cleared deadline was not set again")
	}
}
