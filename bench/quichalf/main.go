// Command quichalf measures what half-open QUIC handshakes from one address cost a server
// (issue 33, item 2): from -from it starts QUIC handshakes (-concurrency at once, each
// given up after -attempt) and drops what follows each ClientHello
// (internal/floodtest.RunHalfOpen), for -d, while it samples the server's open HTTP/3
// connections, goroutines and heap (-metrics, the ingress's /metrics) and RSS (-pid)
// every second; then it goes on sampling for -after once the flood stopped.
//
//	quichalf -addr 127.0.0.1:8443 -sni h3.test -pid 1234 -metrics http://127.0.0.1:9090/metrics
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/serve-zone/ingress/internal/floodtest"
)

func main() {
	var h floodtest.HalfOpen
	from := flag.String("from", "127.0.0.80", "the attacker's source address")
	d := flag.Duration("d", 30*time.Second, "how long the flood lasts")
	after := flag.Duration("after", 15*time.Second, "how long the server is sampled after the flood")
	pid := flag.Int("pid", 0, "the server's process (RSS)")
	metrics := flag.String("metrics", "", "the server's /metrics URL")
	flag.StringVar(&h.Addr, "addr", "127.0.0.1:8443", "the server's UDP address")
	flag.StringVar(&h.SNI, "sni", "h3.test", "the name asked for")
	flag.IntVar(&h.Concurrency, "concurrency", 128, "attempts in progress at once")
	flag.DurationVar(&h.Attempt, "attempt", 250*time.Millisecond, "each attempt is given up after this")
	flag.Parse()
	h.From = net.ParseIP(*from)
	ctx, cancel := context.WithTimeout(context.Background(), *d)
	defer cancel()
	w := floodtest.Watch(context.Background(), time.Second, floodtest.Target{MetricsURL: *metrics, PID: *pid})
	start := time.Now()
	done := make(chan floodtest.HalfOpenResult, 1)
	go func() {
		r, err := floodtest.RunHalfOpen(ctx, h)
		if err != nil {
			log.Fatal(err)
		}
		done <- r
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var res floodtest.HalfOpenResult
	flooding := true
	for t := range tick.C {
		if flooding {
			select {
			case res = <-done:
				flooding = false
				fmt.Printf("flood over: %d attempts, %d Retry packets, %d refused by the server\n", res.Attempts, res.Retries, res.Refused)
			default:
			}
		}
		u, _, _ := w.Peak(t.Add(-time.Second), t)
		fmt.Printf("%5.0fs  http3 open %s  %s\n", t.Sub(start).Seconds(), openH3(*metrics), u)
		if !flooding && t.Sub(start) > *d+*after {
			return
		}
	}
}

// openH3 is ingress_open_connections{protocol="http3"} and the handshake refusals.
func openH3(url string) string {
	if url == "" {
		return "–"
	}
	resp, err := http.Get(url)
	if err != nil {
		return "–"
	}
	defer resp.Body.Close()
	var open, hs, conns string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		v := l[strings.LastIndexByte(l, ' ')+1:]
		switch {
		case strings.HasPrefix(l, `ingress_open_connections{protocol="http3"}`):
			open = v
		case strings.HasPrefix(l, `ingress_refusals_total{kind="handshakes"}`):
			hs = v
		case strings.HasPrefix(l, `ingress_refusals_total{kind="connections"}`):
			conns = v
		}
	}
	n, _ := strconv.ParseFloat(hs, 64)
	return fmt.Sprintf("%s (refused: %.0f handshakes, %s connections)", open, n, conns)
}
