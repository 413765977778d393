package stats

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRollMovesCountsToTheNextDay(t *testing.T) {
	midnight := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	clk := newFakeClock(midnight.Add(-time.Second))
	r := NewRegistry(Options{Now: clk.Now})
	h := r.Host("a.example.test")
	h.Request(1, 0)
	h.Request(1, 0)

	clk.Set(midnight)
	r.Roll(clk.Now())
	if got, want := r.Today(), mustDay(t, "2026-11-29"); got != want {
		t.Fatalf("Today() = %s, want %s", got, want)
	}
	h.Request(1, 0)
	r.Roll(midnight.Add(-time.Hour)) // an earlier time changes nothing

	got := queryAll(t, r, mustDay(t, "2026-11-28"), mustDay(t, "2026-11-29"), 10)
	if len(got) != 2 || got[0].Day.String() != "2026-11-28" || got[0].Requests != 2 ||
		got[1].Day.String() != "2026-11-29" || got[1].Requests != 1 {
		t.Fatalf("got %+v", got)
	}
}

func TestRollJumpOfSeveralDays(t *testing.T) {
	for _, jump := range []int{1, 2, 3, 4, 5, 9, 400} {
		t.Run(time.Duration(jump*24*int(time.Hour)).String(), func(t *testing.T) {
			start := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
			clk := newFakeClock(start)
			r := NewRegistry(Options{Now: clk.Now, RetentionDays: 1000})
			a, b := r.Host("a"), r.Host("b")
			// One request on each of four consecutive days fills every slot.
			for i := range 4 {
				clk.Set(start.AddDate(0, 0, i))
				r.Roll(clk.Now())
				a.Request(int64(i), 0)
			}
			b.Request(0, 0)
			last := start.AddDate(0, 0, 3)
			clk.Set(last.AddDate(0, 0, jump))
			r.Roll(clk.Now())
			a.Request(100, 0)

			got := queryAll(t, r, DayOf(start), DayOf(clk.Now()), 3)
			var days []string
			for _, e := range got {
				days = append(days, e.Day.String()+"/"+e.Hostname)
			}
			want := []string{"2026-01-10/a", "2026-01-11/a", "2026-01-12/a", "2026-01-13/a", "2026-01-13/b",
				DayOf(clk.Now()).String() + "/a"}
			if len(days) != len(want) {
				t.Fatalf("entries %v, want %v", days, want)
			}
			for i := range want {
				if days[i] != want[i] {
					t.Fatalf("entries %v, want %v", days, want)
				}
			}
			if got[len(got)-1].BytesIn != 100 || sumRequests(got) != 6 {
				t.Fatalf("counters wrong: %+v", got)
			}
		})
	}
}

func TestRollPrunesBeyondRetention(t *testing.T) {
	start := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	clk := newFakeClock(start)
	r := NewRegistry(Options{Now: clk.Now}) // DefaultRetentionDays
	h := r.Host("a")
	for i := range 50 {
		clk.Set(start.AddDate(0, 0, i))
		r.Roll(clk.Now())
		h.Request(1, 0)
	}
	today := DayOf(clk.Now())
	got := queryAll(t, r, 0, today, 1000)
	if len(got) != DefaultRetentionDays {
		t.Fatalf("%d days kept, want %d", len(got), DefaultRetentionDays)
	}
	if oldest := today - DefaultRetentionDays + 1; got[0].Day != oldest {
		t.Fatalf("oldest day %s, want %s", got[0].Day, oldest)
	}
	r.mu.Lock()
	n := len(r.history)
	r.mu.Unlock()
	if n >= DefaultRetentionDays {
		t.Fatalf("history holds %d days, want fewer than the retention", n)
	}
}

// TestRollRacingIncrementsLoseNothing hammers hosts from several goroutines while the day
// rolls (by one day and by jumps longer than the ring): the requests reported across all
// days equal the requests made, exactly.
func TestRollRacingIncrementsLoseNothing(t *testing.T) {
	for _, step := range []int{1, 3, 5} {
		t.Run(time.Duration(step*24*int(time.Hour)).String(), func(t *testing.T) {
			start := time.Date(2026, 6, 1, 23, 0, 0, 0, time.UTC)
			clk := newFakeClock(start)
			r := NewRegistry(Options{Now: clk.Now, RetentionDays: 400})
			hosts := []*Host{r.Host("a"), r.Host("b"), r.Host("c")}
			workers := max(4, runtime.GOMAXPROCS(0)*2)
			var made atomic.Uint64
			var stop atomic.Bool
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					h := hosts[w%len(hosts)]
					var n uint64
					for !stop.Load() {
						h.Request(1, 1)
						n++
					}
					made.Add(n)
				})
			}
			rolls := 40
			for i := 1; i <= rolls; i++ {
				clk.Set(start.AddDate(0, 0, i*step))
				r.Roll(clk.Now())
				runtime.Gosched()
			}
			stop.Store(true)
			wg.Wait()
			got := queryAll(t, r, DayOf(start), DayOf(clk.Now()), 1000)
			if n := sumRequests(got); n != made.Load() {
				t.Fatalf("reported %d requests, made %d", n, made.Load())
			}
			if made.Load() == 0 {
				t.Fatal("no requests made")
			}
		})
	}
}
