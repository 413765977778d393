package proxy

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2CliEvent is what a raw HTTP/2 client saw of a stream (id > 0) or of the connection
// (id 0: GOAWAY, or err when it ended).
type h2CliEvent struct {
	id     uint32
	status int
	rst    http2.ErrCode
	reset  bool
	goaway http2.ErrCode
	err    error
}

// h2Cli is a minimal HTTP/2 client over a connection: it sends GETs on chosen stream
// ids and reports each stream's answer (its status or its reset) and the connection's
// GOAWAY or end. Unlike x/net's client it never retries a refused stream. Its reader
// goroutine ends when the connection does (closed at the test's cleanup).
type h2Cli struct {
	c      net.Conn
	mu     sync.Mutex // fr's writes, enc, hb
	fr     *http2.Framer
	enc    *hpack.Encoder
	hb     bytes.Buffer
	events chan h2CliEvent
	seen   map[uint32]h2CliEvent // the waiter's
}

func newH2Cli(t testing.TB, c net.Conn) *h2Cli {
	t.Helper()
	h := &h2Cli{c: c, fr: http2.NewFramer(c, c), events: make(chan h2CliEvent, 256), seen: map[uint32]h2CliEvent{}}
	h.enc = hpack.NewEncoder(&h.hb)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go h.read()
	return h
}

func (h *h2Cli) read() {
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			h.events <- h2CliEvent{err: err}
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.mu.Lock()
				_ = h.fr.WriteSettingsAck()
				h.mu.Unlock()
			}
		case *http2.MetaHeadersFrame:
			st, _ := strconv.Atoi(f.PseudoValue("status"))
			if st >= 200 {
				h.events <- h2CliEvent{id: f.StreamID, status: st}
			}
		case *http2.RSTStreamFrame:
			h.events <- h2CliEvent{id: f.StreamID, rst: f.ErrCode, reset: true}
		case *http2.GoAwayFrame:
			h.events <- h2CliEvent{goaway: f.ErrCode}
		}
	}
}

// get opens stream id with a GET of path on host.
func (h *h2Cli) get(t testing.TB, id uint32, host, path string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hb.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", host}, {":path", path}} {
		_ = h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
}

// wait returns the first answer (status or reset) of stream id.
func (h *h2Cli) wait(t testing.TB, id uint32) h2CliEvent {
	t.Helper()
	if ev, ok := h.seen[id]; ok {
		return ev
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-h.events:
			if ev.id == 0 {
				if ev.err != nil {
					t.Fatalf("the connection ended before stream %d's answer: %v", id, ev.err)
				}
				continue
			}
			if _, ok := h.seen[ev.id]; !ok {
				h.seen[ev.id] = ev
			}
			if ev.id == id {
				return ev
			}
		case <-deadline:
			t.Fatalf("no answer on stream %d", id)
		}
	}
}

// ended waits for the connection to end (GOAWAY then the end, or the end) and returns
// the GOAWAY's code, if one came.
func (h *h2Cli) ended(t testing.TB, within time.Duration) (goaway http2.ErrCode, got bool) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case ev := <-h.events:
			switch {
			case ev.id != 0:
			case ev.err != nil:
				return goaway, got
			default:
				goaway, got = ev.goaway, true
			}
		case <-deadline:
			t.Fatalf("the HTTP/2 connection did not end within %s", within)
		}
	}
}

// slowTarget is a target whose answers to /slow wait until release is closed; it
// counts every request it saw and signals each /slow arrival.
type slowTarget struct {
	addr    string
	seen    atomic.Int64
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

func newSlowTarget(t testing.TB) *slowTarget {
	st := &slowTarget{arrived: make(chan struct{}, 1024), release: make(chan struct{})}
	st.addr = backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st.seen.Add(1)
		if r.URL.Path == "/slow" {
			st.arrived <- struct{}{}
			select {
			case <-st.release:
			case <-r.Context().Done():
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(st.free)
	return st
}

func (st *slowTarget) free() { st.once.Do(func() { close(st.release) }) }

// waitArrivals waits until n more /slow requests reached the target.
func (st *slowTarget) waitArrivals(t testing.TB, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-st.arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d slow requests reached the target", i, n)
		}
	}
}

// TestRequestBudgetAcrossH2Connections: issue 25's pre-opened flood in small: one
// address opens several HTTP/2 connections and then many streams on each; whatever the
// spread, no more than the budget reach targets at once, and every other stream is
// refused (REFUSED_STREAM) without a target seeing it.
func TestRequestBudgetAcrossH2Connections(t *testing.T) {
	const budget, conns, perConn = 16, 8, 8
	e := newEnv(t, func(c *Config) { c.MaxRequestsPerClient = budget })
	tg := newSlowTarget(t)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{tg.addr}}})
	var cls []*h2Cli
	for range conns {
		cls = append(cls, newH2Cli(t, dialFrom(t, addrA, e.http)))
	}
	for _, cl := range cls {
		for i := range perConn {
			cl.get(t, uint32(2*i+1), "app.example.test", "/slow")
		}
	}
	// A stream admitted waits for the target: only the refused ones answer now.
	all := make(chan h2CliEvent, conns*(perConn+4)) // room for every event the connections can still send: the forwarders never block
	for _, cl := range cls {
		go func() {
			for ev := range cl.events { // ends with the connection, closed at cleanup
				all <- ev
				if ev.err != nil {
					return
				}
			}
		}()
	}
	for refused := 0; refused < conns*perConn-budget; {
		select {
		case ev := <-all:
			if ev.id == 0 && ev.err == nil {
				continue // a GOAWAY would end the test below
			}
			if !ev.reset || ev.rst != http2.ErrCodeRefusedStream {
				t.Fatalf("an answer before the target released anything: %+v", ev)
			}
			refused++
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d streams refused", refused, conns*perConn-budget)
		}
	}
	tg.waitArrivals(t, budget)
	if n := tg.seen.Load(); n != budget {
		t.Fatalf("the target saw %d of %d streams, want the budget's %d", n, conns*perConn, budget)
	}
	if u := e.srv.clients.Usage(addrA); u.Requests != budget {
		t.Fatalf("%d requests in flight, want %d", u.Requests, budget)
	}
}
