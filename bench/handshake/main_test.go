package main

import (
	"bytes"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunFullHandshakes checks that every connection is a new, full handshake that gets its
// answer, against a TLS server that would resume sessions if the client offered one.
func TestRunFullHandshakes(t *testing.T) {
	var handshakes, resumed atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS.DidResume {
			resumed.Add(1)
		}
		_, _ = w.Write([]byte("ok"))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			handshakes.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()

	caFile := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	c := config{
		addr:       strings.TrimPrefix(srv.URL, "https://"),
		serverName: "example.com",
		path:       "/",
		clients:    4,
		duration:   300 * time.Millisecond,
	}
	if err := c.check(caFile); err != nil {
		t.Fatal(err)
	}
	results, elapsed := run(c)
	var ok, failed int
	for _, r := range results {
		ok += len(r.latencies)
		failed += r.failed
		if r.firstErr != nil {
			t.Errorf("client error: %v", r.firstErr)
		}
	}
	if ok == 0 || failed != 0 {
		t.Fatalf("ok %d, failed %d", ok, failed)
	}
	if resumed.Load() != 0 {
		t.Errorf("%d resumed sessions, want 0", resumed.Load())
	}
	if got := handshakes.Load(); got < int64(ok) {
		t.Errorf("%d connections for %d requests: connections were reused", got, ok)
	}
	var out bytes.Buffer
	report(&out, results, elapsed)
	if !strings.Contains(out.String(), "connections: ") || !strings.Contains(out.String(), " 0 failed") ||
		!strings.Contains(out.String(), "tls: TLS 1.3 ") || !strings.Contains(out.String(), " X25519") {
		t.Errorf("report:\n%s", out.String())
	}
}

func TestCheckRefusesNonLoopback(t *testing.T) {
	c := config{addr: "192.0.2.1:443", clients: 1, duration: time.Second}
	if err := c.check(""); err == nil {
		t.Fatal("check accepted a non-loopback address")
	}
}
