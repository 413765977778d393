package reliability

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testwait"
)

// attackFigures are what one hostile class did to the binary and its legitimate clients.
type attackFigures struct {
	quiet, during, after window
	base, peak, settled  usage
}

func (f attackFigures) String() string {
	return fmt.Sprintf("legitimate GETs: quiet %s | during %s | after %s\n\tbinary: baseline %s | peak %s | after %s",
		f.quiet, f.during, f.after, f.base, f.peak, f.settled)
}

// underAttack measures a legitimate client's latency and the binary's goroutines and
// memory before, during (dur) and after attack, which runs until its ctx ends and must
// have closed all it opened when it returns. It fails the test when a legitimate request
// fails or the binary does not come back to its baseline.
func underAttack(t *testing.T, p *proc, legitHost string, dur time.Duration, attack func(ctx context.Context)) attackFigures {
	t.Helper()
	var f attackFigures
	pctx, stopProbe := context.WithCancel(context.Background())
	defer stopProbe()
	pr := startProbe(pctx, t, p.HTTP, legitHost)
	samples := func(from time.Time, n int) time.Time {
		testwait.UntilWhy(t, 2*waitLimit, "legitimate requests sampled", func() (bool, string) {
			w := pr.window(from, time.Now())
			return w.n >= n, fmt.Sprintf("%d of %d", w.n, n)
		})
		return time.Now()
	}
	quietFrom := time.Now()
	quietTo := samples(quietFrom, 300)
	f.quiet = pr.window(quietFrom, quietTo)
	f.base = scrape(t, p.Admin).usage()

	actx, stopAttack := context.WithTimeout(context.Background(), dur)
	defer stopAttack()
	done := make(chan struct{})
	began := time.Now()
	go func() { defer close(done); attack(actx) }()
	f.peak = f.base
	for sampling := true; sampling; {
		select {
		case <-done:
			sampling = false
		case <-time.After(200 * time.Millisecond):
			if m, err := tryScrape(p.Admin); err == nil {
				u := m.usage()
				f.peak.goroutines = max(f.peak.goroutines, u.goroutines)
				f.peak.rss = max(f.peak.rss, u.rss)
				f.peak.heap = max(f.peak.heap, u.heap)
			}
		}
	}
	f.during = pr.window(began.Add(dur/5), time.Now()) // past the attack's ramp-up

	f.settled = settle(t, p.Admin, f.base, 10, 16<<20, 4*waitLimit)
	afterFrom := time.Now()
	f.after = pr.window(afterFrom, samples(afterFrom, 300))
	stopProbe()
	pr.wg.Wait()
	for name, w := range map[string]window{"during": f.during, "after": f.after} {
		if w.failed > 0 {
			t.Errorf("%d legitimate requests failed %s the attack: %v", w.failed, name, w.firstErr)
		}
	}
	return f
}

// hostileDuration is how long each attack runs (longer with -reliability.long): long
// enough for the slow attackers to meet their 2 s timeouts.
func hostileDuration() time.Duration {
	if *long {
		return 20 * time.Second
	}
	return 4 * time.Second
}

// crowd runs n attackers, each redialling whenever the binary cut its connection, until
// ctx ends; one attacker's connection lives in one call of each. It returns when all
// have stopped. lifetimes receives how long each connection lived before the binary cut
// it.
func crowd(ctx context.Context, addr string, n int, each func(ctx context.Context, c net.Conn) error) (cut int64, longest time.Duration) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var cuts atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread the dials over the first second.
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(i) * time.Second / time.Duration(n)):
			}
			for ctx.Err() == nil {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					continue
				}
				t0 := time.Now()
				stop := context.AfterFunc(ctx, func() { c.Close() })
				err = each(ctx, c)
				stop()
				c.Close()
				if ctx.Err() == nil && err != nil {
					cuts.Add(1)
					mu.Lock()
					longest = max(longest, time.Since(t0))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return cuts.Load(), longest
}

// trickle writes head, then one byte of more every interval until the binary closes the
// connection (its read side ends: an answer such as 408 and the close) or a write fails
// (the error returned) or ctx ends (nil).
func trickle(ctx context.Context, c net.Conn, head, more string, interval time.Duration) error {
	if _, err := io.WriteString(c, head); err != nil {
		return err
	}
	closed := make(chan struct{})
	go func() { defer close(closed); _, _ = io.Copy(io.Discard, c) }()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-closed:
			return io.EOF
		case <-time.After(interval):
		}
		if _, err := c.Write([]byte{more[i%len(more)]}); err != nil {
			return err
		}
	}
}

