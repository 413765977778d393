package routetable

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPersistAndLoadState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state") // created on first write
	s := NewStore(StoreOptions{StateDir: dir})
	if err := s.LoadState(); err != nil {
		t.Fatalf("no file yet: %v", err)
	}
	tb := validTable(t)
	tb.Routes[2].TLS = nil
	if err := s.Apply(tb); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, StateFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	back, err := Decode(data, ModeRelay)
	if err != nil {
		t.Fatalf("the state file is not a valid table: %v", err)
	}
	want, _ := json.Marshal(tb)
	if got, _ := json.Marshal(back); string(got) != string(want) {
		t.Fatalf("state file differs:\n%s\n%s", got, want)
	}
	if !strings.Contains(string(data), `"tls":{"certificateId":"cert-a","redirectHttp":true}`) || !strings.Contains(string(data), `"tls":null`) {
		t.Fatalf("tls shapes not kept: %s", data)
	}

	// A newer apply replaces the file; no temporary files are left behind.
	tb2 := validTable(t)
	tb2.Revision = 8
	if err := s.Apply(tb2); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != StateFile {
		t.Fatalf("state dir holds %v", entries)
	}

	// A restarted store serves the last-known-good table before any relay answers.
	r := NewStore(StoreOptions{StateDir: dir})
	if err := r.LoadState(); err != nil {
		t.Fatal(err)
	}
	if rev, ok := r.Applied(); !ok || rev != 8 || r.Load().Lookup("www.example.test") == nil {
		t.Fatalf("restored revision %d %v", rev, ok)
	}
	// It does not rewrite the file it just read, and a relay table must still be newer.
	stale := validTable(t)
	stale.Revision = 8
	if err := r.Apply(stale); !errors.Is(err, ErrStale) {
		t.Fatalf("%v, want ErrStale", err)
	}
}

// TestLoadStateRefusesRepeatedKeys: a state file is untrusted JSON like any other; a
// repeated key is refused with its path, not resolved.
func TestLoadStateRefusesRepeatedKeys(t *testing.T) {
	valid, _ := json.Marshal(validTable(t))
	repeated := strings.Replace(string(valid), `"port":8080`, `"port":8080,"port":8081`, 1)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, StateFile), []byte(repeated), 0o600); err != nil {
		t.Fatal(err)
	}
	s := NewStore(StoreOptions{StateDir: dir})
	err := s.LoadState()
	if err == nil || !strings.Contains(err.Error(), "routes[0].targets[0].port is repeated") || s.Load() != nil {
		t.Fatalf("LoadState = %v, want the repeated port refused", err)
	}
}

func TestLoadStateIgnoresBadFiles(t *testing.T) {
	valid, _ := json.Marshal(validTable(t))
	invalid := strings.Replace(string(valid), `"port":8080`, `"port":0`, 1)
	for name, content := range map[string]string{
		"corrupt":   `{"revision": 3, "routes": [`,
		"truncated": string(valid[:len(valid)/2]),
		"schema":    `{"revision": 3}`,
		"invalid":   invalid,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, StateFile), []byte(content), 0o600)
			log, logs := observed()
			s := NewStore(StoreOptions{StateDir: dir, Logger: log})
			if err := s.LoadState(); err == nil {
				t.Fatal("want an error")
			}
			if s.Load() != nil || logs.FilterMessage("last-known-good route table ignored").Len() != 1 {
				t.Fatal("a bad state file must be logged and ignored")
			}
			if s.Refused(7) || metric(t, s, "ingress_route_table_refusals_total") != 0 {
				t.Fatal("a bad state file is not a refused relay table")
			}
			// The store works normally afterwards.
			if err := s.Apply(validTable(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("unreadable", func(t *testing.T) {
		dir := t.TempDir()
		os.Mkdir(filepath.Join(dir, StateFile), 0o700) // a directory cannot be read as a file
		s := NewStore(StoreOptions{StateDir: dir})
		if err := s.LoadState(); err == nil || s.Load() != nil {
			t.Fatalf("want an ignored error, got %v", err)
		}
		// Persisting over it fails, is counted, and does not undo the apply.
		if err := s.Apply(validTable(t)); err != nil {
			t.Fatal(err)
		}
		if metric(t, s, "ingress_route_table_persist_failures_total") != 1 || s.Load() == nil {
			t.Fatal("a persistence failure must be counted and must not refuse the table")
		}
	})
}
