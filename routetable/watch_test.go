package routetable

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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

// eventually polls cond every few milliseconds for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runSource starts src.Run and returns a stop function that waits for it.
func runSource(t *testing.T, src *FileSource) {
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
	select {
	case <-src.Watching():
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher did not start")
	}
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
	runSource(t, src)
	applies := func() float64 { return metric(t, s, "ingress_route_table_applies_total") }

	// A new revision, replaced by rename.
	tb.Revision = 2
	writeFile(t, path, tableJSON(t, tb))
	eventually(t, "revision 2", func() bool { rev, _ := s.Applied(); return rev == 2 })

	// Same revision, changed content (written in place): applied, the file is the truth.
	tb.Routes[2].Targets[0].Port = 81
	if err := os.WriteFile(path, tableJSON(t, tb), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the changed port", func() bool {
		return s.Load().Lookup("plain.example.test").Backends[0].Addr == "127.0.0.3:81"
	})
	n := applies()

	// An invalid file is refused once; the serving table stays.
	serving := s.Load()
	writeFile(t, path, []byte(strings.Replace(string(tableJSON(t, tb)), `"port":81`, `"port":0`, 1)))
	eventually(t, "the refusal", func() bool { return metric(t, s, "ingress_route_table_refusals_total") == 1 })
	if s.Load() != serving {
		t.Fatal("a refused file replaced the serving table")
	}
	// Touching the refused file again without changing it reports nothing new.
	src.Reload()
	now := time.Now()
	os.Chtimes(path, now, now)
	time.Sleep(100 * time.Millisecond) // a few debounce periods: nothing may happen
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
	eventually(t, "revision 3", func() bool { rev, _ := s.Applied(); return rev == 3 })
}

func TestFileSourceReloadOnRequest(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "routes.json")
	tb := validTable(t)
	writeFile(t, path, tableJSON(t, tb))
	s := NewStore(StoreOptions{Mode: ModeStandalone})
	// A debounce far beyond the test's life: only Reload can apply the change.
	src := NewFileSource(path, s, FileSourceOptions{Debounce: time.Hour})
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	runSource(t, src)
	tb.Revision = 8
	writeFile(t, path, tableJSON(t, tb))
	time.Sleep(50 * time.Millisecond)
	if rev, _ := s.Applied(); rev != 7 {
		t.Fatalf("applied %d before Reload", rev)
	}
	src.Reload()
	eventually(t, "revision 8", func() bool { rev, _ := s.Applied(); return rev == 8 })
}

func TestFileSourceRunStopsWithContext(t *testing.T) {
	s := NewStore(StoreOptions{Mode: ModeStandalone})
	src := NewFileSource(filepath.Join(t.TempDir(), "routes.json"), s, FileSourceOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	<-src.Watching()
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
	wantViolation(t, err, "routes[0].hostname must be")
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
