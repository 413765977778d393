package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/proxy/internal/park"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// Parked HTTP/2 connections (proxy/internal/h2/park.go, h2serve.go, h1idle.go): an
// HTTP/2 connection without streams parks in the server's epoll parker like a plain
// HTTP/1.1 one, holds no goroutine there, and wakes for whatever its client sends.

// parkWait bounds a wait for connections to park: h1ParkAfter of idleness, on a shared
// and slow machine.
const parkWait = 30 * time.Second

// parkFixed is a response field every answer carries: indexed by the response encoder
// after the first, so a lost or reset HPACK table would show as a wrong field.
const parkFixed = "a-long-constant-value-the-response-encoder-indexes-once"

// parkBackend answers with the request's x-conn field and path, in fields and body: the
// answer says which connection and request it is for.
func parkBackend(t testing.TB) string {
	return backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Fixed", parkFixed)
		w.Header().Set("X-Conn", r.Header.Get("X-Conn"))
		w.Header().Set("X-Path", r.URL.Path)
		_, _ = io.WriteString(w, r.Header.Get("X-Conn")+" "+r.URL.Path)
	}))
}

// parkEnv is the own server with h1Host routed (with a certificate, for TLS) to a
// parkBackend, and a long idle timeout.
func parkEnv(t testing.TB) *env {
	e := newEnv(t, func(c *Config) {
		c.IdleTimeout = time.Minute
		// Thousands of requests woken at once open as many target connections at
		// once: on a shared machine under the race detector some connects take
		// seconds.
		c.DialTimeout = 30 * time.Second
		c.ResponseHeaderTimeout = 30 * time.Second
	})
	e.apply([]routeSpec{{host: h1Host, tls: &routetable.RouteTLS{CertificateID: "c"}, backends: []string{parkBackend(t)}}},
		certSpec{id: "c", hosts: []string{h1Host}})
	return e
}

func (e *env) openH2() int64 { return e.totals.Snapshot().Conns[stats.ProtoHTTP2] }

// h2Peer is a raw HTTP/2 client connection that keeps its HPACK tables for its whole
// life, as a browser does.
type h2Peer struct {
	t      testing.TB
	name   string
	scheme string
	host   string // :authority
	nc     net.Conn
	fr     *http2.Framer
	hb     bytes.Buffer
	enc    *hpack.Encoder
	next   uint32
}

// dialH2Peer opens an h2c (useTLS false) or h2-over-TLS connection to e and sends the
// preface and SETTINGS.
func dialH2Peer(t testing.TB, e *env, useTLS bool, name string) *h2Peer {
	t.Helper()
	p := &h2Peer{t: t, name: name, scheme: "http", host: h1Host, next: 1}
	if useTLS {
		c, err := tls.Dial("tcp", e.https, &tls.Config{ServerName: h1Host, InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		if c.ConnectionState().NegotiatedProtocol != "h2" {
			t.Fatalf("ALPN %q", c.ConnectionState().NegotiatedProtocol)
		}
		p.nc, p.scheme = c, "https"
	} else {
		c, err := net.Dial("tcp", e.http)
		if err != nil {
			t.Fatal(err)
		}
		p.nc = c
	}
	return startH2Peer(t, p)
}

// startH2Peer sends p's preface and SETTINGS on p.nc.
func startH2Peer(t testing.TB, p *h2Peer) *h2Peer {
	t.Helper()
	t.Cleanup(func() { p.nc.Close() })
	p.fr = http2.NewFramer(p.nc, p.nc)
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.enc = hpack.NewEncoder(&p.hb)
	if _, err := p.nc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := p.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return p
}

// h2Event is what readUntil stopped at.
type h2Event struct {
	status, body string
	fields       map[string]string
	goaway       *http2.GoAwayFrame
}

// readUntil reads frames (acknowledging the server's SETTINGS) until want says stop.
func (p *h2Peer) readUntil(want func(f http2.Frame, ev *h2Event) bool) (h2Event, error) {
	var ev h2Event
	_ = p.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			return ev, err
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			if err := p.fr.WriteSettingsAck(); err != nil {
				return ev, err
			}
			continue
		}
		if want(f, &ev) {
			return ev, nil
		}
	}
}

// get sends GET path with the peer's x-conn field and returns the answer; fields found
// indexed in the client's encoder, and the server's, make the later requests test the
// tables kept across parks.
func (p *h2Peer) get(path string) h2Event {
	p.t.Helper()
	ev, err := p.tryGet(path)
	if err != nil {
		p.t.Fatal(err)
	}
	return ev
}

