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

// GoneAfterVerdict is how long after the verdict no attacking connection was left
// served (ok false: no verdict, or connections still served at the flood's end).
func (r Result) GoneAfterVerdict() (d time.Duration, ok bool) {
	if r.Verdict.IsZero() || r.ZeroAfterVerdict.IsZero() {
		return 0, false
	}
	return r.ZeroAfterVerdict.Sub(r.Verdict), true
}

// Describe is the attacker's side of a flood of conns connections in a few lines.
func (r Result) Describe(conns int) string {
	alive := make([]string, 0, len(r.Alive))
	for _, pt := range r.Alive {
		alive = append(alive, fmt.Sprint(pt.Alive))
	}
	return fmt.Sprintf("attacker: %d of %d pre-opened, %d streams in %s, %d connections dialled, %d served; ended: %d ENHANCE_YOUR_CALM, %d other GOAWAY, %d closed\n"+
		"\tfirst GOAWAY %s (%s), verdict %s, no connection alive %s (after the verdict: %s), pre-opened all gone %s\n"+
		"\tserved connections alive every %s: %s",
		r.Opened, conns, r.Streams, r.End.Sub(r.Start).Round(time.Millisecond), r.Dials, r.Served, r.Calm, r.GoAway, r.Closed,
		r.Since(r.FirstGoAway), r.FirstCode, r.Since(r.Verdict), r.Since(r.Zero), r.Since(r.ZeroAfterVerdict), r.Since(r.PreopenedGone),
		aliveEvery, strings.Join(alive, " "))
}
