package floodtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Series is a bystander's record: every request's start, latency and error.
type Series struct {
	mu      sync.Mutex
	samples []sample
	done    chan struct{}
}

type sample struct {
	at  time.Time
	lat time.Duration
	err error
}

// Probe calls do back to back, pausing pause between calls, until ctx ends, and records
// each call's latency and error. Wait returns once it stopped.
func Probe(ctx context.Context, pause time.Duration, do func(ctx context.Context) error) *Series {
	s := &Series{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for ctx.Err() == nil {
			t0 := time.Now()
			err := do(ctx)
			if ctx.Err() != nil {
				return // cut by the end of the probe, not by the server
			}
			s.mu.Lock()
			s.samples = append(s.samples, sample{t0, time.Since(t0), err})
			s.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
	}()
	return s
}

// Wait returns once the probe stopped (its ctx ended).
func (s *Series) Wait() { <-s.done }

// Stats summarise the requests of a window.
type Stats struct {
	N, Failed int
	P50, P99  time.Duration
	FirstErr  error
}

func (w Stats) String() string {
	s := fmt.Sprintf("%d requests, p50 %s, p99 %s", w.N, w.P50.Round(10*time.Microsecond), w.P99.Round(10*time.Microsecond))
	if w.Failed > 0 {
		s += fmt.Sprintf(", %d failed (first: %v)", w.Failed, w.FirstErr)
	}
	return s
}

// Window summarises the requests started in [from, to). Failed requests count in Failed,
// not in the percentiles (nearest rank).
func (s *Series) Window(from, to time.Time) Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var w Stats
	var lats []time.Duration
	for _, x := range s.samples {
		if x.at.Before(from) || !x.at.Before(to) {
			continue
		}
		w.N++
		if x.err != nil {
			w.Failed++
			if w.FirstErr == nil {
				w.FirstErr = x.err
			}
			continue
		}
		lats = append(lats, x.lat)
	}
	w.P50, w.P99 = Percentile(lats, 50), Percentile(lats, 99)
	return w
}

// Percentile is the nearest-rank p-th percentile of d (0 when empty); d is sorted in place.
func Percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	r := (p*len(d) + 99) / 100 // ceil(p/100 * n)
	return d[min(max(r, 1), len(d))-1]
}

// Bystander is a Probe body: one GET of url with Host host over rt, which must be
// answered 200 over HTTP/proto, its body read whole.
func Bystander(rt http.RoundTripper, url, host string, proto int) func(ctx context.Context) error {
	cl := &http.Client{Transport: rt, Timeout: 5 * time.Second}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Host = host
		resp, err := cl.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != proto {
			return fmt.Errorf("%s %s", resp.Proto, resp.Status)
		}
		return nil
	}
}
