package routetable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest/observer"

	"github.com/serve-zone/ingress/internal/testwait"
)

// writeFile replaces path by rename, as editors and config managers do.
func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func tableJSON(t *testing.T, tb *Table) []byte {
	t.Helper()
	b, err := json.Marshal(tb)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wait bounds every wait for the watcher: generous, since it is only reached on failure.
const wait = 5 * time.Second

// inOrder reports whether the log entries from index from on hold the messages msgs in
// this order (others may come between).
func inOrder(logs *observer.ObservedLogs, from int, msgs ...string) bool {
	for _, e := range logs.All()[from:] {
		if len(msgs) > 0 && e.Message == msgs[0] {
			msgs = msgs[1:]
		}
	}
	return len(msgs) == 0
}

// runSource starts src.Run, stopped when the test ends, and waits until it watches (logs
// is src's logger's).
func runSource(t *testing.T, src *FileSource, logs *observer.ObservedLogs) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := src.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	waitWatching(t, logs)
}

// waitWatching waits for Run's word that it watches: changes made after that are seen.
func waitWatching(t *testing.T, logs *observer.ObservedLogs) {
	t.Helper()
	testwait.Until(t, wait, "the watcher to start", func() bool {
		return logs.FilterMessage("watching for routes file changes").Len() > 0
	})
}

func TestFileSourceReloadsOnChange(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "routes.json")
	tb := validTable(t)
	tb.Revision = 1
	tb.Routes[2].TLS = &RouteTLS{ACME: true, RedirectHTTP: true} // standalone-only shape
	writeFile(t, path, tableJSON(t, tb))

	log, logs := observed()
	s := NewStore(StoreOptions{Mode: ModeStandalone, Logger: log})
	src := NewFileSource(path, s, FileSourceOptions{Logger: log, Debounce: 20 * time.Millisecond})
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	runSource(t, src, logs)
	applies := func() float64 { return metric(t, s, "ingress_route_table_applies_total") }

	// A new revision, replaced by rename.
	tb.Revision = 2
	writeFile(t, path, tableJSON(t, tb))
	testwait.Until(t, wait, "revision 2", func() bool { rev, _ := s.Applied(); return rev == 2 })

	// Same revision, changed content (written in place): applied, the file is the truth.
	tb.Routes[2].Targets[0].Port = 81
	if err := os.WriteFile(path, tableJSON(t, tb), 0o600); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, wait, "the changed port", func() bool {
		return s.Load().Lookup("plain.example.test").Backends[0].Addr == "127.0.0.3:81"
	})
	n := applies()

	// An invalid file is refused once; the serving table stays.
	serving := s.Load()
	writeFile(t, path, []byte(strings.Replace(string(tableJSON(t, tb)), `"port":81`, `"port":0`, 1)))
	testwait.Until(t, wait, "the refusal", func() bool { return metric(t, s, "ingress_route_table_refusals_total") == 1 })
	if s.Load() != serving {
		t.Fatal("a refused file replaced the serving table")
	}
	// Reading the refused file again (Reload, then a touch, which the watcher sees and
	// reads after its debounce) finds it unchanged and reports nothing new.
	const (
		requested = "routes file reload requested"
		changed   = "routes file changed: reloading after the debounce"
		unchanged = "routes file unchanged"
	)
	from := logs.Len()
	src.Reload()
	testwait.Until(t, wait, "the reload to read the file", func() bool {
		return inOrder(logs, from, requested, unchanged)
	})
	from = logs.Len()
	now := time.Now().Add(time.Second)
	os.Chtimes(path, now, now)
	testwait.Until(t, wait, "the touch to be read", func() bool {
		return inOrder(logs, from, changed, unchanged)
	})
	if metric(t, s, "ingress_route_table_refusals_total") != 1 || applies() != n {
		t.Fatal("an unchanged refused file was judged again")
	}
	if logs.FilterMessage("route table refused").Len() != 1 {
		t.Fatalf("refusal logged %d times", logs.FilterMessage("route table refused").Len())
	}

	// Removing the file keeps the table; restoring it applies again.
	os.Remove(path)
	tb.Revision = 3
	writeFile(t, path, tableJSON(t, tb))
	testwait.Until(t, wait, "revision 3", func() bool { rev, _ := s.Applied(); return rev == 3 })
}

