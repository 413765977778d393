package reliability

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// probe is a legitimate client: one keep-alive HTTP/1.1 connection sending GET in a loop
// (a request every 2 ms at most), recording every latency and failure with its time.
type probe struct {
	mu      sync.Mutex
	samples []sample
	wg      sync.WaitGroup
}

type sample struct {
	at  time.Time
	lat time.Duration
	err error
}

func startProbe(ctx context.Context, t *testing.T, addr, host string) *probe {
	pr := &probe{}
	c := &http.Client{Timeout: waitLimit, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	t.Cleanup(c.CloseIdleConnections)
	pr.wg.Add(1)
	go func() {
		defer pr.wg.Done()
		for ctx.Err() == nil {
			t0 := time.Now()
			code, _, err := do(ctx, c, http.MethodGet, addr, host, "/probe")
			if ctx.Err() != nil {
				return
			}
			if err == nil && code != 200 {
				err = fmt.Errorf("status %d", code)
			}
			pr.mu.Lock()
			pr.samples = append(pr.samples, sample{t0, time.Since(t0), err})
			pr.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return pr
}

// window summarises the samples taken in [from, to).
type window struct {
	n, failed int
	p50, p99  time.Duration
	firstErr  error
}

func (w window) String() string {
	return fmt.Sprintf("%d requests, %d failed, p50 %s, p99 %s", w.n, w.failed, w.p50.Round(10*time.Microsecond), w.p99.Round(10*time.Microsecond))
}

func (pr *probe) window(from, to time.Time) window {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	var w window
	var lats []time.Duration
	for _, s := range pr.samples {
		if s.at.Before(from) || !s.at.Before(to) {
			continue
		}
		w.n++
		if s.err != nil {
			w.failed++
			if w.firstErr == nil {
				w.firstErr = s.err
			}
			continue
		}
		lats = append(lats, s.lat)
	}
	if len(lats) > 0 {
		slices.Sort(lats)
		w.p50 = lats[len(lats)/2]
		w.p99 = lats[min(len(lats)-1, len(lats)*99/100)]
	}
	return w
}
