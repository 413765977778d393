// Command target is the fixed-response backend of the proxy comparison in bench/compare.
//
// It answers GET /64 with a 64-byte body, GET /1k with 1 KiB (bench/thinkload) and GET /16k
// with a 16 KiB body over HTTP/1.1 keep-alive on a loopback address, GET /flood (bench/flood.sh's attacker) like /64, GET
// /_counts with its counters (below), and 404 to anything else. The bodies are built once, so
// the target spends as little CPU per request as net/http allows: it shares a core with the
// load generator, and every proxy under test is measured against the same target.
//
// It counts requests, /flood requests, connections opened and the most connections open at
// once: GET /_counts answers "requests N\nflood N\nconnections_opened N\nconnections_open
// N\npeak_open N\n" (the request itself counted), and with ?reset the peak starts again from
// the connections open now. The counters are atomics, one or two adds per request.
//
// Only the standard library is used; the module's other dependencies stay out of the
// measurement.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"

	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18080", "listen address (loopback only)")
	flag.Parse()
	if err := run(*addr); err != nil {
		log.Fatal(err)
	}
}

func run(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("target: %q is not a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	cn := &counters{}
	srv := &http.Server{
		Handler:           newHandler(cn),
		ConnState:         cn.connState,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// body is one precomputed response: its bytes and the header values that go with them.
type body struct {
	data          []byte
	contentLength []string
}

func newBody(n int) body {
	return body{
		data:          bytes.Repeat([]byte("x"), n),
		contentLength: []string{strconv.Itoa(n)},
	}
}

var contentType = []string{"text/plain; charset=utf-8"}

// counters are what the target saw, for GET /_counts.
type counters struct {
	requests, flood, opened, open, peak atomic.Int64
}

func (c *counters) connState(_ net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		c.opened.Add(1)
		n := c.open.Add(1)
		for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
		}
	case http.StateClosed, http.StateHijacked:
		c.open.Add(-1)
	}
}

func (c *counters) write(w http.ResponseWriter, reset bool) {
	if reset {
		c.peak.Store(c.open.Load())
	}
	w.Header()["Content-Type"] = contentType
	fmt.Fprintf(w, "requests %d\nflood %d\nconnections_opened %d\nconnections_open %d\npeak_open %d\n",
		c.requests.Load(), c.flood.Load(), c.opened.Load(), c.open.Load(), c.peak.Load())
}

func newHandler(cn *counters) http.Handler {
	small, kib, large := newBody(64), newBody(1<<10), newBody(16<<10)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn.requests.Add(1)
		var b body
		switch r.URL.Path {
		case "/64":
			b = small
		case "/1k":
			b = kib
		case "/16k":
			b = large
		case "/flood":
			cn.flood.Add(1)
			b = small
		case "/_counts":
			cn.write(w, r.URL.Query().Has("reset"))
			return
		default:
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h["Content-Type"] = contentType
		h["Content-Length"] = b.contentLength
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write(b.data)
		}
	})
}
