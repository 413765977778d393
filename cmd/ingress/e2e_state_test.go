package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// adminStatistics asks the admin listener for today's statistics (one page of 100).
func adminStatistics(c *http.Client, admin string) ([]statEntry, error) {
	day := today()
	r, err := get(c, admin, "", fmt.Sprintf("%s?fromDayUtc=%s&toDayUtc=%s&limit=100", stats.HandlerPath, day, day))
	if err != nil {
		return nil, err
	}
	if r.status != http.StatusOK {
		return nil, fmt.Errorf("status %d %q", r.status, r.body)
	}
	var page statPage
	if err := json.Unmarshal([]byte(r.body), &page); err != nil {
		return nil, fmt.Errorf("%v: %s", err, r.body)
	}
	if page.NextCursor != nil {
		return nil, fmt.Errorf("unexpected nextCursor: %s", r.body)
	}
	return page.Statistics, nil
}

// TestE2EStateDir: a stopped ingress leaves its last table (mode 0600) and statistics in
// --state-dir; restarted with the relay down, it serves that table and continues the
// day's counts.
func TestE2EStateDir(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	const host = "state.example.test"
	_, target := echoBackend(t, "backend", 0)
	dir := filepath.Join(t.TempDir(), "state") // the ingress creates it
	rs, origin := startRelay(t, "127.0.0.1:0")
	rs.SetTable(binarytest.TableJSON(t, 7, nil, binarytest.Route(host, "", false, target)), 7)

	p := startIngress(t, binarytest.RelayEnv(e2eBearer, origin, e2eNode), binarytest.BaseArgs("--state-dir", dir)...)
	c := httpClient(t)
	waitStatus(t, c, p.Admin, "", "/readyz", http.StatusOK)
	const first = 3
	for range first {
		mustGet(t, c, p.HTTP, host, "/", http.StatusOK)
	}
	mustGet(t, c, p.HTTP, "unrouted.example.test", "/", http.StatusNotFound) // never an entry
	testwait.UntilWhy(t, e2eWait, "first run's statistics", func() (bool, string) {
		got, err := adminStatistics(c, p.Admin)
		if err != nil {
			return false, err.Error()
		}
		why := checkEntries(got, today(), e2eNode, []string{host}, map[string]int64{host: first})
		return why == "", why
	})
	p.Stop(e2eWait)
	p.AssertNoSecret(e2eBearer)
	_ = rs.Close()

	for _, name := range []string{routetable.StateFile, stats.SnapshotFile} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("state file after a graceful stop: %v", err)
		}
		if fi.Size() == 0 {
			t.Fatalf("%s is empty", name)
		}
		if name == routetable.StateFile && fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s has mode %v, want 0600", name, fi.Mode().Perm())
		}
	}

	// Second run: the relay is down; the last known table serves at once.
	p2 := startIngress(t, binarytest.RelayEnv(e2eBearer, closedOrigin(t), e2eNode), binarytest.BaseArgs("--state-dir", dir)...)
	c2 := httpClient(t)
	waitStatus(t, c2, p2.Admin, "", "/readyz", http.StatusOK)
	r := mustGet(t, c2, p2.HTTP, host, "/again", http.StatusOK)
	if want := "backend " + host + " /again"; r.body != want {
		t.Fatalf("body %q, want %q", r.body, want)
	}
	testwait.UntilWhy(t, e2eWait, "statistics continued after the restart", func() (bool, string) {
		got, err := adminStatistics(c2, p2.Admin)
		if err != nil {
			return false, err.Error()
		}
		why := checkEntries(got, today(), e2eNode, []string{host}, map[string]int64{host: first + 1})
		return why == "", why
	})
	p2.Stop(e2eWait)
	p2.AssertNoSecret(e2eBearer)
}