// tryGet is get, for any goroutine.
func (p *h2Peer) tryGet(path string) (h2Event, error) {
	id := p.next
	p.next += 2
	p.hb.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", p.scheme}, {":authority", p.host}, {":path", path},
		{"x-conn", p.name}, {"user-agent", "parked-h2-test/1.0 (indexed by the client's encoder)"}} {
		_ = p.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		return h2Event{}, fmt.Errorf("%s: %s: %w", p.name, path, err)
	}
	var body bytes.Buffer
	var bad error
	ev, err := p.readUntil(func(f http2.Frame, ev *h2Event) bool {
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				ev.status = f.PseudoValue("status")
				ev.fields = map[string]string{}
				for _, hf := range f.RegularFields() {
					ev.fields[hf.Name] = hf.Value
				}
				return f.StreamEnded()
			}
		case *http2.DataFrame:
			if f.StreamID == id {
				body.Write(f.Data())
				return f.StreamEnded()
			}
		case *http2.RSTStreamFrame:
			bad = fmt.Errorf("%s: %s: stream reset %v", p.name, path, f.ErrCode)
			return true
		case *http2.GoAwayFrame:
			bad = fmt.Errorf("%s: %s: GOAWAY %v", p.name, path, f.ErrCode)
			return true
		}
		return false
	})
	if err != nil {
		return ev, fmt.Errorf("%s: %s: %w", p.name, path, err)
	}
	ev.body = body.String()
	return ev, bad
}

// check fails unless ev is the answer to this peer's GET path.
func (p *h2Peer) check(ev h2Event, path string) {
	p.t.Helper()
	if err := p.answered(ev, path); err != nil {
		p.t.Fatal(err)
	}
}

// answered is check's verdict, for any goroutine.
func (p *h2Peer) answered(ev h2Event, path string) error {
	if want := p.name + " " + path; ev.status != "200" || ev.body != want || ev.fields["x-conn"] != p.name ||
		ev.fields["x-path"] != path || ev.fields["x-fixed"] != parkFixed {
		return fmt.Errorf("%s: GET %s: %s %q %v; want 200 %q with its own fields", p.name, path, ev.status, ev.body, ev.fields, want)
	}
	return nil
}

// ping sends a PING and waits for its acknowledgement.
func (p *h2Peer) ping(data [8]byte) {
	p.t.Helper()
	if err := p.fr.WritePing(false, data); err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.readUntil(func(f http2.Frame, _ *h2Event) bool {
		pf, ok := f.(*http2.PingFrame)
		return ok && pf.IsAck() && pf.Data == data
	}); err != nil {
		p.t.Fatalf("%s: PING not acknowledged: %v", p.name, err)
	}
}

// goneAway reads until the server's GOAWAY (NO_ERROR) and then the connection's end.
func (p *h2Peer) goneAway() error {
	ev, err := p.readUntil(func(f http2.Frame, ev *h2Event) bool {
		ga, ok := f.(*http2.GoAwayFrame)
		ev.goaway = ga
		return ok
	})
	if err != nil {
		return fmt.Errorf("%s: no GOAWAY: %w", p.name, err)
	}
	if ev.goaway.ErrCode != http2.ErrCodeNo {
		return fmt.Errorf("%s: GOAWAY %v", p.name, ev.goaway.ErrCode)
	}
	for {
		if _, err := p.fr.ReadFrame(); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
				return nil
			}
			return fmt.Errorf("%s: after GOAWAY: %w", p.name, err)
		}
	}
}

// waitParked waits until want connections are parked and at least parks have happened
// in all (parkedTotal).
func waitParked(t testing.TB, e *env, want int, parks int64) {
	t.Helper()
	testwait.UntilWhy(t, parkWait, fmt.Sprintf("%d connections parked", want), func() (bool, string) {
		n, total := parkedOn(e.srv), parkedTotal.Load()
		return n == want && total >= parks, fmt.Sprintf("%d parked, %d parks in all (want %d from %d)", n, total, parks-total, total)
	})
}

// TestH2ParksAndWakes: HTTP/2 connections (h2c and over TLS) without streams park, hold
// no goroutine, and each answers its next requests with its own answers (HPACK tables
// intact on both sides); a PING or a WINDOW_UPDATE wakes a parked connection, is
// answered or applied, and it parks again; half a frame wakes it and it waits for the
// rest; a client closing its parked connection leaves no descriptor behind; Shutdown
// sends every parked connection a GOAWAY.
func TestH2ParksAndWakes(t *testing.T) {
	skipUnlessParking(t)
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "h2c", true: "tls"}[useTLS], func(t *testing.T) {
			testH2ParksAndWakes(t, useTLS)
		})
	}
}