// TestHostileClients: slowloris on heads and on bodies (2,000 connections each),
// oversize heads and random Host floods leave legitimate requests unfailed, are cut
// within their timeouts, and leave the binary's goroutines and memory at their baseline.
func TestHostileClients(t *testing.T) {
	if lim := noFileLimit(t); lim < 5000 {
		t.Fatalf("the descriptor limit is %d; this test needs 5000", lim)
	}
	const legit = "legit.rel.test"
	backend := echoBackend(t, "legit")
	p, _ := standalone(t, binarytest.TableJSON(t, 1, nil, binarytest.Route(legit, "", false, backend), binarytest.Route("*.wild.rel.test", "", false, backend)),
		"--read-header-timeout", "2s", "--client-body-timeout", "2s", "--log-level", "info",
		// Attackers and legitimate client are all 127.0.0.1, with 2,000 connections and
		// requests at once: the timeouts are under test here, not the per-address
		// budgets (512 connections and requests by default: TestClientBudgetsEndToEnd).
		"--max-conns-per-client", "0", "--max-requests-per-client", "0")
	const cutBy = 2*time.Second + 3*time.Second // the timeout, and slack for a loaded box

	t.Run("slowloris on heads", func(t *testing.T) {
		var cut int64
		var longest time.Duration
		f := underAttack(t, p, legit, hostileDuration(), func(ctx context.Context) {
			cut, longest = crowd(ctx, p.HTTP, 2000, func(ctx context.Context, c net.Conn) error {
				return trickle(ctx, c, "GET / HTTP/1.1\r\nHost: legit.rel.test\r\nX-Slow: ", "abcdefgh", 500*time.Millisecond)
			})
		})
		t.Logf("slowloris heads: %d connections cut, the longest after %s\n\t%s", cut, longest.Round(time.Millisecond), f)
		if cut == 0 || longest > cutBy {
			t.Errorf("slow heads: %d cut, the longest lived %s, want all cut within %s", cut, longest, cutBy)
		}
	})

	t.Run("slowloris on bodies", func(t *testing.T) {
		var cut int64
		var longest time.Duration
		f := underAttack(t, p, legit, hostileDuration(), func(ctx context.Context) {
			var i atomic.Int64
			cut, longest = crowd(ctx, p.HTTP, 2000, func(ctx context.Context, c net.Conn) error {
				size := 100_000 // streams through net/http
				if i.Add(1)%2 == 0 {
					size = 4000 // fits the fast path's buffer
				}
				return trickle(ctx, c, fmt.Sprintf("POST /upload HTTP/1.1\r\nHost: legit.rel.test\r\nContent-Length: %d\r\n\r\n", size),
					"0123456789", 500*time.Millisecond)
			})
		})
		t.Logf("slowloris bodies: %d connections cut, the longest after %s\n\t%s", cut, longest.Round(time.Millisecond), f)
		if cut == 0 || longest > cutBy {
			t.Errorf("slow bodies: %d cut, the longest lived %s, want all cut within %s", cut, longest, cutBy)
		}
	})

	t.Run("oversize heads", func(t *testing.T) {
		var answered, other atomic.Int64
		big := "GET / HTTP/1.1\r\nHost: legit.rel.test\r\nX-Big: " + strings.Repeat("b", 100<<10) + "\r\n\r\n"
		f := underAttack(t, p, legit, hostileDuration(), func(ctx context.Context) {
			crowd(ctx, p.HTTP, 32, func(ctx context.Context, c net.Conn) error {
				_ = c.SetDeadline(time.Now().Add(waitLimit))
				_, _ = io.WriteString(c, big) // the binary may answer and close before all is sent
				b := make([]byte, 12)
				if _, err := io.ReadFull(c, b); err == nil && string(b) == "HTTP/1.1 431" {
					answered.Add(1)
				} else if ctx.Err() == nil {
					other.Add(1)
				}
				return nil
			})
		})
		t.Logf("oversize heads: %d answered 431, %d otherwise\n\t%s", answered.Load(), other.Load(), f)
		if answered.Load() == 0 || other.Load() > answered.Load()/100 {
			t.Errorf("oversize heads: %d answered 431, %d otherwise; want 431 for (nearly) all", answered.Load(), other.Load())
		}
	})

	t.Run("random Host flood", func(t *testing.T) {
		series := len(scrape(t, p.Admin))
		var sent atomic.Int64
		f := underAttack(t, p, legit, hostileDuration(), func(ctx context.Context) {
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := client(t)
					for i := 0; ctx.Err() == nil; i++ {
						host := fmt.Sprintf("r%d-%d.wild.rel.test", w, i)
						if i%2 == 1 {
							host = fmt.Sprintf("r%d-%d.unknown.rel.test", w, i)
						}
						if _, _, err := do(ctx, c, "GET", p.HTTP, host, "/"); err == nil {
							sent.Add(1)
						}
					}
				}()
			}
			wg.Wait()
		})
		after := len(scrape(t, p.Admin))
		entries := statEntries(t, p.Admin)
		t.Logf("random Host flood: %d requests; metric series %d -> %d; statistics entries %v\n\t%s", sent.Load(), series, after, entries, f)
		if after > series+20 {
			t.Errorf("metric series grew from %d to %d with random Hosts", series, after)
		}
		if len(entries) > 2 {
			t.Errorf("statistics hold %d hostnames %v, want at most the two routes'", len(entries), entries)
		}
	})
}

// statEntries lists today's statistics hostnames.
func statEntries(t *testing.T, admin string) []string {
	t.Helper()
	var out []string
	for _, h := range []string{"legit.rel.test", "*.wild.rel.test"} {
		if requestsToday(t, admin, h) > 0 {
			out = append(out, h)
		}
	}
	body := adminGet(t, admin, "/v1/traffic-statistics?fromDayUtc="+time.Now().UTC().Format(time.DateOnly)+
		"&toDayUtc="+time.Now().UTC().Format(time.DateOnly)+"&limit=1000")
	if n := strings.Count(body, `"hostname"`); n != len(out) {
		out = append(out, fmt.Sprintf("(%d entries in all)", n))
	}
	return out
}
