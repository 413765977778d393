package floodtest

import (
	"fmt"
	"strings"
	"time"
)

// Since is at's offset from the flood's start ("never" when at is zero).
func (r Result) Since(at time.Time) string {
	if at.IsZero() {
		return "never"
	}
	return fmt.Sprintf("+%s", at.Sub(r.Start).Round(time.Millisecond))
}

// GoneAfter is how long after v the server had ended every attacking connection it
// served: 0 when none was served at v, else until the first moment after v with none
// (ok false: some were served from v to the flood's end).
func (r Result) GoneAfter(v time.Time) (d time.Duration, ok bool) {
	for _, e := range r.Empty {
		if !e.From.After(v) && (e.To.IsZero() || e.To.After(v)) {
			return 0, true
		}
		if e.From.After(v) {
			return e.From.Sub(v), true
		}
	}
	return 0, false
}

// Earliest is the earliest of ts that is set (zero when none is).
func Earliest(ts ...time.Time) time.Time {
	var first time.Time
	for _, t := range ts {
		if !t.IsZero() && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	return first
}

// Describe is the attacker's side of a flood of conns connections in a few lines, with
// verdict, the server's first verdict of abuse as the caller knows it (zero: none).
func (r Result) Describe(conns int, verdict time.Time) string {
	alive := make([]string, 0, len(r.Alive))
	for _, pt := range r.Alive {
		alive = append(alive, fmt.Sprint(pt.Alive))
	}
	gone := "never"
	if verdict.IsZero() {
		gone = "no verdict"
	} else if d, ok := r.GoneAfter(verdict); ok {
		gone = d.Round(time.Millisecond).String()
	}
	first := "never"
	if len(r.Empty) > 0 {
		first = r.Since(r.Empty[0].From)
	}
	return fmt.Sprintf("attacker: %d of %d pre-opened, %d streams in %s, %d connections dialled, %d served; ended: %d ENHANCE_YOUR_CALM, %d other GOAWAY, %d closed\n"+
		"\tfirst GOAWAY %s (%s), first ENHANCE_YOUR_CALM %s, verdict %s; no connection served %s, %s after the verdict; pre-opened all gone %s\n"+
		"\tserved connections alive every %s: %s; the attacker's longest stall %s",
		r.Opened, conns, r.Streams, r.End.Sub(r.Start).Round(time.Millisecond), r.Dials, r.Served, r.Calm, r.GoAway, r.Closed,
		r.Since(r.FirstGoAway), r.FirstCode, r.Since(r.Verdict), r.Since(verdict), first, gone, r.Since(r.PreopenedGone),
		aliveEvery, strings.Join(alive, " "), r.Stall.Round(time.Millisecond))
}
