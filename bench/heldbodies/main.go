// Command heldbodies measures what clients holding request bodies cost a server (issue
// 33, item 3): from -addresses source addresses (127.0.X.Y from -from up), each opens
// -conns connections that send the start of request bodies (-body bytes of a
// -length one) and wait: -streams POSTs per connection over h2c (-h2), else one POST per
// HTTP/1.1 connection. Once every request is sent, refused or answered, it samples the
// server process's RSS (and, with -metrics, its heap and goroutines) for -hold and prints
// the peak. The server must route -host on -addr to a target that never answers (a
// body that streams then stays in flight); bench/README.md shows runs beside nginx.
//
//	heldbodies -addr 127.0.0.1:8080 -host held.test -h2 -addresses 30 -pid 1234
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"time"

	"github.com/serve-zone/ingress/internal/floodtest"
)

func main() {
	var (
		spec    floodtest.HoldSpec
		from    = flag.String("from", "127.0.1.1", "first source address; the next ones count up")
		n       = flag.Int("addresses", 30, "source addresses")
		pid     = flag.Int("pid", 0, "the server's process (its RSS is sampled); with -group, its process group")
		group   = flag.Bool("group", false, "sample -pid's whole process group (nginx's master and worker)")
		metrics = flag.String("metrics", "", "the server's /metrics URL (heap, goroutines), if any")
		settle  = flag.Duration("settle", 60*time.Second, "how long the requests may take to be sent")
		hold    = flag.Duration("hold", 10*time.Second, "how long the held bodies are sampled once sent")
	)
	flag.StringVar(&spec.Addr, "addr", "127.0.0.1:8080", "the server's plain listener")
	flag.StringVar(&spec.Host, "host", "held.test", "Host / :authority")
	flag.BoolVar(&spec.H2, "h2", false, "h2c with prior knowledge (else HTTP/1.1)")
	flag.IntVar(&spec.Conns, "conns", 4, "connections per address")
	flag.IntVar(&spec.Streams, "streams", 128, "requests per h2c connection")
	flag.IntVar(&spec.Body, "body", 65000, "body bytes sent of each request")
	flag.IntVar(&spec.Length, "length", 1<<20, "Content-Length of each request")
	flag.Parse()
	first := net.ParseIP(*from).To4()
	if first == nil {
		log.Fatalf("-from %q is no IPv4 address", *from)
	}
	for i := range *n {
		a := make(net.IP, 4)
		copy(a, first)
		v := int(a[2])<<8 | int(a[3]) + i
		a[2], a[3] = byte(v>>8), byte(v)
		spec.From = append(spec.From, a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := floodtest.Watch(ctx, 500*time.Millisecond, floodtest.Target{MetricsURL: *metrics, PID: *pid, Group: *group})
	base, _, _ := w.Peak(time.Now().Add(-time.Second), time.Now())
	start := time.Now()
	h := floodtest.Hold(ctx, spec)
	deadline := time.Now().Add(*settle)
	for !h.Settled() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	sent := time.Now()
	fmt.Printf("%s after %.1fs\n", h, sent.Sub(start).Seconds())
	time.Sleep(*hold)
	peak, samples, _ := w.Peak(sent, time.Now())
	fmt.Printf("before: %s\n", base)
	fmt.Printf("held for %s (%d samples): peak %s\n", *hold, samples, peak)
	fmt.Printf("after: %s\n", h)
	h.Close()
	cancel()
	w.Wait()
	os.Exit(0)
}
