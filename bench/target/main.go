// Command target is the fixed-response backend of the proxy comparison in bench/compare.
//
// It answers GET /64 with a 64-byte body and GET /16k with a 16 KiB body over HTTP/1.1
// keep-alive on a loopback address, and 404 to anything else. The bodies are built once, so
// the target spends as little CPU per request as net/http allows: it shares a core with the
// load generator, and every proxy under test is measured against the same target.
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
	srv := &http.Server{
		Handler:           newHandler(),
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

func newHandler() http.Handler {
	small, large := newBody(64), newBody(16<<10)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b body
		switch r.URL.Path {
		case "/64":
			b = small
		case "/16k":
			b = large
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
