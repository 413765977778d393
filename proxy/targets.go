package proxy

import (
	"math/bits"
	"math/rand/v2"
	"time"

	"github.com/serve-zone/ingress/routetable"
)

// maxTargets is the contract's limit of targets per route; the tried set is a bitmask.
const maxTargets = 64

const (
	backoffBase = time.Second
	backoffMax  = 30 * time.Second
)

// pick chooses a target among those not in tried by the power of two choices on
// InFlight, preferring targets that are up (DownUntil unset or past). When every untried
// target is down it still picks one: a route is never refused just because all its
// targets failed recently. It returns -1 when every target was tried.
//
// Hot path: two random draws and a few atomic loads; time.Now is read only when a
// candidate has a DownUntil set.
func pick(bs []*routetable.Backend, tried uint64) int {
	n := min(len(bs), maxTargets)
	avail := n - bits.OnesCount64(tried&lowMask(n))
	switch {
	case avail <= 0:
		return -1
	case avail == 1:
		return nthUntried(tried, 0)
	}
	var now int64
	i := nthUntried(tried, rand.IntN(avail))
	j := nthUntried(tried|1<<i, rand.IntN(avail-1))
	upI, upJ := isUp(bs[i], &now), isUp(bs[j], &now)
	switch {
	case upI && upJ:
		return lessLoaded(bs, i, j)
	case upI:
		return i
	case upJ:
		return j
	}
	// Both draws were down: take a random up target if there is one (rare path).
	ups := 0
	for x := range n {
		if tried&(1<<x) == 0 && isUp(bs[x], &now) {
			ups++
		}
	}
	if ups > 0 {
		k := rand.IntN(ups)
		for x := range n {
			if tried&(1<<x) == 0 && isUp(bs[x], &now) {
				if k == 0 {
					return x
				}
				k--
			}
		}
	}
	return lessLoaded(bs, i, j)
}

func lowMask(n int) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<n - 1
}

// nthUntried returns the index of the k-th (0-based) bit not set in tried.
func nthUntried(tried uint64, k int) int {
	for x := 0; x < maxTargets; x++ {
		if tried&(1<<x) == 0 {
			if k == 0 {
				return x
			}
			k--
		}
	}
	return -1
}

func lessLoaded(bs []*routetable.Backend, i, j int) int {
	if bs[j].State.InFlight.Load() < bs[i].State.InFlight.Load() {
		return j
	}
	return i
}

// isUp reports whether b may take traffic; *now caches the clock for one pick.
func isUp(b *routetable.Backend, now *int64) bool {
	d := b.State.DownUntil.Load()
	if d == 0 {
		return true
	}
	if *now == 0 {
		*now = time.Now().UnixNano()
	}
	return d < *now
}

// markDown records a connect failure: the target is skipped for a backoff that starts at
// one second and doubles per consecutive failure up to 30 seconds.
func markDown(b *routetable.Backend) {
	f := b.State.Failures.Add(1)
	d := backoffMax
	if f <= 5 {
		d = min(backoffBase<<(f-1), backoffMax)
	}
	b.State.DownUntil.Store(time.Now().Add(d).UnixNano())
}

// markUp records a successful connection; it writes only when there is state to clear.
func markUp(b *routetable.Backend) {
	if b.State.Failures.Load() != 0 || b.State.DownUntil.Load() != 0 {
		b.State.Failures.Store(0)
		b.State.DownUntil.Store(0)
	}
}
