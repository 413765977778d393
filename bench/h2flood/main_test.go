package main

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

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
