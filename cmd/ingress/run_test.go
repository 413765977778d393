package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/pebbletest"
	"github.com/serve-zone/ingress/routetable"
)

// TestRunStopsWhenAPartFails: the parts of a running ingress share one errgroup, so a part
// that fails (here the routes watcher, whose directory is gone before it can watch it)
// stops the rest through the usual drain, and run returns that part's error instead of
// serving on half-wired (it used to log the failure and serve on, unwatched).
func TestRunStopsWhenAPartFails(t *testing.T) {
	o := defaultOptions()
	fs := o.flagSet("ingress", io.Discard)
	dir := filepath.Join(t.TempDir(), "routes")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	routes := filepath.Join(dir, "routes.json")
	target := routetable.Target{LeaseID: "lease-1", Address: "127.0.0.1", Port: 9}
	if err := os.WriteFile(routes, binarytest.TableJSON(t, 1, nil, binarytest.Route("app.example.test", "", false, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := parseFlags(fs, "", binarytest.BaseArgs("--routes", routes), nil); err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	logs := &pebbletest.SyncBuffer{}
	in, err := newInstance(o, instanceDeps{log: newLogger("json", o.level, logs)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil { // loaded already; now it cannot be watched
		t.Fatal(err)
	}

	ran := make(chan error, 1)
	go func() { ran <- in.run(context.Background()) }() // no cancel: only the failure can stop it
	select {
	case err := <-ran:
		if err == nil || !strings.Contains(err.Error(), "routes watcher") {
			t.Fatalf("run = %v, want the routes watcher's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("run did not stop after a part failed:\n%s", logs.String())
	}
	out := logs.String()
	for _, line := range []string{`"routes watcher stopped"`, `"stopping: draining in-flight requests"`, `"stopped"`} {
		if !strings.Contains(out, line) {
			t.Errorf("log lacks %s:\n%s", line, out)
		}
	}
}
