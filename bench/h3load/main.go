// Command h3load is a closed-loop HTTP/3 load generator for a loopback proxy: it opens -c QUIC
// connections (one http3.Transport each, every one dialled to -addr over its own UDP socket) and
// runs -m workers on each, every worker sending GET -path, reading the whole response and sending
// the next, until -d elapses. Non-200 answers and errors count as failures.
//
// It exists because Debian's h2load is built without QUIC. Each connection gets one request
// before the clock starts, so the QUIC handshakes are not part of the measurement. The client
// offers X25519 only, like bench/handshake and the OpenSSL 3.0 clients of the other scenarios.
//
// Output (parsed by bench/compare with the code that reads bench/handshake, so the first two
// lines keep bench/handshake's words although here they count requests, not connections):
//
//	connections: N ok, E failed in S s   (N and E are requests)
//	rate: R req/s
//	latency ms: p50 A p99 B mean C
//	quic: D dials, TLS 1.3 TLS_AES_128_GCM_SHA256 X25519   (D > -c means connections were lost)
//	first error: ...   (only when E > 0)
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/serve-zone/ingress/bench/internal/loadtool"
)

type config struct {
	addr, serverName, path string
	roots                  *x509.CertPool
	conns, streams         int // QUIC connections; concurrent requests on each
	duration               time.Duration
}

// result is one worker's tally; each worker owns its own, so the hot loop shares nothing.
type result struct {
	latencies []time.Duration
	failed    int
	firstErr  error
}

// summary is what run measured; dials counts every QUIC connection attempt (re-dials included).
type summary struct {
	results []result
	elapsed time.Duration
	dials   int64
	tls     string // what the first connection negotiated
}

func main() {
	var c config
	var caFile string
	flag.StringVar(&c.addr, "addr", "", "proxy UDP address host:port (loopback only)")
	flag.StringVar(&c.serverName, "sni", "bench.test", "server name (SNI and :authority)")
	flag.StringVar(&c.path, "path", "/64", "request path")
	flag.StringVar(&caFile, "ca", "", "PEM certificate(s) to trust (the benchmark's self-signed leaf)")
	flag.IntVar(&c.conns, "c", 8, "QUIC connections")
	flag.IntVar(&c.streams, "m", 8, "concurrent requests per connection")
	flag.DurationVar(&c.duration, "d", 10*time.Second, "measurement duration")
	flag.Parse()
	if err := c.check(caFile); err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	report(os.Stdout, run(ctx, c))
}

func (c *config) check(caFile string) error {
	if err := loadtool.CheckLoopback("h3load", c.addr); err != nil {
		return err
	}
	if c.conns < 1 || c.streams < 1 || c.duration <= 0 {
		return errors.New("h3load: -c, -m and -d must be positive")
	}
	roots, err := loadtool.ReadCA("h3load", caFile)
	c.roots = roots
	return err
}

// run measures until c.duration elapses or ctx ends; it returns once every worker has stopped
// and every connection is closed. A request in flight at the deadline may finish (it is
// counted) for up to 5 s more.
func run(ctx context.Context, c config) summary {
	var dials atomic.Int64
	var negotiated atomic.Pointer[string]
	transports := make([]*http3.Transport, c.conns)
	for i := range transports {
		transports[i] = &http3.Transport{
			TLSClientConfig: &tls.Config{
				ServerName:       c.serverName,
				RootCAs:          c.roots,
				CurvePreferences: []tls.CurveID{tls.X25519},
			},
			// Every transport dials the pinned address on its own UDP socket, whatever the URL's
			// host resolves to, so the requests are spread over c.conns connections.
			Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, qc *quic.Config) (*quic.Conn, error) {
				dials.Add(1)
				conn, err := quic.DialAddr(ctx, c.addr, tlsCfg, qc)
				if err == nil {
					s := conn.ConnectionState().TLS
					v := tls.VersionName(s.Version) + " " + tls.CipherSuiteName(s.CipherSuite) + " " + s.CurveID.String()
					negotiated.CompareAndSwap(nil, &v)
				}
				return conn, err
			},
		}
	}
	defer func() {
		for _, t := range transports {
			_ = t.Close()
		}
	}()
	url := "https://" + c.serverName + c.path
	results := make([]result, c.conns*c.streams)
	for i := range results {
		results[i].latencies = make([]time.Duration, 0, 4096)
	}

	// One request per connection before the clock starts: the handshakes are not measured. A
	// failure is the first worker's of that connection.
	var wg sync.WaitGroup
	for i, t := range transports {
		wg.Go(func() {
			r := &results[i*c.streams]
			if _, err := get(ctx, t, url, time.Now().Add(5*time.Second)); err != nil {
				r.failed++
				r.firstErr = err
			}
		})
	}
	wg.Wait()

	start := time.Now()
	deadline := start.Add(c.duration)
	for i := range results {
		t, r := transports[i/c.streams], &results[i]
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(deadline) {
				d, err := get(ctx, t, url, deadline.Add(5*time.Second))
				if err != nil {
					r.failed++
					if r.firstErr == nil {
						r.firstErr = err
					}
					continue
				}
				r.latencies = append(r.latencies, d)
			}
		})
	}
	wg.Wait()
	s := summary{results: results, elapsed: time.Since(start), dials: dials.Load()}
	if v := negotiated.Load(); v != nil {
		s.tls = *v
	}
	return s
}

// get sends one request on t and reads the whole answer; anything but a 200 is an error.
func get(ctx context.Context, t *http3.Transport, url string, deadline time.Time) (time.Duration, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	t0 := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := t.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("h3load: status %d", resp.StatusCode)
	}
	return time.Since(t0), err
}

func report(w io.Writer, s summary) {
	sum := loadtool.Summary{Elapsed: s.elapsed, RateUnit: "req/s", Extra: []string{fmt.Sprintf("quic: %d dials, %s", s.dials, s.tls)}}
	for _, r := range s.results {
		sum.Latencies = append(sum.Latencies, r.latencies...)
		sum.Failed += r.failed
		if sum.FirstErr == nil {
			sum.FirstErr = r.firstErr
		}
	}
	loadtool.Write(w, sum)
}
