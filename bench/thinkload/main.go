// Command thinkload loads a loopback proxy the way an edge's clients do: -n keep-alive
// connections from -sources client addresses (127.0.1.1, 127.0.1.2, …), each sending GET
// -path, reading the whole answer, waiting a random 0.5–1.5 × -think and sending the next,
// over plain HTTP/1.1, HTTP/1.1 over TLS, HTTP/2 over TLS (one stream at a time) or HTTP/3.
// Neither a few hot connections (wrk, h2load) nor idle ones (bench/idleconns): the traffic
// in between, where a connection waits a fraction of a second to a few seconds between
// requests (issue 32).
//
// Every connection is opened and answered once before the clock starts (-open-conc at a
// time), then runs for -warmup, then -d is measured: requests that start inside the window
// count, with their latency from the write to the answer's last byte. With -pids, the CPU
// time (user+system) those processes spent inside the window and their RSS at its end are
// read from /proc: the proxy's cost per request, without the connections' opening.
//
// Output (the first three lines in the format bench/compare's parse_hs reads, counting
// requests):
//
//	connections: N ok, E failed in S s
//	rate: R req/s
//	latency ms: p50 A p99 B mean C
//	latency ms tail: p90 A p99.9 B max C
//	open: N connections from K addresses (F failed to open), reconnects X
//	proxy: CPU S s (P % of one core), Q req per CPU-second, RSS M MiB
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
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/serve-zone/ingress/bench/internal/loadtool"
)

type config struct {
	addr, host, path, proto string
	roots                   *x509.CertPool
	conns, sources, openAt  int
	think, warmup, duration time.Duration
	timeout                 time.Duration
	pids                    []int
}

// client is one keep-alive connection of a kind: get sends one request and reads its
// whole answer (an error for anything but a 200).
type client interface {
	get() error
	Close() error
}

// result is one connection's tally; each connection owns its own.
type result struct {
	latencies []time.Duration
	failed    int
	firstErr  error
}

func main() {
	var c config
	var caFile, pids string
	flag.StringVar(&c.addr, "addr", "", "proxy address host:port (loopback only; UDP for -proto h3)")
	flag.StringVar(&c.host, "host", "bench.test", "Host, :authority and SNI")
	flag.StringVar(&c.path, "path", "/1k", "request path")
	flag.StringVar(&c.proto, "proto", "h1", "h1 (plain HTTP/1.1), tls (HTTP/1.1 over TLS), h2 (HTTP/2 over TLS) or h3 (HTTP/3)")
	flag.StringVar(&caFile, "ca", "", "PEM certificate(s) to trust (TLS kinds)")
	flag.IntVar(&c.conns, "n", 1000, "connections")
	flag.IntVar(&c.sources, "sources", 250, "client addresses the connections come from (127.0.1.1 on)")
	flag.IntVar(&c.openAt, "open-conc", 64, "connections opened at a time before the clock starts")
	flag.DurationVar(&c.think, "think", 250*time.Millisecond, "mean wait between an answer and the next request (uniform over 0.5-1.5x)")
	flag.DurationVar(&c.warmup, "warmup", 3*time.Second, "run before the measurement starts")
	flag.DurationVar(&c.duration, "d", 10*time.Second, "measurement")
	flag.DurationVar(&c.timeout, "timeout", 15*time.Second, "a request unanswered this long fails")
	flag.StringVar(&pids, "pids", "", "comma-separated PIDs whose CPU and RSS are read over the measurement (the proxy's processes)")
	flag.Parse()
	if err := c.check(caFile, pids); err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	s, err := run(ctx, c)
	if err != nil {
		log.Fatal(err)
	}
	s.write(os.Stdout)
}

func (c *config) check(caFile, pids string) error {
	if err := loadtool.CheckLoopback("thinkload", c.addr); err != nil {
		return err
	}
	switch c.proto {
	case "h1", "tls", "h2", "h3":
	default:
		return fmt.Errorf("thinkload: unknown -proto %q", c.proto)
	}
	if c.conns < 1 || c.sources < 1 || c.sources > 250*250 || c.openAt < 1 || c.think <= 0 || c.duration <= 0 || c.warmup < 0 {
		return errors.New("thinkload: -n, -sources (at most 62,500), -open-conc, -think and -d must be positive")
	}
	for _, f := range strings.FieldsFunc(pids, func(r rune) bool { return r == ',' }) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return fmt.Errorf("thinkload: bad PID %q in -pids", f)
		}
		c.pids = append(c.pids, pid)
	}
	if c.proto != "h1" {
		if caFile == "" {
			return errors.New("thinkload: -ca is needed for the TLS kinds")
		}
		roots, err := loadtool.ReadCA("thinkload", caFile)
		c.roots = roots
		return err
	}
	return nil
}

// source is the i-th client address: 127.0.1.1, …, 127.0.1.250, 127.0.2.1, …
func source(i, sources int) net.IP {
	i %= sources
	return net.IPv4(127, 0, byte(1+i/250), byte(1+i%250)).To4()
}

