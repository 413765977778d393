// Command handshake measures new TLS connections per second against a loopback proxy: each of
// -c clients repeatedly dials, completes a full TLS handshake (no session cache, so no
// resumption and no 0-RTT), sends one HTTP/1.1 request with "Connection: close", reads the
// response and closes, until -d elapses.
//
// It exists because h2load resumes TLS sessions when it reconnects, and openssl s_time sends no
// SNI and runs one connection at a time. The client offers X25519 only, as the OpenSSL 3.0
// clients of the other scenarios do, so a Go server does not negotiate the costlier hybrid
// post-quantum key exchange that a default Go client would.
//
// Output (parsed by bench/compare):
//
//	connections: N ok, E failed in S s
//	rate: R conn/s
//	latency ms: p50 A p99 B mean C
//	tls: TLS 1.3 TLS_AES_128_GCM_SHA256 X25519   (what the first connection negotiated)
//	first error: ...   (only when E > 0)
//
// Only the standard library is used.
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/serve-zone/ingress/bench/internal/loadtool"
)

type config struct {
	addr, serverName, path string
	roots                  *x509.CertPool
	clients                int
	duration               time.Duration
}

// result is one client's tally; each client owns its own, so the hot loop shares nothing.
type result struct {
	latencies []time.Duration
	failed    int
	firstErr  error
	tls       string // what the first successful connection negotiated
}

func main() {
	var c config
	var caFile string
	flag.StringVar(&c.addr, "addr", "", "proxy TLS address host:port (loopback only)")
	flag.StringVar(&c.serverName, "sni", "bench.test", "server name (SNI and Host)")
	flag.StringVar(&c.path, "path", "/64", "request path")
	flag.StringVar(&caFile, "ca", "", "PEM certificate(s) to trust (the benchmark's self-signed leaf)")
	flag.IntVar(&c.clients, "c", 64, "concurrent clients")
	flag.DurationVar(&c.duration, "d", 10*time.Second, "measurement duration")
	flag.Parse()
	if err := c.check(caFile); err != nil {
		log.Fatal(err)
	}
	results, elapsed := run(c)
	report(os.Stdout, results, elapsed)
}

func (c *config) check(caFile string) error {
	if err := loadtool.CheckLoopback("handshake", c.addr); err != nil {
		return err
	}
	if c.clients < 1 || c.duration <= 0 {
		return errors.New("handshake: -c and -d must be positive")
	}
	roots, err := loadtool.ReadCA("handshake", caFile)
	c.roots = roots
	return err
}

func run(c config) ([]result, time.Duration) {
	tlsConf := &tls.Config{
		ServerName:       c.serverName,
		RootCAs:          c.roots,
		NextProtos:       []string{"http/1.1"},
		CurvePreferences: []tls.CurveID{tls.X25519},
		// ClientSessionCache stays nil: every connection is a full handshake.
	}
	req := []byte("GET " + c.path + " HTTP/1.1\r\nHost: " + c.serverName + "\r\nConnection: close\r\n\r\n")
	results := make([]result, c.clients)
	start := time.Now()
	deadline := start.Add(c.duration)
	var wg sync.WaitGroup
	for i := range results {
		r := &results[i]
		r.latencies = make([]time.Duration, 0, 4096)
		wg.Go(func() {
			for time.Now().Before(deadline) {
				t0 := time.Now()
				state, err := once(c.addr, tlsConf, req, deadline.Add(5*time.Second))
				if err != nil {
					r.failed++
					if r.firstErr == nil {
						r.firstErr = err
					}
					continue
				}
				r.latencies = append(r.latencies, time.Since(t0))
				if r.tls == "" {
					r.tls = tls.VersionName(state.Version) + " " + tls.CipherSuiteName(state.CipherSuite) + " " + state.CurveID.String()
				}
			}
		})
	}
	wg.Wait()
	return results, time.Since(start)
}

func once(addr string, conf *tls.Config, req []byte, deadline time.Time) (tls.ConnectionState, error) {
	var state tls.ConnectionState
	raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return state, err
	}
	defer raw.Close()
	_ = raw.SetDeadline(deadline)
	conn := tls.Client(raw, conf)
	if err := conn.Handshake(); err != nil {
		return state, err
	}
	state = conn.ConnectionState()
	if state.DidResume {
		return state, errors.New("handshake: session resumed")
	}
	if _, err := conn.Write(req); err != nil {
		return state, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return state, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("handshake: status %d", resp.StatusCode)
	}
	return state, err
}

func report(w io.Writer, results []result, elapsed time.Duration) {
	sum := loadtool.Summary{Elapsed: elapsed, RateUnit: "conn/s"}
	negotiated := ""
	for _, r := range results {
		if negotiated == "" {
			negotiated = r.tls
		}
		sum.Latencies = append(sum.Latencies, r.latencies...)
		sum.Failed += r.failed
		if sum.FirstErr == nil {
			sum.FirstErr = r.firstErr
		}
	}
	if negotiated != "" {
		sum.Extra = []string{"tls: " + negotiated}
	}
	loadtool.Write(w, sum)
}
