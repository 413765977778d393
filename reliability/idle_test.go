package reliability

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
)

// idleConns is how many idle keep-alive connections TestIdleKeepAliveMemory holds open.
const idleConns = 10_000

// idleBudget is what idleConns idle connections may hold of the binary's Go memory in all.
const idleBudget = 40 << 20

// openIdle opens n connections to addr, sends one request for host on each and reads its
// answer, and returns them open and idle. It fails the test on any error.
func openIdle(t *testing.T, addr, host string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := range conns {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs <- func() error {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					return err
				}
				conns[i] = c
				_ = c.SetDeadline(time.Now().Add(4 * waitLimit))
				if _, err := fmt.Fprintf(c, "GET /idle/%d HTTP/1.1\r\nHost: %s\r\n\r\n", i, host); err != nil {
					return err
				}
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					return fmt.Errorf("connection %d: %w", i, err)
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != 200 {
					err = fmt.Errorf("connection %d: status %d", i, resp.StatusCode)
				}
				_ = c.SetDeadline(time.Time{})
				return err
			}()
		}()
	}
	wg.Wait()
	close(errs)
	var err error
	for e := range errs {
		if e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		closeAll(conns)
		t.Fatalf("opening %d idle connections: %v", n, err)
	}
	return conns
}

func closeAll(conns []net.Conn) {
	var wg sync.WaitGroup
	for _, c := range conns {
		if c != nil {
			wg.Add(1)
			go func() { defer wg.Done(); c.Close() }()
		}
	}
	wg.Wait()
}

// TestIdleKeepAliveMemory: 10,000 keep-alive connections that each served one request and
// now wait for the next hold under 40 MiB of the binary's Go memory (heap and stacks) in
// all, a request on one of them is still served, and goroutines and heap return to the
// baseline once they close.
func TestIdleKeepAliveMemory(t *testing.T) {
	if lim := noFileLimit(t); lim < idleConns+1000 {
		t.Fatalf("the descriptor limit is %d; this test needs %d in this process and in the binary (raise the hard limit: ulimit -Hn)", lim, idleConns+1000)
	}
	const host = "idle.rel.test"
	p, _ := standalone(t, binarytest.TableJSON(t, 1, nil, binarytest.Route(host, "", false, echoBackend(t, "idle"))))
	warm := openIdle(t, p.HTTP, host, 100) // the pools and the runtime warmed up
	closeAll(warm)
	eventually(t, waitLimit, "warm-up connections closed", func() (bool, string) {
		n := scrape(t, p.Admin).sum("ingress_open_connections")
		return n == 0, fmt.Sprintf("%v open", n)
	})
	base := scrape(t, p.Admin)
	conns := openIdle(t, p.HTTP, host, idleConns)
	eventually(t, waitLimit, "every connection idle", func() (bool, string) {
		m := scrape(t, p.Admin)
		return m.sum("ingress_open_connections") == idleConns && m.get("ingress_requests_in_flight") == 0,
			fmt.Sprintf("%v open", m.sum("ingress_open_connections"))
	})
	// Idle connections give their read buffers back after a while and wait on small
	// goroutines (proxy/h1idle.go); the runtime frees the buffers at its next collections.
	// What the connections hold is measured as the Go memory of the binary (allocated
	// heap objects and goroutine stacks) above the baseline, its lowest over polls made
	// while /metrics scrapes keep the allocator busy enough for collections to happen: the
	// lowest is right after a collection, when the heap holds what is alive and little
	// garbage. RSS is reported too: it keeps the pages of the burst that opened the
	// connections, and the collector's headroom, for a while.
	gc0 := base.get("go_gc_duration_seconds_count")
	goMem := func(m metrics) float64 {
		return m.get("go_memstats_heap_alloc_bytes") + m.get("go_memstats_stack_inuse_bytes") -
			base.get("go_memstats_heap_alloc_bytes") - base.get("go_memstats_stack_inuse_bytes")
	}
	var held metrics
	lowest := -1.0
	eventually(t, 6*waitLimit, "the idle connections' memory under budget", func() (bool, string) {
		for range 20 {
			scrape(t, p.Admin) // about 100 KB of garbage each
		}
		m := scrape(t, p.Admin)
		if g := goMem(m); lowest < 0 || g < lowest {
			lowest, held = g, m
		}
		gcs := m.get("go_gc_duration_seconds_count") - gc0
		return lowest < idleBudget && gcs >= 2, fmt.Sprintf("lowest heap objects+stacks +%.1f MiB after %v collections", lowest/(1<<20), gcs)
	})
	rss := held.get("process_resident_memory_bytes") - base.get("process_resident_memory_bytes")
	t.Logf("%d idle connections: heap+stacks +%.1f MiB (%.0f B each: heap +%.1f MiB, stacks +%.1f MiB), RSS +%.1f MiB, goroutines +%.0f",
		idleConns, lowest/(1<<20), lowest/idleConns,
		(held.get("go_memstats_heap_alloc_bytes")-base.get("go_memstats_heap_alloc_bytes"))/(1<<20),
		(held.get("go_memstats_stack_inuse_bytes")-base.get("go_memstats_stack_inuse_bytes"))/(1<<20),
		rss/(1<<20), held.get("go_goroutines")-base.get("go_goroutines"))
	// Still serving: a request on one of them is answered.
	c := conns[idleConns/2]
	fmt.Fprintf(c, "GET /again HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	_ = c.SetReadDeadline(time.Now().Add(waitLimit))
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a request on an idle connection: %v %v", resp, err)
	}
	closeAll(conns)
	after := settle(t, p.Admin, base.usage(), 8, 8<<20, 2*waitLimit)
	t.Logf("after closing them: %s (baseline %s)", after, base.usage())
}