// dial opens connection i of c's kind from its client address and gets its first answer.
func (c *config) dial(ctx context.Context, i int) (client, error) {
	src := source(i, c.sources)
	switch c.proto {
	case "h3":
		return dialH3(ctx, c, src)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: c.timeout}
	nc, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, err
	}
	var cl client
	switch c.proto {
	case "h1":
		cl = newH1(nc, c)
	case "tls":
		tc := tls.Client(nc, c.tlsConfig("http/1.1"))
		cl = newH1(tc, c)
	case "h2":
		tc := tls.Client(nc, c.tlsConfig("h2"))
		_ = tc.SetDeadline(time.Now().Add(c.timeout))
		if err := tc.Handshake(); err != nil {
			_ = nc.Close()
			return nil, err
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
			_ = nc.Close()
			return nil, fmt.Errorf("thinkload: ALPN %q, want h2", p)
		}
		h, err := newH2(tc, c)
		if err != nil {
			_ = nc.Close()
			return nil, err
		}
		cl = h
	}
	if err := cl.get(); err != nil && err != errClosed {
		_ = cl.Close()
		return nil, err
	}
	return cl, nil
}

func (c *config) tlsConfig(proto string) *tls.Config {
	return &tls.Config{ServerName: c.host, RootCAs: c.roots, NextProtos: []string{proto},
		CurvePreferences: []tls.CurveID{tls.X25519}}
}

// summary is what run measured.
type summary struct {
	results    []result
	window     time.Duration
	open, lost int // connections opened; failed to open
	sources    int
	reconnects int64
	cpu        time.Duration // the -pids' CPU inside the window
	rssKiB     int64         // their RSS at the window's end
	pids       bool
}

// run opens the connections, warms up, measures and closes everything.
func run(ctx context.Context, c config) (summary, error) {
	clients := make([]client, c.conns)
	var lost atomic.Int64
	var firstOpenErr atomic.Pointer[error]
	sem := make(chan struct{}, c.openAt)
	var wg sync.WaitGroup
	for i := range clients {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cl, err := c.dial(ctx, i)
			if err != nil {
				lost.Add(1)
				firstOpenErr.CompareAndSwap(nil, &err)
				return
			}
			clients[i] = cl
		})
	}
	wg.Wait()
	s := summary{sources: min(c.sources, c.conns), lost: int(lost.Load()), pids: len(c.pids) > 0}
	s.open = c.conns - s.lost
	if s.open == 0 {
		return s, fmt.Errorf("thinkload: no connection opened: %v", *firstOpenErr.Load())
	}

	start := time.Now()
	w0 := start.Add(c.warmup)
	w1 := w0.Add(c.duration)
	var reconnects atomic.Int64
	s.results = make([]result, c.conns)
	for i, cl := range clients {
		if cl == nil {
			continue
		}
		wg.Go(func() {
			r := &s.results[i]
			rng := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
			// The first request of the loop at a random point of one think time, so that
			// the connections do not move in step.
			wait := time.Duration(rng.Int64N(int64(c.think)))
			for {
				if !sleepCtx(ctx, wait) {
					break
				}
				t0 := time.Now()
				if !t0.Before(w1) {
					break
				}
				err := cl.get()
				t1 := time.Now()
				reopen := err != nil
				if err == errClosed {
					err = nil
				}
				if !t0.Before(w0) {
					if err != nil {
						r.failed++
						if r.firstErr == nil {
							r.firstErr = err
						}
					} else {
						r.latencies = append(r.latencies, t1.Sub(t0))
					}
				}
				if reopen {
					// A connection the proxy ended (or that failed) is opened again,
					// as a browser would.
					_ = cl.Close()
					if cl, err = c.dial(ctx, i); err != nil {
						cl = nil
						break
					}
					reconnects.Add(1)
				}
				wait = c.think/2 + time.Duration(rng.Int64N(int64(c.think)))
			}
			if cl != nil {
				_ = cl.Close()
			}
			clients[i] = nil
		})
	}
	var cpu0 time.Duration
	if s.pids {
		if !sleepCtx(ctx, time.Until(w0)) {
			return s, ctx.Err()
		}
		cpu0 = cpuOf(c.pids)
		if !sleepCtx(ctx, time.Until(w1)) {
			return s, ctx.Err()
		}
		s.cpu = cpuOf(c.pids) - cpu0
		s.rssKiB = rssOf(c.pids)
	}
	wg.Wait()
	s.window = c.duration
	s.reconnects = reconnects.Load()
	return s, ctx.Err()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s summary) write(w io.Writer) {
	var all []time.Duration
	failed := 0
	var first error
	for _, r := range s.results {
		all = append(all, r.latencies...)
		failed += r.failed
		if first == nil {
			first = r.firstErr
		}
	}
	slices.Sort(all)
	sum := loadtool.Summary{Latencies: all, Failed: failed, Elapsed: s.window, RateUnit: "req/s"}
	sum.Extra = append(sum.Extra,
		fmt.Sprintf("latency ms tail: p90 %.3f p99.9 %.3f max %.3f", ms(loadtool.Percentile(all, 0.90)),
			ms(loadtool.Percentile(all, 0.999)), ms(loadtool.Percentile(all, 1))),
		fmt.Sprintf("open: %d connections from %d addresses (%d failed to open), reconnects %d", s.open, s.sources, s.lost, s.reconnects))
	if s.pids {
		perCPU := 0.0
		if s.cpu > 0 {
			perCPU = float64(len(all)) / s.cpu.Seconds()
		}
		sum.Extra = append(sum.Extra, fmt.Sprintf("proxy: CPU %.2f s (%.0f %% of one core), %.0f req per CPU-second, RSS %.1f MiB",
			s.cpu.Seconds(), 100*s.cpu.Seconds()/s.window.Seconds(), perCPU, float64(s.rssKiB)/1024))
	}
	sum.FirstErr = first
	loadtool.Write(w, sum)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
