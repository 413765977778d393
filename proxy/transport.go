package proxy

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// copyBufSize is the size of the pooled buffers that bodies and tunnels are copied with.
const copyBufSize = 32 << 10

var bufPool = sync.Pool{New: func() any { return new([copyBufSize]byte) }}

// newTransport returns the one Transport shared by every route: HTTP/1.1 to targets
// (targets are plain-HTTP lease addresses), no environment proxy, no compression
// negotiation (bodies pass through untouched), a large idle pool per target, and a
// DialContext that marks its errors so that connect failures can be told apart.
func newTransport(cfg Config) (*net.Dialer, *http.Transport) {
	d := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
	t := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, &dialError{err: err}
			}
			return c, nil
		},
		MaxIdleConns:          0, // no global limit; per target below
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		// A non-nil empty map keeps the transport from ever negotiating HTTP/2.
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{},
		MaxResponseHeaderBytes: 1 << 20,
		WriteBufferSize:        copyBufSize,
		ReadBufferSize:         copyBufSize,
	}
	return d, t
}
