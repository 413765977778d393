package routetable

import (
	"cmp"
	"hash/maphash"
	"slices"
)

// Target states across tables. A target (lease id and "address:port") keeps its
// TargetState for as long as some table names it: in two routes of one table, and from
// the table being served to the next. Finding them by a map of 200,000 targets costs a
// cache miss per target; here every backend of both tables is hashed and the hashes
// sorted, so that the same target's backends meet side by side, and the sort walks memory
// in order.

// stateSeed hashes targets; the hashes only group candidates, keys are compared in full.
var stateSeed = maphash.MakeSeed()

// keyed is one backend by its target's hash: i >= 0 is backends[i] of the table being
// compiled, i < 0 is prev's backends[-i-1].
type keyed struct {
	h uint64
	i int32
}

func targetHash(b *Backend) uint64 {
	return maphash.String(stateSeed, b.LeaseID)*0x9e3779b97f4a7c15 ^ maphash.String(stateSeed, b.Addr)
}

// assignStates gives each of backends (LeaseID and Addr set) its state: that of an
// earlier backend of the same target in backends, else that of the same target in prev
// (nil at first), else a new one.
func assignStates(backends []Backend, prev []Backend) {
	ks := make([]keyed, 0, len(prev)+len(backends))
	for j := range prev {
		ks = append(ks, keyed{targetHash(&prev[j]), int32(-j - 1)})
	}
	for j := range backends {
		ks = append(ks, keyed{targetHash(&backends[j]), int32(j)})
	}
	// By hash, then prev's before the new table's and the new table's in order: the
	// first of a target in each run of equal hashes is the one whose state is kept.
	slices.SortFunc(ks, func(a, b keyed) int {
		if c := cmp.Compare(a.h, b.h); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	backend := func(i int32) *Backend {
		if i < 0 {
			return &prev[-i-1]
		}
		return &backends[i]
	}
	for start := 0; start < len(ks); {
		end := start + 1
		for end < len(ks) && ks[end].h == ks[start].h {
			end++
		}
		for x := start; x < end; x++ {
			if ks[x].i < 0 {
				continue
			}
			b := backend(ks[x].i)
			for y := start; y < x && b.State == nil; y++ { // runs are one or two long
				if o := backend(ks[y].i); o.LeaseID == b.LeaseID && o.Addr == b.Addr {
					b.State = o.State
				}
			}
			if b.State == nil {
				b.State = new(TargetState)
			}
		}
		start = end
	}
}
