package stats

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// maxSleep bounds how long Run sleeps between looks at the clock, so that a wall clock
// stepped forward (NTP, a resumed VM) rolls the day within a minute rather than waiting
// for a timer computed from the old time.
const maxSleep = time.Minute

// Run keeps the registry's time: it rolls the day at every UTC midnight of Options.Now
// and, with Options.StateDir, writes a snapshot every Options.SnapshotInterval and a
// final one when ctx ends. It starts no goroutine and returns only when ctx is done, after
// the final snapshot; the caller runs it in a goroutine and waits for it. Snapshot
// failures are logged and retried at the next interval. Call Load before Run.
func (r *Registry) Run(ctx context.Context) {
	var tick <-chan time.Time
	if r.stateDir != "" {
		t := time.NewTicker(r.interval)
		defer t.Stop()
		tick = t.C
	}
	midnight := time.NewTimer(0)
	defer midnight.Stop()
	for {
		select {
		case <-ctx.Done():
			if r.stateDir != "" {
				r.flushLogged("final")
			}
			return
		case <-tick:
			r.flushLogged("periodic")
		case <-midnight.C:
			now := r.now()
			r.Roll(now)
			midnight.Reset(min((DayOf(now) + 1).Time().Sub(now), maxSleep))
		}
	}
}

func (r *Registry) flushLogged(which string) {
	if err := r.Flush(); err != nil {
		r.log.Warn("statistics snapshot failed", zap.String("snapshot", which), zap.Error(err))
	}
}
