package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// h3IdleTimeout is the QUIC idle timeout the client offers. QUIC uses the lower of the two
// peers' values, so with this one (longer than any -hold the harness uses) the server's own
// idle timeout decides how long an idle connection lives: the ingress's is --idle-timeout
// (120 s by default) both in QUIC and in its HTTP/3 layer, which counts only requests, so
// keep-alive PINGs could not keep a connection open past it anyway. The client sends none:
// nothing crosses an idle connection.
const h3IdleTimeout = 5 * time.Minute

// h3Conn is one idle HTTP/3 connection: a transport of its own holds its one QUIC connection,
// dialled over a UDP socket of its own.
type h3Conn struct {
	tr   *http3.Transport
	conn *quic.Conn // set by the transport's Dial; the transport dials exactly once here
	url  string
}

func (c *h3Conn) Close() error { return c.tr.Close() }

// open reports whether the QUIC connection is still open (neither peer closed it nor did it
// time out).
func (c *h3Conn) open() bool { return c.conn != nil && c.conn.Context().Err() == nil }

// openH3 opens one HTTP/3 connection, makes one request on it and leaves it idle.
func openH3(addr, host, path string) (io.Closer, error) {
	c := &h3Conn{url: "https://" + host + path}
	c.tr = &http3.Transport{
		TLSClientConfig: tlsConfig(host, http3.NextProtoH3),
		QUICConfig:      &quic.Config{MaxIdleTimeout: h3IdleTimeout},
		// The pinned address on a UDP socket of its own (quic.DialAddr opens one and closes it
		// with the connection), whatever the URL's host resolves to.
		Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			conn, err := quic.DialAddr(ctx, addr, tlsCfg, qc)
			c.conn = conn
			return conn, err
		},
	}
	if err := c.get(); err != nil {
		_ = c.tr.Close()
		return nil, err
	}
	return c, nil
}

// get sends GET on the connection and reads the whole answer; anything but a 200 over
// HTTP/3 is an error.
func (c *h3Conn) get() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return err
	}
	resp, err := c.tr.RoundTrip(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	switch {
	case err != nil:
		return err
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("idleconns: status %d", resp.StatusCode)
	case resp.ProtoMajor != 3:
		return fmt.Errorf("idleconns: %s, want HTTP/3", resp.Proto)
	}
	return nil
}

// stillOpen counts the HTTP/3 connections of conns that are still open (0 for other kinds).
func stillOpen(conns []io.Closer) int {
	n := 0
	for _, c := range conns {
		if h, ok := c.(*h3Conn); ok && h.open() {
			n++
		}
	}
	return n
}