func testH2ParksAndWakes(t *testing.T, useTLS bool) {
	e := parkEnv(t)
	const n = 6
	peers := make([]*h2Peer, n)
	parks := parkedTotal.Load()
	for i := range peers {
		peers[i] = dialH2Peer(t, e, useTLS, fmt.Sprintf("conn-%d", i))
		for r := range 3 {
			path := fmt.Sprintf("/before/%d", r)
			peers[i].check(peers[i].get(path), path)
		}
	}
	busy := runtime.NumGoroutine() // each connection's reader and writer at least
	waitParked(t, e, n, parks+n)
	if g := runtime.NumGoroutine(); g > busy-2*n+4 {
		t.Errorf("%d goroutines with %d HTTP/2 connections parked, %d before: parked connections hold goroutines", g, n, busy)
	}
	if got := e.openH2(); got != n {
		t.Fatalf("%d HTTP/2 connections counted open, want %d", got, n)
	}

	// Every one answers after being parked, with its own answers, on its own table.
	parks = parkedTotal.Load()
	for _, p := range peers {
		for r := range 3 {
			path := fmt.Sprintf("/after/%d", r)
			p.check(p.get(path), path)
		}
	}
	waitParked(t, e, n, parks+n)

	// A PING on a parked connection is answered; it parks again.
	parks = parkedTotal.Load()
	peers[0].ping([8]byte{'p', 'a', 'r', 'k', 'e', 'd', 0, 1})
	waitParked(t, e, n, parks+1)

	// A WINDOW_UPDATE on a parked connection is applied, and it parks again.
	parks = parkedTotal.Load()
	if err := peers[1].fr.WriteWindowUpdate(0, 1<<20); err != nil {
		t.Fatal(err)
	}
	waitParked(t, e, n, parks+1)
	peers[1].check(peers[1].get("/window"), "/window")

	// Half a frame wakes the connection; it does not park or end in the middle of the
	// frame, and answers once the rest comes.
	waitParked(t, e, n, parkedTotal.Load())
	var ping bytes.Buffer
	_ = http2.NewFramer(&ping, nil).WritePing(false, [8]byte{'h', 'a', 'l', 'f'})
	if _, err := peers[2].nc.Write(ping.Bytes()[:5]); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, parkWait, "the half frame woke its connection", func() bool { return parkedOn(e.srv) == n-1 })
	// The connection's next wake-up to park is 250 ms away (h2.parkRetry): let it pass;
	// what is asserted is that nothing happens then.
	time.Sleep(time.Second)
	if got := parkedOn(e.srv); got != n-1 {
		t.Fatalf("%d connections parked with one inside a frame, want %d", got, n-1)
	}
	parks = parkedTotal.Load()
	if _, err := peers[2].nc.Write(ping.Bytes()[5:]); err != nil {
		t.Fatal(err)
	}
	if _, err := peers[2].readUntil(func(f http2.Frame, _ *h2Event) bool {
		pf, ok := f.(*http2.PingFrame)
		return ok && pf.IsAck() && pf.Data == [8]byte{'h', 'a', 'l', 'f'}
	}); err != nil {
		t.Fatalf("the PING sent in two halves: %v", err)
	}
	waitParked(t, e, n, parks+1)
	peers[2].check(peers[2].get("/after-half"), "/after-half")
	waitParked(t, e, n, parkedTotal.Load())

	// A client closing its parked connection: closed and counted at once, no
	// descriptor or goroutine left.
	fds, gs := openFDs(t), runtime.NumGoroutine()
	_ = peers[3].nc.Close()
	testwait.Until(t, parkWait, "the closed parked connection gone", func() bool {
		return parkedOn(e.srv) == n-1 && e.openH2() == n-1 && openFDs(t) == fds-2
	})
	if g := runtime.NumGoroutine(); g > gs {
		t.Errorf("%d goroutines after a parked connection closed, %d before", g, gs)
	}

	// Shutdown: every parked connection gets its GOAWAY, then its end.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, p := range peers {
		if i != 3 {
			wg.Go(func() { errs <- p.goneAway() })
		}
	}
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with parked HTTP/2 connections: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := e.openH2(); got != 0 || parkedOn(e.srv) != 0 {
		t.Fatalf("after Shutdown: %d HTTP/2 connections counted open, %d parked; want 0", got, parkedOn(e.srv))
	}
}

