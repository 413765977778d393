package proxy

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

type discardRW struct {
	h    http.Header
	code int
}

func (d *discardRW) Header() http.Header         { return d.h }
func (d *discardRW) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardRW) WriteHeader(code int)        { d.code = code }

// TestHandlerHotPathAllocs measures the allocations per request forwarded by net/http's
// front-end's handler (routing, target pick, the outgoing head, the exchange, the relay
// and accounting), proxy and target together (the target, rawTarget, allocates nothing;
// the response writer is a stand-in that allocates nothing either).
func TestHandlerHotPathAllocs(t *testing.T) {
	e := newEnv(t)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{rawTarget(t)}}})
	r, _ := http.NewRequest("GET", "http://app.example.test/path?q=1", nil)
	r.RemoteAddr = "192.0.2.7:4711"
	r.RequestURI = "/path?q=1"
	r.Header.Set("User-Agent", "bench")
	r.Header.Set("Accept", "*/*")
	w := &discardRW{h: http.Header{}}
	h := e.srv.handler
	for range 50 {
		h.ServeHTTP(w, r) // warm: pools, header maps reach their size
	}
	allocs := testing.AllocsPerRun(1000, func() {
		clear(w.h)
		h.ServeHTTP(w, r)
	})
	t.Logf("%.1f allocs per request", allocs)
	// The response head's strings (relay.fields' arena) and what the header map takes.
	limit := 2.0
	if raceEnabled {
		limit += 3 // sync.Pool drops a share of what is put back under the race detector
	}
	if allocs > limit {
		t.Errorf("%.1f allocs per request, want at most %.0f", allocs, limit)
	}
	if st := e.stat("app.example.test"); st.Requests < 1000 {
		t.Errorf("requests not counted: %d", st.Requests)
	}
}

// BenchmarkProxyHTTP1 measures whole requests through real loopback listeners: a raw
// keep-alive HTTP/1.1 client, the proxy (fast path), and a minimal raw target. allocs/op
// is the whole process (client, proxy and target).
func BenchmarkProxyHTTP1(b *testing.B) { benchProxyHTTP1With(b, func(*Config) {}) }

// BenchmarkProxyHTTP1NetHTTP is BenchmarkProxyHTTP1 with the fast path off: net/http's
// server and the handler (the path before the fast one).
func BenchmarkProxyHTTP1NetHTTP(b *testing.B) {
	benchProxyHTTP1With(b, withH1Off)
}

// benchProxyHTTP1With runs BenchmarkProxyHTTP1 after set has adjusted the server.
func benchProxyHTTP1With(b *testing.B, set func(*Config)) {
	e := newEnv(b, set)
	target := rawTarget(b)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{target}}})
	raw := []byte("GET /bench HTTP/1.1\r\nHost: app.example.test\r\nUser-Agent: bench\r\n\r\n")
	b.ReportAllocs()
	b.SetParallelism(8)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", e.http)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		br := bufio.NewReaderSize(c, 4096)
		for pb.Next() {
			if _, err := c.Write(raw); err != nil {
				b.Error(err)
				return
			}
			if err := readRawResponse(br); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}

// readRawResponse reads one response with a Content-Length body, allocating nothing.
func readRawResponse(br *bufio.Reader) error {
	clen := 0
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if len(line) > 16 && strings.EqualFold(string(line[:15]), "content-length:") {
			for _, c := range line[15:] {
				if c >= '0' && c <= '9' {
					clen = clen*10 + int(c-'0')
				}
			}
		}
	}
	_, err := br.Discard(clen)
	return err
}

// rawTarget is a minimal keep-alive HTTP/1.1 target answering "hello" to every request;
// it allocates nothing per request (TestH1HotPathAllocs counts the whole process).
func rawTarget(b testing.TB) string {
	return rawTargetAnswering(b, []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"))
}

// rawTargetAnswering is rawTarget answering resp, a whole response, to every request head.
func rawTargetAnswering(b testing.TB, resp []byte) string {
	return rawServer(b, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					return
				}
				if len(line) <= 2 {
					break
				}
			}
			if _, err := c.Write(resp); err != nil {
				return
			}
		}
	})
}
