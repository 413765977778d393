// Command idleconns opens many HTTP/1.1 keep-alive connections to a loopback proxy, sends one
// request on each, reads the response, and then holds every connection open and idle so the
// harness (bench/compare) can read the proxy's memory with that many idle clients. With -tls
// the connections are HTTP/1.1 over TLS, with -h2 HTTP/2 over TLS (one connection per
// client, one request on stream 1), with -h3 HTTP/3 over QUIC (quic-go's http3.Transport, one
// per connection, each QUIC connection on a UDP socket of its own, one request each; no
// keep-alive PINGs: the client offers a 5-minute QUIC idle timeout, so the server's decides,
// see h3.go). The proxy's certificate is not checked (loopback, a self-signed benchmark
// certificate), and every connection makes a full handshake. 16 dialers open the connections.
//
// It prints "ready N" on stdout once N connections have completed their request, then holds
// them until SIGTERM or SIGINT arrives or -hold elapses, whichever comes first. It never holds
// longer than -hold, so a harness that dies cannot leave it running for long. With -h3 it
// prints "still open N of M" on stderr when the hold ends, so that a proxy that closed idle
// QUIC connections during the hold shows in the harness's log. Every connection needs a file
// descriptor (a TCP or a UDP socket): the caller raises `ulimit -n` above -n.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/serve-zone/ingress/bench/internal/loadtool"
)

func main() {
	addr := flag.String("addr", "", "proxy address host:port (loopback only)")
	host := flag.String("host", "bench.test", "Host header")
	path := flag.String("path", "/64", "request path")
	n := flag.Int("n", 1000, "number of connections")
	hold := flag.Duration("hold", 60*time.Second, "longest time to hold the connections")
	useTLS := flag.Bool("tls", false, "HTTP/1.1 over TLS (ALPN http/1.1)")
	useH2 := flag.Bool("h2", false, "HTTP/2 over TLS (ALPN h2)")
	useH3 := flag.Bool("h3", false, "HTTP/3 over QUIC (UDP at -addr)")
	flag.Parse()
	m := plain
	kinds := 0
	for _, k := range []struct {
		on bool
		m  mode
	}{{*useTLS, overTLS}, {*useH2, h2}, {*useH3, h3}} {
		if k.on {
			m = k.m
			kinds++
		}
	}
	if kinds > 1 {
		log.Fatal("idleconns: -tls, -h2 and -h3 exclude each other")
	}
	conns, err := open(m, *addr, *host, *path, *n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("ready %d\n", len(conns))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *hold)
	defer cancel()
	<-ctx.Done()
	if m == h3 {
		fmt.Fprintf(os.Stderr, "still open %d of %d\n", stillOpen(conns), len(conns))
	}
}

// mode is how the connections speak: plain HTTP/1.1, HTTP/1.1 over TLS, HTTP/2 over TLS,
// HTTP/3 over QUIC.
type mode int

const (
	plain mode = iota
	overTLS
	h2
	h3
)

func open(m mode, addr, host, path string, n int) ([]io.Closer, error) {
	if err := loadtool.CheckLoopback("idleconns", addr); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, errors.New("idleconns: -n must be at least 1")
	}
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
	conns := make([]io.Closer, n)
	errs := make([]error, n)
	// A bounded number of dialers keeps the open rate gentle and the helper's own CPU low.
	const workers = 16
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				switch m {
				case h2:
					conns[i], errs[i] = openH2(addr, host, path)
				case h3:
					conns[i], errs[i] = openH3(addr, host, path)
				default:
					conns[i], errs[i] = openOne(m, addr, host, req)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	kept := conns[:0]
	for _, c := range conns {
		if c != nil {
			kept = append(kept, c)
		}
	}
	return kept, errors.Join(errs...)
}

// openOne opens one HTTP/1.1 connection (over TLS for overTLS) and makes one request.
func openOne(m mode, addr, host string, req []byte) (io.Closer, error) {
	var c net.Conn
	var err error
	d := &net.Dialer{Timeout: 5 * time.Second}
	if m == overTLS {
		c, err = tls.DialWithDialer(d, "tcp", addr, tlsConfig(host, "http/1.1"))
	} else {
		c, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(req); err != nil {
		_ = c.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("idleconns: status %d", resp.StatusCode)
	}
	if err == nil && resp.Close {
		err = errors.New("idleconns: the proxy closed the connection after one request")
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// tlsConfig is the client's TLS configuration: SNI host, ALPN proto, no session cache
// (a full handshake each), the certificate not checked.
func tlsConfig(host, proto string) *tls.Config {
	return &tls.Config{ServerName: host, NextProtos: []string{proto}, InsecureSkipVerify: true}
}

// h2Conn is one idle HTTP/2 connection: a transport of its own holds it in its pool.
type h2Conn struct{ tr *http.Transport }

func (c h2Conn) Close() error {
	c.tr.CloseIdleConnections()
	return nil
}

// openH2 opens one HTTP/2 connection over TLS, makes one request on it and leaves it idle
// (no health-check pings: the transport's ReadIdleTimeout is off).
func openH2(addr, host, path string) (io.Closer, error) {
	var protos http.Protocols
	protos.SetHTTP2(true)
	tr := &http.Transport{
		Protocols:       &protos,
		TLSClientConfig: tlsConfig(host, "h2"),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", addr)
		},
		MaxConnsPerHost: 1,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+host+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	switch {
	case err != nil:
	case resp.StatusCode != http.StatusOK:
		err = fmt.Errorf("idleconns: status %d", resp.StatusCode)
	case resp.ProtoMajor != 2:
		err = fmt.Errorf("idleconns: %s, want HTTP/2", resp.Proto)
	}
	if err != nil {
		tr.CloseIdleConnections()
		return nil, err
	}
	return h2Conn{tr}, nil
}
