package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/floodtest"
)

// TestMain lets the -preopen test run its attacker as a child process (this binary).
func TestMain(m *testing.M) {
	if floodtest.RunChild(attackerEnv) {
		return
	}
	os.Exit(m.Run())
}

func TestParseFlags(t *testing.T) {
	if _, err := parseFlags([]string{"-attack", "nope"}); err == nil {
		t.Error("an unknown attack was accepted")
	}
	if _, err := parseFlags([]string{"-attackers", "0"}); err == nil {
		t.Error("zero attackers were accepted")
	}
	if _, err := parseFlags([]string{"-from", "localhost"}); err == nil {
		t.Error("a -from that is not an address was accepted")
	}
	c, err := parseFlags([]string{"-attack", "ping", "-d", "2s"})
	if err != nil || c.attack != "ping" || c.duration != 2*time.Second || c.from != "127.0.0.2" {
		t.Errorf("%+v %v", c, err)
	}
}

func TestPercentiles(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	p50, p99 := percentiles(d)
	if p50 != 50 || p99 != 99 {
		t.Errorf("p50 %v p99 %v", p50, p99)
	}
}

// TestAgainstServer: the legitimate client gets answers and every attack reaches the
// server (net/http's h2c server stands in for the ingress).
func TestAgainstServer(t *testing.T) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	for name := range attacks {
		c := config{addr: ln.Addr().String(), host: "x", path: "/", attack: name, attackers: 1, duration: 100 * time.Millisecond}
		lat, err := legit(context.Background(), c)
		if err != nil || len(lat) == 0 {
			t.Fatalf("legit: %d requests, %v", len(lat), err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		var conns, frames atomic.Int64
		flood(ctx, c, &conns, &frames)
		cancel()
		if conns.Load() == 0 || frames.Load() == 0 {
			t.Errorf("%s: %d connections, %d frames", name, conns.Load(), frames.Load())
		}
	}
}

func TestParsePreopenFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-preopen", "10"}, // no -tls-addr
		{"-preopen", "10", "-tls-addr", "127.0.0.1:1", "-over", "h3"},
		{"-preopen", "10", "-tls-addr", "127.0.0.1:1", "-from", ""},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	c, err := parseFlags([]string{"-preopen", "10", "-tls-addr", "127.0.0.1:1", "-addr", "127.0.0.1:2", "-host", "h.test"})
	if err != nil || c.pre.h2cAddr != "127.0.0.1:2" || c.pre.sni != "h.test" || c.pre.over != "h2c" {
		t.Errorf("%+v %v", c.pre, err)
	}
}

// TestPreopenAgainstServer: the -preopen mode against net/http (h2c and HTTP/1.1 on one
// listener, h2 over TLS on another), over h2c and over TLS: every connection opens
// before the flood, streams go out, the bystanders are answered over HTTP/1.1 and
// HTTP/2, and the row has every column.
func TestPreopenAgainstServer(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	plain := &http.Server{Protocols: &p, Handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = plain.Serve(ln) }()
	defer plain.Close()
	secure := httptest.NewUnstartedServer(h)
	secure.EnableHTTP2 = true
	secure.StartTLS()
	defer secure.Close()
	for _, over := range []string{"h2c", "tls"} {
		c, err := parseFlags([]string{"-preopen", "4", "-over", over, "-addr", ln.Addr().String(), "-tls-addr", secure.Listener.Addr().String(),
			"-host", "example.com", "-d", "500ms", "-quiet", "300ms", "-pid", strconv.Itoa(os.Getpid()), "-name", "net/http"})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := runPreopen(&out, c, c.pre); err != nil {
			t.Fatalf("%s: %v", over, err)
		}
		t.Logf("%s", out.String())
		_, row, ok := strings.Cut(out.String(), "\nrow\t")
		cols := strings.Split(strings.TrimSpace(row), "\t")
		if !ok || len(cols) != 24 {
			t.Fatalf("%s: row %q: want 24 columns after \"row\"", over, row)
		}
		if cols[0] != "net/http" || cols[1] != over || cols[2] != "4" || cols[3] != "4" || cols[4] == "0" {
			t.Errorf("%s: name, over, conns, opened, streams = %q; want net/http, %s, 4, 4, some", over, cols[:5], over)
		}
		if cols[18] != "0" || cols[21] != "0" || cols[16] == "0.00" || cols[19] == "0.00" {
			t.Errorf("%s: bystander failures %s/%s, quiet p99s %s/%s", over, cols[18], cols[21], cols[16], cols[19])
		}
		if cols[12] == "0.0" || cols[14] == "0" || cols[22] == "-" || cols[23] != "-" {
			t.Errorf("%s: peak RSS %s MiB, %s descriptors, CPU %s, target CPU %s; want this process's, and no target's", over, cols[12], cols[14], cols[22], cols[23])
		}
	}
}
