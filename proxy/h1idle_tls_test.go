package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/proxy/internal/park"
	"github.com/serve-zone/ingress/proxy/internal/tlsbuf"
	"github.com/serve-zone/ingress/routetable"
)

// tlsParkClient is an HTTP/1.1 client over TLS that can hold its records back (hold)
// and send their bytes itself, in pieces or together.
type tlsParkClient struct {
	t    testing.TB
	raw  net.Conn // the TCP connection under tc
	tc   *tls.Conn
	br   *bufio.Reader
	hold bool   // tc's writes go to held instead of raw
	held []byte // records written while hold was set
}

// holdConn is what tc writes to: raw, or held while hold is set.
type holdConn struct {
	net.Conn
	pc *tlsParkClient
}

func (h holdConn) Write(b []byte) (int, error) {
	if h.pc.hold {
		h.pc.held = append(h.pc.held, b...)
		return len(b), nil
	}
	return h.Conn.Write(b)
}

// newTLSParkClient connects to e's TLS listener as h1Host with HTTP/1.1.
func newTLSParkClient(t testing.TB, e *env) *tlsParkClient {
	t.Helper()
	raw, err := net.Dial("tcp", e.https)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	// No test waits long: a hang fails instead of timing out the whole run.
	_ = raw.SetDeadline(time.Now().Add(60 * time.Second))
	pc := &tlsParkClient{t: t, raw: raw}
	pc.tc = tls.Client(holdConn{raw, pc}, &tls.Config{ServerName: h1Host, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err := pc.tc.Handshake(); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	pc.br = bufio.NewReader(pc.tc)
	return pc
}

// records returns the TLS records tc makes of the requests, one record each, unsent.
func (pc *tlsParkClient) records(reqs ...string) []byte {
	pc.t.Helper()
	pc.hold, pc.held = true, nil
	defer func() { pc.hold = false }()
	for _, r := range reqs {
		if _, err := io.WriteString(pc.tc, r); err != nil {
			pc.t.Fatalf("write: %v", err)
		}
	}
	return pc.held
}

// get sends GET path and checks that the answer is the echo target's for it.
func (pc *tlsParkClient) get(path string) {
	pc.t.Helper()
	if _, err := io.WriteString(pc.tc, get1(path)); err != nil {
		pc.t.Fatalf("write: %v", err)
	}
	pc.expect(path)
}

// expect reads one answer and checks that it is the echo target's to GET path.
func (pc *tlsParkClient) expect(path string) {
	pc.t.Helper()
	if err := pc.check(path); err != nil {
		pc.t.Fatal(err)
	}
}

// check is expect, for use off the test's goroutine.
func (pc *tlsParkClient) check(path string) error {
	res, err := http.ReadResponse(pc.br, &http.Request{Method: "GET"})
	if err != nil {
		return fmt.Errorf("GET %s: reading the answer: %w", path, err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return fmt.Errorf("GET %s: reading the body: %w", path, err)
	}
	if want := echoed("GET", path, ""); res.StatusCode != 200 || string(b) != want {
		return fmt.Errorf("GET %s: answered %d %q, want 200 %q", path, res.StatusCode, b, want)
	}
	return nil
}

// closedByProxy waits for the proxy to end the connection and reports when it did.
func (pc *tlsParkClient) closedByProxy() time.Time {
	pc.t.Helper()
	n, err := pc.br.Read(make([]byte, 1))
	var ne net.Error
	if n > 0 || err == nil || errors.As(err, &ne) && ne.Timeout() {
		pc.t.Fatalf("waiting for the proxy to close the connection: read %d, %v", n, err)
	}
	return time.Now()
}

// tlsParkEnv is a proxy whose h1Host route has a certificate and the echo target.
func tlsParkEnv(t *testing.T, opts ...func(*Config)) *env {
	e := newEnv(t, append([]func(*Config){func(c *Config) { c.IdleTimeout = 30 * time.Second }}, opts...)...)
	e.apply([]routeSpec{{host: h1Host, tls: &routetable.RouteTLS{CertificateID: "c"}, backends: []string{echoTarget(t).addr}}},
		certSpec{"c", []string{h1Host}})
	return e
}

// TestTLSParkedConnections: idle HTTP/1.1 connections over TLS park like plain ones (no
// goroutine each), each answers its next request (the right answer on the right
// connection) and parks again, and one whose client closes while parked is closed and
// counted at once, leaving no descriptor behind.
func TestTLSParkedConnections(t *testing.T) {
	skipUnlessParking(t)
	e := tlsParkEnv(t)
	const n = 16
	fds := openFDs(t)
	clients := make([]*tlsParkClient, n)
	for i := range clients {
		clients[i] = newTLSParkClient(t, e)
		clients[i].get(fmt.Sprintf("/first/%d", i))
	}
	serving := runtime.NumGoroutine() // the n serving goroutines are alive until they park
	waitFor(t, "every TLS connection parked", func() bool { return parkedOn(e.srv) == n })
	if g := runtime.NumGoroutine(); g > serving-n+4 {
		t.Errorf("%d goroutines with %d TLS connections parked, %d before they parked: parked connections hold goroutines", g, n, serving)
	}
	if got := e.openH1(); got != n {
		t.Fatalf("%d HTTP/1.1 connections counted open, want %d", got, n)
	}
	parks := parkedTotal.Load()
	for i, pc := range clients {
		pc.get(fmt.Sprintf("/again/%d", i))
	}
	waitFor(t, "every TLS connection parked again", func() bool { return parkedOn(e.srv) == n && parkedTotal.Load() >= parks+n })
	// A client that closes while parked (close_notify and FIN, or FIN alone): closed
	// and counted at once, its descriptor gone.
	_ = clients[0].tc.Close()
	_ = clients[1].raw.Close()
	waitFor(t, "the closed TLS connections closed", func() bool { return e.openH1() == n-2 && parkedOn(e.srv) == n-2 })
	for _, pc := range clients[2:] {
		_ = pc.raw.Close()
	}
	waitFor(t, "every TLS connection closed", func() bool { return e.openH1() == 0 && parkedOn(e.srv) == 0 })
	// The proxy's pooled connections to the echo target may stay (in this process too).
	waitFor(t, "the descriptors of the closed connections released", func() bool { return openFDs(t) <= fds+2 })
}

// TestTLSParkedHalfRecord: half a TLS record on a parked connection wakes it; the rest
// arriving later completes the request; a record that never completes, or one
// trickled a byte at a time, ends the connection at the header timeout rather than
// parking it again until the idle timeout (30 s here). Part of a record is seen in
// crypto/tls's record buffer, or, should its field not be known, from the record bytes
// counted below crypto/tls.
func TestTLSParkedHalfRecord(t *testing.T) {
	skipUnlessParking(t)
	t.Run("record buffer", tlsParkedHalfRecord)
	t.Run("bytes counted", func(t *testing.T) {
		// Forgotten before the server starts (its goroutines see it by then), restored
		// after the server's own cleanup (Shutdown, Serve returned): cleanups run
		// last-registered first.
		t.Cleanup(tlsbuf.Forget())
		tlsParkedHalfRecord(t)
	})
}

func tlsParkedHalfRecord(t *testing.T) {
	const headerTimeout = time.Second
	e := tlsParkEnv(t, func(c *Config) { c.ReadHeaderTimeout = headerTimeout })
	completes, stalls, trickles := newTLSParkClient(t, e), newTLSParkClient(t, e), newTLSParkClient(t, e)
	for _, pc := range []*tlsParkClient{completes, stalls, trickles} {
		pc.get("/first")
	}
	waitFor(t, "the TLS connections parked", func() bool { return parkedOn(e.srv) == 3 })

	rec := completes.records(get1("/completed"))
	if _, err := completes.raw.Write(rec[:len(rec)/2]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "half a record woke the connection", func() bool { return parkedOn(e.srv) == 2 })
	if _, err := completes.raw.Write(rec[len(rec)/2:]); err != nil {
		t.Fatal(err)
	}
	completes.expect("/completed")

	start := time.Now()
	rec = stalls.records(get1("/never"))
	if _, err := stalls.raw.Write(rec[:len(rec)/2]); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() { // a byte every 200 ms: the record would take many seconds
		rec := trickles.records(get1("/trickled"))
		for _, b := range rec {
			if _, err := trickles.raw.Write([]byte{b}); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	defer wg.Wait()
	defer close(stop)
	for _, c := range []struct {
		name string
		pc   *tlsParkClient
	}{{"half a record", stalls}, {"a trickled record", trickles}} {
		took := c.pc.closedByProxy().Sub(start)
		t.Logf("%s: closed after %s", c.name, took)
		// Woken at once, idle wait h1ParkAfter, then the header timeout.
		if took < headerTimeout || took > h1ParkAfter+headerTimeout+5*time.Second {
			t.Errorf("%s on a parked connection: closed after %s; want the header timeout after the wait (%s + %s), well before the idle timeout", c.name, took, h1ParkAfter, headerTimeout)
		}
	}
	waitFor(t, "the stalled connections counted closed", func() bool { return e.openH1() == 1 })
}

// TestTLSParkedPipelined: two requests in two records, sent in one segment at about the
// moment the connection parks (before, during and after), are both answered, in order,
// on their own connection.
func TestTLSParkedPipelined(t *testing.T) {
	skipUnlessParking(t)
	e := tlsParkEnv(t)
	const n = 12
	clients := make([]*tlsParkClient, n)
	for i := range clients {
		clients[i] = newTLSParkClient(t, e)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, pc := range clients {
		wg.Go(func() {
			if _, err := io.WriteString(pc.tc, get1("/first")); err != nil {
				errs <- err
				return
			}
			if err := pc.check("/first"); err != nil {
				errs <- err
				return
			}
			rec := pc.records(get1(fmt.Sprintf("/a/%d", i)), get1(fmt.Sprintf("/b/%d", i)))
			// Aimed at the park: the idle wait ends h1ParkAfter after the answer,
			// give or take 60 ms over the connections. Whichever side of the park
			// it falls on, the assertions are the same.
			time.Sleep(h1ParkAfter - 60*time.Millisecond + time.Duration(i)*10*time.Millisecond)
			if _, err := pc.raw.Write(rec); err != nil {
				errs <- err
				return
			}
			for _, p := range []string{"/a/", "/b/"} {
				if err := pc.check(fmt.Sprintf("%s%d", p, i)); err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d parks in all", parkedTotal.Load())
}

// TestTLSParkedWakeAll: many parked TLS connections woken at once all answer the right
// request on the right connection, park again, and leave no goroutine once closed.
func TestTLSParkedWakeAll(t *testing.T) {
	skipUnlessParking(t)
	n := 2000
	if raceEnabled {
		n = 500 // handshakes are slow under the race detector
	}
	// The echo target answers every woken request at once: on a loaded machine under the
	// race detector that takes longer than the usual 5 s wait for a target's answer.
	// All from one address: more connections and requests in flight than its budgets.
	e := tlsParkEnv(t, func(c *Config) {
		c.ResponseHeaderTimeout = 30 * time.Second
		c.MaxConnsPerClient, c.MaxRequestsPerClient = -1, -1
	})
	base := runtime.NumGoroutine()
	clients := make([]*tlsParkClient, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range clients {
		sem <- struct{}{}
		clients[i] = newTLSParkClient(t, e)
		wg.Go(func() {
			defer func() { <-sem }()
			pc := clients[i]
			if _, err := io.WriteString(pc.tc, get1(fmt.Sprintf("/first/%d", i))); err != nil {
				errs <- err
				return
			}
			if err := pc.check(fmt.Sprintf("/first/%d", i)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	waitUntil := func(what string, cond func() bool) { t.Helper(); testwait.Until(t, 30*time.Second, what, cond) }
	waitUntil("every TLS connection parked", func() bool { return parkedOn(e.srv) == n })
	if g := runtime.NumGoroutine() - base; g > 8 {
		t.Errorf("%d goroutines more with %d TLS connections parked", g, n)
	}
	parks := parkedTotal.Load()
	start := make(chan struct{})
	lat := make([]time.Duration, n)
	for i, pc := range clients {
		wg.Go(func() {
			<-start
			t0 := time.Now()
			path := fmt.Sprintf("/wake/%d", i)
			if _, err := io.WriteString(pc.tc, get1(path)); err != nil {
				errs <- err
				return
			}
			if err := pc.check(path); err != nil {
				errs <- fmt.Errorf("connection %d: %w", i, err)
			}
			lat[i] = time.Since(t0)
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d parked TLS connections woken at once: the slowest answered in %s", n, slowest(lat))
	waitUntil("every TLS connection parked again", func() bool { return parkedOn(e.srv) == n && parkedTotal.Load() >= parks+int64(n) })
	for _, pc := range clients {
		_ = pc.raw.Close()
	}
	waitUntil("every TLS connection closed", func() bool { return e.openH1() == 0 && parkedOn(e.srv) == 0 })
	waitUntil("no serving goroutine left", func() bool { return h1Goroutines() == 0 })
}

func slowest(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// h1Goroutines is how many goroutines run an tcpConn's code now.
func h1Goroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("proxy.(*tcpConn)")) {
			n++
		}
	}
	return n
}

// TestTLSParkedIdleTimeout: the parker closes a parked TLS connection at its idle timeout
// (off its own goroutine: crypto/tls's Close sends close_notify), not before, counts it
// closed and leaves no serving goroutine.
func TestTLSParkedIdleTimeout(t *testing.T) {
	skipUnlessParking(t)
	const idle = h1ParkAfter + time.Second
	e := tlsParkEnv(t, func(c *Config) { c.IdleTimeout = idle })
	pc := newTLSParkClient(t, e)
	pc.get("/first")
	answered := time.Now()
	testwait.Until(t, 2*idle, "the idle TLS connection parked", func() bool { return parkedOn(e.srv) == 1 })
	// The read ends with the proxy's close_notify (io.EOF) or its close: the event itself.
	took := pc.closedByProxy().Sub(answered)
	if took < idle-100*time.Millisecond || took > idle+park.Tick+h1IdleSlack+time.Second {
		t.Errorf("closed %s after the answer; the idle timeout is %s", took, idle)
	}
	testwait.Until(t, 5*time.Second, "the connection counted closed", func() bool { return e.openH1() == 0 && parkedOn(e.srv) == 0 })
	testwait.Until(t, 5*time.Second, "no serving goroutine left", func() bool { return h1Goroutines() == 0 })
}