// redirectHost is routed with RedirectHTTP: the server answers h2c requests for it
// itself (308 to HTTPS, the path in Location), without a target.
const redirectHost = "redirect.example.test"

// TestH2ParkedWakeTogether: many parked HTTP/2 connections woken at once each get their
// own answer, and park again. The answers are the server's own (redirects naming the
// connection in their path): thousands of target connections opened at once would test
// the machine's accept queue instead.
func TestH2ParkedWakeTogether(t *testing.T) {
	skipUnlessParking(t)
	n := 2000
	if testing.Short() {
		n = 200
	}
	e := newEnv(t, func(c *Config) { c.IdleTimeout = time.Minute; c.MaxConnsPerClient = -1 }) // 2,000 from 127.0.0.1: no connection budget
	e.apply([]routeSpec{{host: redirectHost, tls: &routetable.RouteTLS{CertificateID: "c", RedirectHTTP: true}, backends: []string{deadAddr(t)}}},
		certSpec{id: "c", hosts: []string{redirectHost}})
	peers := make([]*h2Peer, n)
	redirected := func(p *h2Peer, path string) error {
		ev, err := p.tryGet(path)
		if err != nil {
			return err
		}
		loc := ev.fields["location"]
		if ev.status != "308" || !strings.HasPrefix(loc, "https://"+redirectHost+":") || !strings.HasSuffix(loc, path) {
			return fmt.Errorf("%s: GET %s: %s %v; want 308 to https://%s:port%s", p.name, path, ev.status, ev.fields, redirectHost, path)
		}
		return nil
	}
	parks := parkedTotal.Load()
	for i := range peers {
		peers[i] = dialH2Peer(t, e, false, fmt.Sprintf("conn-%d", i))
		peers[i].host = redirectHost
		if err := redirected(peers[i], "/first/"+peers[i].name); err != nil {
			t.Fatal(err)
		}
	}
	waitParked(t, e, n, parks+int64(n))
	parks = parkedTotal.Load()
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for _, p := range peers {
		wg.Go(func() {
			<-start
			errs <- redirected(p, "/together/"+p.name)
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	waitParked(t, e, n, parks+int64(n))
	if got := e.openH2(); got != int64(n) {
		t.Fatalf("%d HTTP/2 connections counted open, want %d", got, n)
	}
}

// segmentWriter holds what is written to its connection while holding, and writes it
// in one call (one TCP segment on loopback) at release.
type segmentWriter struct {
	net.Conn
	mu      sync.Mutex
	holding bool
	held    []byte
}

func (w *segmentWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.holding {
		w.held = append(w.held, b...)
		return len(b), nil
	}
	return w.Conn.Write(b)
}

func (w *segmentWriter) hold() {
	w.mu.Lock()
	w.holding = true
	w.mu.Unlock()
}

func (w *segmentWriter) release() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.holding = false
	_, err := w.Conn.Write(w.held)
	w.held = nil
	return err
}

// TestH2ParkedTLSTwoRecords: two TLS records in one segment to a parked HTTP/2
// connection, three times: crypto/tls reads both from the socket at once and decrypts
// one per Read, so the second is never announced by the socket again; both are
// answered, and the connection parks again after.
func TestH2ParkedTLSTwoRecords(t *testing.T) {
	skipUnlessParking(t)
	e := parkEnv(t)
	raw, err := net.Dial("tcp", e.https)
	if err != nil {
		t.Fatal(err)
	}
	sw := &segmentWriter{Conn: raw}
	tc := tls.Client(sw, &tls.Config{ServerName: h1Host, InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	p := startH2Peer(t, &h2Peer{t: t, name: "two-records", scheme: "https", host: h1Host, next: 1, nc: tc})
	parks := parkedTotal.Load()
	p.check(p.get("/first"), "/first")
	waitParked(t, e, 1, parks+1)
	for round := range 3 {
		parks = parkedTotal.Load()
		a, b := [8]byte{'a', byte(round)}, [8]byte{'b', byte(round)}
		sw.hold()
		if err := p.fr.WritePing(false, a); err != nil { // one record
			t.Fatal(err)
		}
		if err := p.fr.WritePing(false, b); err != nil { // another
			t.Fatal(err)
		}
		if err := sw.release(); err != nil {
			t.Fatal(err)
		}
		acked := map[[8]byte]bool{}
		if _, err := p.readUntil(func(f http2.Frame, _ *h2Event) bool {
			if pf, ok := f.(*http2.PingFrame); ok && pf.IsAck() {
				acked[pf.Data] = true
			}
			return acked[a] && acked[b]
		}); err != nil {
			t.Fatalf("round %d: the PINGs of two records in one segment: %v (acknowledged %v)", round, err, acked)
		}
		waitParked(t, e, 1, parks+1)
	}
	p.check(p.get("/after"), "/after")
}

// TestH2ParkedIdleTimeout: the parker ends a parked HTTP/2 connection at its idle
// timeout (IdleTimeout after its last stream ended), not before, with a GOAWAY, and
// counts it closed.
func TestH2ParkedIdleTimeout(t *testing.T) {
	skipUnlessParking(t)
	const idle = h1ParkAfter + time.Second
	e := newEnv(t, func(c *Config) { c.IdleTimeout = idle })
	e.apply([]routeSpec{{host: h1Host, backends: []string{parkBackend(t)}}})
	p := dialH2Peer(t, e, false, "idle")
	parks := parkedTotal.Load()
	p.check(p.get("/first"), "/first")
	answered := time.Now()
	waitParked(t, e, 1, parks+1)
	// The wait ends when the proxy ends the connection: the event itself.
	if err := p.goneAway(); err != nil {
		t.Fatalf("the parked connection at its idle timeout: %v", err)
	}
	took := time.Since(answered)
	// The parker checks in park.Tick steps; the GOAWAY then waits for the engine's start.
	if took < idle-100*time.Millisecond || took > idle+park.Tick+2*time.Second {
		t.Errorf("ended %s after the answer; the idle timeout is %s", took, idle)
	}
	testwait.Until(t, 5*time.Second, "the connection counted closed", func() bool { return e.openH2() == 0 && parkedOn(e.srv) == 0 })
}

// TestH2ParkedCloseRace: requests and PINGs that wake parked HTTP/2 connections race
// with a Shutdown whose context has already ended (closeIdle, then closeAll): every
// connection ends, none is left counted open or parked, and Serve returns. Run with
// -race: the parker, the engine's goroutines and the closers share the connections.
func TestH2ParkedCloseRace(t *testing.T) {
	skipUnlessParking(t)
	for round := range 3 {
		e := parkEnv(t)
		const n = 24
		peers := make([]*h2Peer, n)
		parks := parkedTotal.Load()
		for i := range peers {
			peers[i] = dialH2Peer(t, e, i%2 == 1, fmt.Sprintf("conn-%d", i))
			peers[i].check(peers[i].get("/first"), "/first")
		}
		waitParked(t, e, n, parks+n)
		var wg sync.WaitGroup
		for i, p := range peers {
			wg.Go(func() {
				switch i % 3 {
				case 0:
					p.hb.Reset()
					for _, f := range [][2]string{{":method", "GET"}, {":scheme", p.scheme}, {":authority", h1Host}, {":path", "/racing"}} {
						_ = p.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
					}
					_ = p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: p.next, BlockFragment: p.hb.Bytes(), EndStream: true, EndHeaders: true})
				case 1:
					_ = p.fr.WritePing(false, [8]byte{'r', 'a', 'c', 'e'})
				}
				// An answer or not, the connection must end: Shutdown closes it.
				_ = p.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.Copy(io.Discard, p.nc); err != nil {
					var ne interface{ Timeout() bool }
					if errors.As(err, &ne) && ne.Timeout() {
						t.Errorf("round %d connection %d still open after Shutdown", round, i)
					}
				}
			})
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = e.srv.Shutdown(ctx)
		wg.Wait()
		e.waitServedWithin(t, 10*time.Second)
		if got, p := e.openH2(), parkedOn(e.srv); got != 0 || p != 0 {
			t.Fatalf("round %d: %d HTTP/2 connections counted open, %d parked after Shutdown; want 0", round, got, p)
		}
	}
}

// TestH2CrowdParksSoon: with more goroutines than Server.parkCrowd, an HTTP/2
// connection without streams parks after h1ParkSoon, as an HTTP/1.1 one does, and still
// answers with its own answers after.
func TestH2CrowdParksSoon(t *testing.T) {
	skipUnlessParking(t)
	e := parkEnv(t)
	e.srv.parkCrowd = 0
	p := dialH2Peer(t, e, false, "crowded")
	parks := parkedTotal.Load()
	p.check(p.get("/a"), "/a")
	start := time.Now()
	waitParked(t, e, 1, parks+1)
	if d := time.Since(start); d >= h1ParkAfter {
		t.Fatalf("an idle HTTP/2 connection parked after %s in a crowd, want about %s", d, h1ParkSoon)
	}
	p.check(p.get("/b"), "/b")
}