func TestFileSourceReloadOnRequest(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "routes.json")
	tb := validTable(t)
	writeFile(t, path, tableJSON(t, tb))
	log, logs := observed()
	s := NewStore(StoreOptions{Mode: ModeStandalone})
	// A debounce far beyond the test's life: only Reload can apply the change.
	src := NewFileSource(path, s, FileSourceOptions{Debounce: time.Hour, Logger: log})
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	runSource(t, src, logs)
	// Run reads the file once more as it starts watching; only then is the change new.
	testwait.Until(t, wait, "the first read", func() bool { return logs.FilterMessage("routes file unchanged").Len() > 0 })
	tb.Revision = 8
	writeFile(t, path, tableJSON(t, tb))
	// The watcher has seen the change (and only started its hour-long debounce).
	testwait.Until(t, wait, "the watcher to see the change", func() bool {
		return logs.FilterMessage("routes file changed: reloading after the debounce").Len() > 0
	})
	if rev, _ := s.Applied(); rev != 7 {
		t.Fatalf("applied %d before Reload", rev)
	}
	src.Reload()
	testwait.Until(t, wait, "revision 8", func() bool { rev, _ := s.Applied(); return rev == 8 })

	// Each reload says what came of it, naming the file (issue 34): applied (the
	// revision), unchanged, or refused with the revision still served.
	outcome := func(msg string, fields map[string]any) {
		t.Helper()
		testwait.UntilWhy(t, wait, msg, func() (bool, string) {
			for _, e := range logs.FilterMessage(msg).All() {
				m := e.ContextMap()
				ok := m["path"] == path
				for k, v := range fields {
					ok = ok && m[k] == v
				}
				if ok {
					return true, ""
				}
			}
			return false, fmt.Sprint(logs.FilterMessage(msg).All())
		})
	}
	outcome("reload: applied", map[string]any{"revision": int64(8)})
	src.Reload()
	outcome("reload: unchanged, nothing applied", map[string]any{"serving": int64(8)})
	tb.Routes[0].Targets[0].Port = 0
	writeFile(t, path, tableJSON(t, tb))
	src.Reload()
	outcome("reload: refused, still serving the last good table", map[string]any{"serving": int64(8), "error": "1 violation(s), logged above"})
	src.Reload() // the refused file again: still refused, not "unchanged"
	outcome("reload: refused, still serving the last good table", map[string]any{"serving": int64(8), "error": "unchanged since it was refused (logged then)"})
	if rev, _ := s.Applied(); rev != 8 {
		t.Fatalf("serving %d after a refused reload", rev)
	}
}

func TestFileSourceRunStopsWithContext(t *testing.T) {
	s := NewStore(StoreOptions{Mode: ModeStandalone})
	log, logs := observed()
	src := NewFileSource(filepath.Join(t.TempDir(), "routes.json"), s, FileSourceOptions{Logger: log})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	waitWatching(t, logs)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after ctx was done")
	}
	// A directory that does not exist cannot be watched.
	bad := NewFileSource("/nonexistent-dir-for-test/routes.json", s, FileSourceOptions{})
	if err := bad.Run(context.Background()); err == nil {
		t.Fatal("want an error for an unwatchable directory")
	}
}

func TestLoadFileAndWatchFileRefuseAtStart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "routes.json")
	if _, err := LoadFile(path); err == nil {
		t.Fatal("a missing file must be refused")
	}
	os.WriteFile(path, []byte(`{"revision":1,"routes":[{"hostname":"A.test","targets":[],"tls":null}],"certificates":[]}`), 0o600)
	_, err := LoadFile(path)
	wantViolation(t, err, `routes[0].hostname "A.test" must be`)
	wantViolation(t, err, "routes[0].targets must hold 1 to 64 targets")

	s := NewStore(StoreOptions{Mode: ModeStandalone})
	if err := watchFile(context.Background(), path, s, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("watchFile: %v", err)
	}
	tb := validTable(t)
	tb.Routes[2].TLS = &RouteTLS{ACME: true}
	writeFile(t, path, tableJSON(t, tb))
	if got, err := LoadFile(path); err != nil || got.Revision != 7 {
		t.Fatalf("LoadFile: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := watchFile(ctx, path, s, nil); err != nil {
		t.Fatal(err)
	}
	if rev, _ := s.Applied(); rev != 7 {
		t.Fatal("watchFile must load the file before watching")
	}
}

// A log file kept in the routes file's directory must not feed the watcher: events for
// files the table does not name produce no log line, and a change of the routes file
// made after them is still applied.
func TestFileSourceIgnoresOtherFilesSilently(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "routes.json")
	tb := validTable(t)
	tb.Revision = 1
	writeFile(t, path, tableJSON(t, tb))

	log, logs := observed()
	s := NewStore(StoreOptions{Mode: ModeStandalone, Logger: log})
	src := NewFileSource(path, s, FileSourceOptions{Logger: log, Debounce: 20 * time.Millisecond})
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	runSource(t, src, logs)
	// Run reads the file once more as it starts watching; wait for that so that nothing
	// of the start is counted below.
	testwait.Until(t, wait, "the first read", func() bool { return logs.FilterMessage("routes file unchanged").Len() > 0 })
	from := logs.Len()

	// 200 appends to a log file beside the routes file, as a debug log kept there makes.
	other := filepath.Join(dir, "ingress.log")
	lf, err := os.OpenFile(other, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	for i := 0; i < 200; i++ {
		if _, err := lf.WriteString("a log line\n"); err != nil {
			t.Fatal(err)
		}
	}
	// The routes file changes after them: its event is queued behind theirs, so once the
	// change is applied every event of the log file has been handled.
	tb.Revision = 2
	writeFile(t, path, tableJSON(t, tb))
	testwait.Until(t, wait, "revision 2", func() bool { rev, _ := s.Applied(); return rev == 2 })

	for _, e := range logs.All()[from:] {
		for _, fl := range e.Context {
			if strings.Contains(fl.String, "ingress.log") {
				t.Errorf("a line for the unrelated file: %q %v", e.Message, e.ContextMap())
			}
		}
	}
	// What remains is the routes file's own reload: its change event(s) (the temporary
	// file's rename may count twice), and the store's words on the applied table.
	if n := logs.Len() - from; n > 10 {
		for _, e := range logs.All()[from:] {
			t.Logf("%s %v", e.Message, e.ContextMap())
		}
		t.Fatalf("%d log lines for 200 unrelated events and one change", n)
	}
}
