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
	"github.com/serve-zone/ingress/internal/testwait"
)

// idleConns is how many idle keep-alive connections TestIdleKeepAliveMemory holds open.
const idleConns = 10_000

// idleBudget is what idleConns idle connections may hold of the binary's Go memory
// (heap objects and goroutine stacks) in all: about 1.3 KiB each is what they hold
// parked (proxy/h1idle.go), 2 KiB the bound.
const idleBudget = 20 << 20

// idleRSSBudget is what they may add to the binary's resident memory in all (issue 16:
// under 40 MiB), once the memory of the burst that opened them was returned
// (proxy.Config.ReleaseIdleMemory).
const idleRSSBudget = 40 << 20

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
// now wait for the next hold under 20 MiB of the binary's Go memory (heap and stacks) and
// add under 40 MiB to its resident memory in all, with no goroutine each; a request on
// one of them is still served, and goroutines and heap return to the baseline once they
// close.
func TestIdleKeepAliveMemory(t *testing.T) {
	if lim := noFileLimit(t); lim < idleConns+1000 {
		t.Fatalf("the descriptor limit is %d; this test needs %d in this process and in the binary (raise the hard limit: ulimit -Hn)", lim, idleConns+1000)
	}
	const host = "idle.rel.test"
	// All from 127.0.0.1: lift the per-address connection budget (512 by default).
	p, _ := standalone(t, binarytest.TableJSON(t, 1, nil, binarytest.Route(host, "", false, echoBackend(t, "idle"))), "--max-conns-per-client", "0")
	warm := openIdle(t, p.HTTP, host, 100) // the pools and the runtime warmed up
	closeAll(warm)
	testwait.UntilWhy(t, waitLimit, "warm-up connections closed", func() (bool, string) {
		n := scrape(t, p.Admin).sum("ingress_open_connections")
		return n == 0, fmt.Sprintf("%v open", n)
	})
	base := scrape(t, p.Admin)
	from := p.LineCount()
	conns := openIdle(t, p.HTTP, host, idleConns)
	testwait.UntilWhy(t, waitLimit, "every connection idle", func() (bool, string) {
		m := scrape(t, p.Admin)
		return m.sum("ingress_open_connections") == idleConns && m.get("ingress_requests_in_flight") == 0,
			fmt.Sprintf("%v open", m.sum("ingress_open_connections"))
	})
	// Idle connections give their read buffers back after a while and wait without a
	// goroutine (proxy/h1idle.go). Once the wave of parks is over the binary collects
	// twice and returns free memory to the OS (proxy.Config.ReleaseIdleMemory), and logs
	// it: measured right after that line, Go memory (allocated heap objects and goroutine
	// stacks) is what is alive, and RSS no longer holds the pages of the burst that
	// opened the connections (their 8 KiB read buffers and grown stacks, ~100 MiB). A
	// wave interrupted by a pause releases early and again a minute later: the line
	// that counts is the one with (nearly) every connection parked.
	released := p.WaitLineFrom(from, 2*time.Minute, func(m map[string]any) bool {
		n, _ := m["parked"].(float64)
		return m["msg"] == "returned idle connections' memory to the OS" && n >= idleConns*99/100
	})
	held := scrape(t, p.Admin)
	goMem := held.get("go_memstats_heap_alloc_bytes") + held.get("go_memstats_stack_inuse_bytes") -
		base.get("go_memstats_heap_alloc_bytes") - base.get("go_memstats_stack_inuse_bytes")
	rss := held.get("process_resident_memory_bytes") - base.get("process_resident_memory_bytes")
	var goroutines float64
	testwait.UntilWhy(t, waitLimit, "no goroutine per idle connection", func() (bool, string) {
		goroutines = scrape(t, p.Admin).get("go_goroutines") - base.get("go_goroutines")
		return goroutines <= 10, fmt.Sprintf("%+.0f goroutines", goroutines)
	})
	t.Logf("%d idle connections: heap+stacks +%.1f MiB (%.0f B each: heap +%.1f MiB, stacks +%.1f MiB), RSS +%.1f MiB (%.0f B each; %.1f MiB in all), goroutines %+.0f; the release took %v",
		idleConns, goMem/(1<<20), goMem/idleConns,
		(held.get("go_memstats_heap_alloc_bytes")-base.get("go_memstats_heap_alloc_bytes"))/(1<<20),
		(held.get("go_memstats_stack_inuse_bytes")-base.get("go_memstats_stack_inuse_bytes"))/(1<<20),
		rss/(1<<20), rss/idleConns, held.get("process_resident_memory_bytes")/(1<<20), goroutines, released["took"])
	if goMem >= idleBudget {
		t.Errorf("%d idle connections hold %.1f MiB of heap and stacks, want under %d MiB", idleConns, goMem/(1<<20), idleBudget>>20)
	}
	if rss >= idleRSSBudget {
		t.Errorf("%d idle connections add %.1f MiB to RSS, want under %d MiB", idleConns, rss/(1<<20), idleRSSBudget>>20)
	}
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
