package stats

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/serve-zone/ingress/internal/testwait"
)

// TestEverythingConcurrently runs recording, host creation, rollover, queries, scrapes and
// snapshots at once (for the race detector) and checks that no request is lost.
func TestEverythingConcurrently(t *testing.T) {
	start := time.Date(2026, 11, 28, 23, 0, 0, 0, time.UTC)
	clk := newFakeClock(start)
	r := NewRegistry(Options{Now: clk.Now, StateDir: t.TempDir()})
	if err := r.Load(); err != nil {
		t.Fatal(err)
	}
	preg := prometheus.NewRegistry()
	preg.MustRegister(NewCollector(r, new(Totals), CollectorOptions{PerHost: true}))
	var stop atomic.Bool
	var made atomic.Uint64
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				r.Host(fmt.Sprintf("h%d-%d", w, i%50)).Request(1, 1)
				made.Add(1)
			}
		})
	}
	wg.Go(func() {
		for !stop.Load() {
			d := r.Today()
			if _, err := r.Query(Query{FromDay: d - 3, ToDay: d, Limit: 7}); err != nil {
				t.Error(err)
			}
			if _, err := preg.Gather(); err != nil {
				t.Error(err)
			}
			if err := r.Flush(); err != nil {
				t.Error(err)
			}
		}
	})
	for i := 1; i <= 20; i++ {
		clk.Set(start.Add(time.Duration(i) * 6 * time.Hour))
		r.Roll(clk.Now())
		before := made.Load()
		testwait.Until(t, 5*time.Second, "requests between two rolls", func() bool { return made.Load() > before })
	}
	stop.Store(true)
	wg.Wait()
	got := queryAll(t, r, DayOf(start), DayOf(clk.Now()), 1000)
	if sumRequests(got) != made.Load() || made.Load() == 0 {
		t.Fatalf("reported %d requests, made %d", sumRequests(got), made.Load())
	}
}
