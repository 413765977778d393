package proxy

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// TestSlowClientsAreCutOff: a client that dribbles its header (slowloris) or never
// finishes a TLS handshake is disconnected after the read-header timeout, and nothing
// reaches the target.
func TestSlowClientsAreCutOff(t *testing.T) {
	const timeout = 300 * time.Millisecond
	e := newEnv(t, func(c *Config) { c.ReadHeaderTimeout = timeout })
	var hits atomic.Int32
	be := backend(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})

	cases := []struct {
		name, addr string
		dribble    bool
	}{
		{"dribbled header", e.http, true},
		{"silent TLS client", e.https, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Before the dial: the server's clock starts at its accept, which may come
			// before Dial returns here on a loaded machine.
			start := time.Now()
			c, err := net.Dial("tcp", tc.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				_, _ = io.Copy(io.Discard, c) // returns when the server closes
			}()
			if tc.dribble {
				_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: app.example.test\r\nX-Slow: ")
			dribble:
				for {
					select {
					case <-closed:
						break dribble
					case <-time.After(50 * time.Millisecond):
						if _, err := c.Write([]byte("a")); err != nil {
							break dribble
						}
					}
				}
			}
			select {
			case <-closed:
			case <-time.After(10 * timeout):
				t.Fatal("the slow client was not disconnected")
			}
			if d := time.Since(start); d < timeout {
				t.Fatalf("disconnected after %s, before the %s timeout", d, timeout)
			}
		})
	}
	if hits.Load() != 0 {
		t.Fatalf("%d slow requests reached the target", hits.Load())
	}
}
