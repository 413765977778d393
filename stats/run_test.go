package stats

import (
	"context"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestRunRollsAtMidnightAndSnapshots runs Run on the synctest bubble's fake clock (which
// starts at midnight UTC): the day rolls at midnight, the periodic snapshot holds what
// was recorded up to it, and the final snapshot at cancellation holds everything.
func TestRunRollsAtMidnightAndSnapshots(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		opts := Options{StateDir: dir, SnapshotInterval: 10 * time.Second}
		r := NewRegistry(opts)
		if err := r.Load(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			r.Run(ctx)
			close(done)
		}()
		h := r.Host("a.example.test")
		day0 := r.Today()

		// Part of what is tested: synctest's fake clock moves Run's timers to the times named.
		time.Sleep(24*time.Hour - 5*time.Second) // 23:59:55
		h.Request(1, 0)
		time.Sleep(10 * time.Second) // 00:00:05
		synctest.Wait()
		if got := r.Today(); got != day0+1 {
			t.Fatalf("Today() = %s after midnight, want %s", got, day0+1)
		}
		h.Request(1, 0)
		time.Sleep(10 * time.Second) // a periodic snapshot has happened since
		synctest.Wait()

		loaded := func() []Entry {
			r2 := NewRegistry(opts)
			if err := r2.Load(); err != nil {
				t.Fatal(err)
			}
			return queryAll(t, r2, day0, day0+1, 10)
		}
		if got := loaded(); len(got) != 2 || got[0].Day != day0 || got[1].Day != day0+1 || sumRequests(got) != 2 {
			t.Fatalf("periodic snapshot holds %+v", got)
		}
		h.Request(5, 0) // only the final snapshot will hold this
		cancel()
		<-done
		if got := loaded(); sumRequests(got) != 3 {
			t.Fatalf("final snapshot holds %+v", got)
		}
	})
}

func TestRunLogsSnapshotFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zap.WarnLevel)
		r := NewRegistry(Options{StateDir: filepath.Join(t.TempDir(), "missing"), SnapshotInterval: time.Second,
			Logger: zap.New(core)})
		r.Load()
		r.Host("a").Request(1, 1)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			r.Run(ctx)
			close(done)
		}()
		time.Sleep(1500 * time.Millisecond) // synctest's fake clock: one snapshot interval passes
		synctest.Wait()
		if n := logs.FilterMessage("statistics snapshot failed").Len(); n != 1 {
			t.Fatalf("%d failure logs after one interval, want 1", n)
		}
		cancel()
		<-done
		if n := logs.FilterMessage("statistics snapshot failed").Len(); n != 2 {
			t.Fatalf("%d failure logs after the final snapshot, want 2", n)
		}
	})
}
