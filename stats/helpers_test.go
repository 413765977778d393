package stats

import (
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is an injectable clock that tests move by hand.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.Set(t)
	return c
}

func (c *fakeClock) Now() time.Time  { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

func mustDay(t testing.TB, s string) Day {
	t.Helper()
	d, ok := ParseDay(s)
	if !ok {
		t.Fatalf("bad day %q", s)
	}
	return d
}

// queryAll pages through [from, to] with the given limit and returns every entry.
func queryAll(t testing.TB, r *Registry, from, to Day, limit int) []Entry {
	t.Helper()
	var all []Entry
	q := Query{FromDay: from, ToDay: to, Limit: limit}
	for pages := 0; ; pages++ {
		if pages > 100000 {
			t.Fatal("paging does not end")
		}
		p, err := r.Query(q)
		if err != nil {
			t.Fatalf("Query(%+v): %v", q, err)
		}
		if len(p.Statistics) > limit {
			t.Fatalf("page of %d entries, limit %d", len(p.Statistics), limit)
		}
		all = append(all, p.Statistics...)
		if p.NextCursor == "" {
			return all
		}
		if len(p.Statistics) != limit {
			t.Fatalf("short page (%d of %d) with a next cursor", len(p.Statistics), limit)
		}
		q.Cursor = p.NextCursor
	}
}

func sumRequests(es []Entry) uint64 {
	var n uint64
	for _, e := range es {
		n += e.Requests
	}
	return n
}
