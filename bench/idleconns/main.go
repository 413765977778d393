// Command idleconns opens many HTTP/1.1 keep-alive connections to a loopback proxy, sends one
// request on each, reads the response, and then holds every connection open and idle so the
// harness (bench/compare) can read the proxy's memory with that many idle clients.
//
// It prints "ready N" on stdout once N connections have completed their request, then holds
// them until SIGTERM or SIGINT arrives or -hold elapses, whichever comes first. It never holds
// longer than -hold, so a harness that dies cannot leave it running for long.
//
// Only the standard library is used.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/serve-zone/ingress/bench/internal/loadtool"
)

func main() {
	addr := flag.String("addr", "", "proxy address host:port (loopback only)")
	host := flag.String("host", "bench.test", "Host header")
	path := flag.String("path", "/64", "request path")
	n := flag.Int("n", 1000, "number of connections")
	hold := flag.Duration("hold", 60*time.Second, "longest time to hold the connections")
	flag.Parse()
	conns, err := open(*addr, *host, *path, *n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("ready %d\n", len(conns))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *hold)
	defer cancel()
	<-ctx.Done()
}

func open(addr, host, path string, n int) ([]net.Conn, error) {
	if err := loadtool.CheckLoopback("idleconns", addr); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, errors.New("idleconns: -n must be at least 1")
	}
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
	conns := make([]net.Conn, n)
	errs := make([]error, n)
	// A bounded number of dialers keeps the open rate gentle and the helper's own CPU low.
	const workers = 16
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				conns[i], errs[i] = openOne(addr, req)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	kept := conns[:0]
	for _, c := range conns {
		if c != nil {
			kept = append(kept, c)
		}
	}
	return kept, errors.Join(errs...)
}

func openOne(addr string, req []byte) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(req); err != nil {
		_ = c.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("idleconns: status %d", resp.StatusCode)
	}
	if err == nil && resp.Close {
		err = errors.New("idleconns: the proxy closed the connection after one request")
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}
