package floodtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/serve-zone/ingress/internal/testwait"
)

// calmServer is a raw h2c server that ends every connection with GOAWAY
// ENHANCE_YOUR_CALM after perConn streams and, once it has done so refuseAfter times,
// closes every new connection before its SETTINGS (a penalised address).
type calmServer struct {
	ln          net.Listener
	perConn     int
	refuseAfter int64
	calms       atomic.Int64
	headers     atomic.Int64
	wg          sync.WaitGroup
}

func startCalmServer(t *testing.T, perConn int, refuseAfter int64) *calmServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &calmServer{ln: ln, perConn: perConn, refuseAfter: refuseAfter}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *calmServer) serve(c net.Conn) {
	defer c.Close()
	if s.calms.Load() >= s.refuseAfter {
		return
	}
	if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	if fr.WriteSettings() != nil {
		return
	}
	for n := 0; ; {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		if _, ok := f.(*http2.HeadersFrame); ok {
			s.headers.Add(1)
			if n++; n == s.perConn {
				s.calms.Add(1)
				_ = fr.WriteGoAway(f.Header().StreamID, http2.ErrCodeEnhanceYourCalm, nil)
				// As real servers do: stop writing, read until the client closes (a
				// close with unread bytes would reset the connection, and the client
				// could lose the GOAWAY).
				_ = c.(*net.TCPConn).CloseWrite()
				_, _ = io.Copy(io.Discard, c)
				return
			}
		}
	}
}

// TestRunSeesTheVerdictAndTheEnd: a server that ends every pre-opened connection for
// abuse and then refuses the address leaves the attacker without a served connection,
// and Run says when, after the verdict; the pre-opened connections all opened first.
func TestRunSeesTheVerdictAndTheEnd(t *testing.T) {
	const conns = 8
	s := startCalmServer(t, 50, 1)
	res, err := Run(context.Background(), Attack{Addr: s.ln.Addr().String(), From: net.IPv4(127, 0, 0, 1), Conns: conns,
		OpenLimit: 5 * time.Second, Host: "a.test", Path: "/", Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Opened != conns {
		t.Errorf("opened %d, want %d", res.Opened, conns)
	}
	if res.Calm != conns || res.Served != conns {
		t.Errorf("served %d, ended calm %d; want %d each", res.Served, res.Calm, conns)
	}
	if read := s.headers.Load(); read != conns*50 || res.Streams < read {
		t.Errorf("%d streams written, server read %d HEADERS; want %d read and at least as many written", res.Streams, read, conns*50)
	}
	if res.Verdict.IsZero() || res.FirstCode != http2.ErrCodeEnhanceYourCalm.String() {
		t.Fatalf("verdict %v, first GOAWAY code %q", res.Verdict, res.FirstCode)
	}
	if d, ok := res.GoneAfter(res.Verdict); !ok || res.Verdict.Add(d).After(res.End) || res.PreopenedGone.IsZero() {
		t.Errorf("verdict %v, gone %v after it (%v), pre-opened gone at %v, end %v; empty spans %v", res.Verdict, d, ok, res.PreopenedGone, res.End, res.Empty)
	}
	if len(res.Alive) == 0 || res.Alive[len(res.Alive)-1].Alive != 0 {
		t.Errorf("alive timeline %v; want it to end at 0", res.Alive)
	}
}

// TestRunKeepsFloodingAServerThatLetsItBe: without a verdict every pre-opened connection
// lives to the end of the flood: no span without one, and PreopenedGone stays unset.
func TestRunKeepsFloodingAServerThatLetsItBe(t *testing.T) {
	s := startCalmServer(t, 1<<30, 1<<30)
	res, err := Run(context.Background(), Attack{Addr: s.ln.Addr().String(), Conns: 4,
		OpenLimit: 5 * time.Second, Host: "a.test", Path: "/", Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Opened != 4 || res.Streams == 0 || !res.Verdict.IsZero() || len(res.Empty) != 0 || !res.PreopenedGone.IsZero() || res.Dials != 4 {
		t.Errorf("%+v; want 4 opened and dialled, streams, no verdict, no zero, pre-opened alive to the end", res)
	}
}

func TestPercentile(t *testing.T) {
	d := []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	if p := Percentile(d, 50); p != 5 {
		t.Errorf("p50 %d, want 5", p)
	}
	if p := Percentile(d, 99); p != 10 {
		t.Errorf("p99 %d, want 10", p)
	}
	if p := Percentile(nil, 99); p != 0 {
		t.Errorf("p99 of nothing %d", p)
	}
}

func TestGoneAfter(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r := Result{Empty: []Span{{From: at(100), To: at(200)}, {From: at(500)}}}
	for _, tc := range []struct {
		v    int
		want time.Duration
		ok   bool
	}{
		{50, 50 * time.Millisecond, true},   // the first span begins 50 ms later
		{150, 0, true},                      // inside a span: gone already
		{200, 300 * time.Millisecond, true}, // served again at 200, gone at 500
		{700, 0, true},                      // inside the last span, which lasts
	} {
		if d, ok := r.GoneAfter(at(tc.v)); d != tc.want || ok != tc.ok {
			t.Errorf("GoneAfter(+%d ms) = %v, %v; want %v, %v", tc.v, d, ok, tc.want, tc.ok)
		}
	}
	if _, ok := (Result{Empty: []Span{{From: at(100), To: at(200)}}}).GoneAfter(at(300)); ok {
		t.Error("served again for good after the last span: want not gone")
	}
	if e := Earliest(time.Time{}, at(5), at(3), time.Time{}); !e.Equal(at(3)) {
		t.Errorf("Earliest = %v", e)
	}
}

// TestWatchReadsOpenConnections: Watch sums ingress_open_connections over its protocols,
// ConnsBefore gives the count before a moment and ConnsDownTo the first answer at or
// under a count.
func TestWatchReadsOpenConnections(t *testing.T) {
	var conns atomic.Int64
	conns.Store(7)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "go_memstats_heap_inuse_bytes 1e+06\ngo_goroutines 9\n"+
			"ingress_open_connections{protocol=\"h1\"} 2\ningress_open_connections{protocol=\"h2\"} %d\n", conns.Load())
	}))
	defer srv.Close()
	ctx, stop := context.WithCancel(context.Background())
	w := Watch(ctx, 5*time.Millisecond, Target{MetricsURL: srv.URL})
	defer func() { stop(); w.Wait() }()
	testwait.Until(t, 10*time.Second, "a sample", func() bool { return w.ConnsBefore(time.Now()) == 9 })
	from := time.Now()
	testwait.Until(t, 10*time.Second, "a sample from then on", func() bool { return w.Sampled(from) })
	if at := w.ConnsDownTo(from, 2); !at.IsZero() {
		t.Fatalf("down to 2 at %v before the count fell", at)
	}
	conns.Store(0) // every sample begun before from was answered (one at a time)
	testwait.Until(t, 10*time.Second, "the count down to 2", func() bool { return !w.ConnsDownTo(from, 2).IsZero() })
	if at := w.ConnsDownTo(from, 2); at.Before(from) {
		t.Fatalf("down to 2 at %v, before %v", at, from)
	}
	if n := w.ConnsBefore(from); n != 9 {
		t.Fatalf("ConnsBefore = %v, want 9", n)
	}
}
