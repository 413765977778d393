package reliability

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testwait"
)

// TestMassWakeLosesNothing (issue 33, finding 1's third form): 4,000 sleeping plain
// connections whose clients all send a request at the same instant, twice (each time
// once every connection sleeps): every request is answered 200 with its own answer
// within the client's 15 s.
// Before the fix 0.4-4.3 % of them were never sent to the target: they reached the target
// engine more than a second after they arrived, past their first read deadline, and waited
// for an answer to a request never written until the client gave up.
func TestMassWakeLosesNothing(t *testing.T) {
	const n, rounds = 4000, 2
	if lim := noFileLimit(t); lim < 2*n+1000 {
		t.Fatalf("the descriptor limit is %d; this test needs %d", lim, 2*n+1000)
	}
	const host = "masswake.rel.test"
	// All from 127.0.0.1: the per-address budgets are lifted.
	p, _ := standalone(t, binarytest.TableJSON(t, 1, nil, binarytest.Route(host, "", false, echoBackend(t, "wake"))),
		"--max-conns-per-client", "0", "--max-requests-per-client", "0")
	dial := func() (net.Conn, error) { return net.DialTimeout("tcp", p.HTTP, waitLimit) }
	base := scrape(t, p.Admin)
	conns := openIdle(t, dial, host, n)
	defer closeAll(conns)
	for r := range rounds {
		// Asleep: no goroutine per connection any more (after the first round, once the
		// wait their clients' pace asks for is over: at most 10 s).
		testwait.UntilWhy(t, 4*waitLimit, "every connection asleep", func() (bool, string) {
			g := scrape(t, p.Admin).get("go_goroutines") - base.get("go_goroutines")
			return g <= 10, fmt.Sprintf("%+.0f goroutines", g)
		})
		var lost atomic.Int64
		var firstErr atomic.Pointer[error]
		took := make([]time.Duration, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Go(func() {
				<-start
				t0 := time.Now()
				_ = c.SetDeadline(t0.Add(15 * time.Second))
				if err := idleRequest(c, host, fmt.Sprintf("/wake/%d/%d", r, i)); err != nil {
					lost.Add(1)
					err = fmt.Errorf("connection %d: %w", i, err)
					firstErr.CompareAndSwap(nil, &err)
				}
				took[i] = time.Since(t0)
			})
		}
		close(start)
		wg.Wait()
		slices.Sort(took)
		t.Logf("round %d: %d of %d unanswered; p50 %v, p99 %v, max %v", r+1, lost.Load(), n,
			took[n/2].Round(time.Millisecond), took[n*99/100].Round(time.Millisecond), took[n-1].Round(time.Millisecond))
		if lost.Load() > 0 {
			t.Fatalf("round %d: %d of %d requests unanswered within 15 s (first: %v)", r+1, lost.Load(), n, *firstErr.Load())
		}
	}
}
