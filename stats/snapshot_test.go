package stats

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestSnapshotSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC))
	opts := Options{Now: clk.Now, StateDir: dir, NodeID: "node-1"}
	r1 := NewRegistry(opts)
	if err := r1.Flush(); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("Flush before Load: %v", err)
	}
	if err := r1.Load(); err != nil { // no file yet
		t.Fatal(err)
	}
	a := r1.Host("a.example.test")
	a.Request(10, 20)
	a.Connection()
	clk.Set(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	r1.Roll(clk.Now())
	a.Request(1, 2)
	a.BackendFailure(FailureHandshake)
	if err := r1.Flush(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, SnapshotFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file: %v, mode %v", err, fi.Mode())
	}
	from, to := mustDay(t, "2026-11-01"), mustDay(t, "2026-11-30")
	want := queryAll(t, r1, from, to, 10)

	r2 := NewRegistry(opts) // the restart
	if err := r2.Load(); err != nil {
		t.Fatal(err)
	}
	if got := queryAll(t, r2, from, to, 10); !reflect.DeepEqual(got, want) {
		t.Fatalf("after restart %+v, want %+v", got, want)
	}
	// Today's counters continue, and the next snapshot holds the sum.
	a2 := r2.Host("a.example.test")
	a2.Request(1, 0)
	if err := r2.Flush(); err != nil {
		t.Fatal(err)
	}
	r3 := NewRegistry(opts)
	if err := r3.Load(); err != nil {
		t.Fatal(err)
	}
	got := queryAll(t, r3, from, to, 10)
	if len(got) != 2 || got[1].Requests != 2 || got[1].BackendFailures.Handshake != 1 || got[0].Connections != 1 {
		t.Fatalf("after second restart %+v", got)
	}
	if err := r3.Load(); err != nil || !reflect.DeepEqual(queryAll(t, r3, from, to, 10), got) {
		t.Fatalf("a second Load changed the counters (err %v)", err)
	}
}

// TestSnapshotKillLosesAtMostOneInterval runs the periodic snapshots only (no final
// Flush, as with kill -9) and checks that the restarted registry lacks only what was
// recorded after the last periodic snapshot.
func TestSnapshotKillLosesAtMostOneInterval(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC))
	opts := Options{Now: clk.Now, StateDir: dir}
	r1 := NewRegistry(opts)
	r1.Load()
	h := r1.Host("a")
	for range 3 { // three intervals, each ending in the periodic snapshot
		for range 100 {
			h.Request(1, 1)
		}
		if err := r1.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	for range 42 { // the last interval, never snapshotted
		h.Request(1, 1)
	}
	r2 := NewRegistry(opts)
	if err := r2.Load(); err != nil {
		t.Fatal(err)
	}
	d := DayOf(clk.Now())
	got := queryAll(t, r2, d, d, 10)
	if len(got) != 1 || got[0].Requests != 300 {
		t.Fatalf("after kill %+v, want the 300 requests of the snapshotted intervals", got)
	}
}

func TestSnapshotCorruptIsReportedAndIgnored(t *testing.T) {
	for name, content := range map[string]string{
		"not json":       "{\"version\":1,\"days\":[",
		"unknown key":    `{"version":1,"days":[],"extra":true}`,
		"wrong version":  `{"version":2,"days":[]}`,
		"bad day":        `{"version":1,"days":[{"dayUtc":"2026-02-30","hosts":[]}]}`,
		"unordered":      `{"version":1,"days":[{"dayUtc":"2026-11-28","hosts":[{"hostname":"b"},{"hostname":"a"}]}]}`,
		"negative count": `{"version":1,"days":[{"dayUtc":"2026-11-28","hosts":[{"hostname":"a","requests":-1}]}]}`,
		"trailing":       `{"version":1,"days":[]} {}`,
		"repeated key":   `{"version":1,"days":[{"dayUtc":"2026-11-28","hosts":[{"hostname":"a","requests":1,"requests":2}]}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, SnapshotFile), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			clk := newFakeClock(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC))
			r := NewRegistry(Options{Now: clk.Now, StateDir: dir})
			if err := r.Load(); !errors.Is(err, ErrSnapshotCorrupt) {
				t.Fatalf("Load: %v, want ErrSnapshotCorrupt", err)
			}
			r.Host("a").Request(1, 1)
			if err := r.Flush(); err != nil { // replaces the corrupt file
				t.Fatal(err)
			}
			r2 := NewRegistry(Options{Now: clk.Now, StateDir: dir})
			if err := r2.Load(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSnapshotDropsDaysBeyondRetention(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	clk := newFakeClock(start)
	r := NewRegistry(Options{Now: clk.Now, StateDir: dir})
	r.Load()
	r.Host("a").Request(1, 1)
	clk.Set(start.AddDate(0, 0, 1))
	r.Roll(clk.Now())
	r.Host("a").Request(1, 1)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	// Restart after the first day left the window, the second is its oldest day.
	clk.Set(start.AddDate(0, 0, DefaultRetentionDays))
	r2 := NewRegistry(Options{Now: clk.Now, StateDir: dir})
	if err := r2.Load(); err != nil {
		t.Fatal(err)
	}
	got := queryAll(t, r2, 0, DayOf(clk.Now()), 100)
	if len(got) != 1 || got[0].Day != DayOf(start)+1 {
		t.Fatalf("after restart %+v, want only %s", got, DayOf(start)+1)
	}
}

func TestFlushWithoutStateDirDoesNothing(t *testing.T) {
	r := NewRegistry(Options{})
	if err := r.Load(); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
}
