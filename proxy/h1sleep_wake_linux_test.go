package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// What a connection rebuilt by wake (h1sleep_linux.go) must still know and do: its
// client's address, its trust, its hand-off listener, its byte accounting, and a
// request that came with the client's FIN.

// sleepEnv is a proxy whose idle plain connections sleep after h1ParkSoon (parkCrowd 0,
// set before any connection exists).
func sleepEnv(t *testing.T, opts ...func(*Config)) *env {
	t.Helper()
	e := newEnv(t, append([]func(*Config){func(c *Config) { c.IdleTimeout = 30 * time.Second }}, opts...)...)
	e.srv.parkCrowd = 0
	return e
}

// asleepAgain waits until n connections sleep and parkedTotal has grown past parks.
func asleepAgain(t *testing.T, e *env, n int, parks int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d connections asleep", n), func() bool {
		return sleepers(e.srv) == n && parkedTotal.Load() > parks
	})
}

// sleepingClients opens n connections to e, makes one request on each and waits until
// all of them sleep.
func sleepingClients(t *testing.T, e *env, n int) []*rawClient {
	t.Helper()
	rcs := make([]*rawClient, n)
	parks := parkedTotal.Load()
	for i := range rcs {
		rcs[i] = newRawClient(t, e.http)
		rcs[i].send(get1("/first"))
		rcs[i].read("GET")
	}
	asleepAgain(t, e, n, parks)
	return rcs
}

// getFrom sends a GET with an X-Forwarded-For of its own on c and returns what the
// target saw in X-Forwarded-For.
func getFrom(t *testing.T, c net.Conn, br *bufio.Reader, path string) string {
	t.Helper()
	req := "GET " + path + " HTTP/1.1\r\nHost: " + h1Host + "\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	res, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %d", path, res.StatusCode)
	}
	return res.Header.Get("X-Seen-X-Forwarded-For")
}

// TestSleeperWakeKnowsItsClient: after a wake, X-Forwarded-For names the real peer (an
// untrusted client's own X-Forwarded-For is not believed, a trusted proxy's is kept and
// extended), exactly as before the sleep; a trusted proxy's connection (a zero budget
// hold) sleeps and wakes without ever counting in its address's budget, and a strike of
// its address does not reach it.
func TestSleeperWakeKnowsItsClient(t *testing.T) {
	skipUnlessParking(t)
	e := sleepEnv(t, func(c *Config) {
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.3/32")}
	})
	e.apply([]routeSpec{{host: h1Host, backends: []string{backend(t, echoInfo())}}})
	trustedAddr := netip.MustParseAddr("127.0.0.3")
	for _, tc := range []struct {
		from netip.Addr
		want string
	}{
		{addrB, "127.0.0.2"},
		{trustedAddr, "203.0.113.9, 127.0.0.3"},
	} {
		c := dialFrom(t, tc.from, e.http)
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(c)
		parks := parkedTotal.Load()
		if got := getFrom(t, c, br, "/before"); got != tc.want {
			t.Fatalf("from %s, awake: X-Forwarded-For %q, want %q", tc.from, got, tc.want)
		}
		for i := range 3 {
			asleepAgain(t, e, 1, parks)
			parks = parkedTotal.Load()
			if got := getFrom(t, c, br, fmt.Sprintf("/woken/%d", i)); got != tc.want {
				t.Fatalf("from %s, after wake %d: X-Forwarded-For %q, want %q", tc.from, i, got, tc.want)
			}
		}
		asleepAgain(t, e, 1, parks)
		if tc.from == trustedAddr {
			if u := e.srv.clients.Usage(trustedAddr); u.Conns != 0 {
				t.Fatalf("a trusted proxy's sleeping connection counts %d in its budget", u.Conns)
			}
			if n := e.srv.clients.Strike(trustedAddr); n != 0 {
				t.Fatalf("a strike of a trusted proxy's address reached %d connections", n)
			}
			if got := getFrom(t, c, br, "/after-strike"); got != tc.want {
				t.Fatalf("trusted, after the strike: X-Forwarded-For %q, want %q", got, tc.want)
			}
		} else if u := e.srv.clients.Usage(tc.from); u.Conns != 1 {
			t.Fatalf("asleep, %s counts %d connections in its budget, want 1", tc.from, u.Conns)
		}
		_ = c.Close()
		waitFor(t, "closed and given back", func() bool {
			return sleepers(e.srv) == 0 && e.openH1() == 0 && e.srv.clients.Usage(tc.from).Conns == 0
		})
	}
}

// TestSleeperWakeHandsOff: a woken connection whose next request is for net/http (a
// chunked body, a body larger than the read buffer) is handed to the plain listener's
// net/http server with the bytes already read, answered right, and goes on serving on
// net/http (the chunked one closes after its answer, as without a sleep); the bytes are counted exactly under the hostname and the connection once.
func TestSleeperWakeHandsOff(t *testing.T) {
	skipUnlessParking(t)
	e := sleepEnv(t)
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	big := strings.Repeat("B", 3*h1ReadBuf)
	chunked := "POST /chunked HTTP/1.1\r\nHost: " + h1Host + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
	for _, tc := range []struct {
		name, req, path, body string
		closes                bool // a chunked request on net/http's path ends its connection (handler.go)
	}{
		{"chunked", chunked, "/chunked", "hello world", true},
		{"large", post1("/large", big), "/large", big, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newRawClient(t, e.http)
			_ = rc.c.SetDeadline(time.Now().Add(20 * time.Second))
			cr := &byteCounter{r: rc.c}
			rc.br = bufio.NewReader(cr)
			before := e.stat(h1Host)
			parks := parkedTotal.Load()
			rc.send(get1("/first"))
			if res, body := rc.read("GET"); res.StatusCode != 200 || body != echoed("GET", "/first", "") {
				t.Fatalf("GET /first: %d %q", res.StatusCode, body)
			}
			asleepAgain(t, e, 1, parks)
			// The head and the start of the body in one write, the rest in another: the
			// wake reads the first part into the fast path's buffer.
			rc.send(tc.req[:len(tc.req)/2])
			rc.send(tc.req[len(tc.req)/2:])
			res, body := rc.read("POST")
			if res.StatusCode != 200 || body != echoed("POST", tc.path, tc.body) {
				t.Fatalf("POST %s after a wake: %d %.80q", tc.path, res.StatusCode, body)
			}
			in, requests := int64(len(get1("/first"))+len(tc.req)), uint64(2)
			if res.Close != tc.closes {
				t.Fatalf("POST %s after a wake: Connection: close %v, want %v", tc.path, res.Close, tc.closes)
			}
			if !res.Close {
				// net/http's now: it answers the next request on the same connection.
				rc.send(get1("/after"))
				if res, body := rc.read("GET"); res.StatusCode != 200 || body != echoed("GET", "/after", "") {
					t.Fatalf("GET /after on net/http: %d %q", res.StatusCode, body)
				}
				in, requests = in+int64(len(get1("/after"))), requests+1
			} else {
				rc.closed()
			}
			_ = rc.c.Close()
			waitFor(t, "closed and counted", func() bool {
				st := e.stat(h1Host)
				return e.openH1() == 0 && sleepers(e.srv) == 0 && st.Requests-before.Requests == requests &&
					int64(st.BytesIn-before.BytesIn) == in && int64(st.BytesOut-before.BytesOut) == cr.n
			})
			if st := e.stat(h1Host); st.Connections-before.Connections != 1 {
				t.Fatalf("the connection counted %d times under its hostname", st.Connections-before.Connections)
			}
		})
	}
}

// TestSleeperHangUpWithRequest: a client that sends a request to a sleeping connection
// and half-closes at once (the request and the FIN may reach the parker as one event)
// gets its answer, then the end; nothing is left behind.
func TestSleeperHangUpWithRequest(t *testing.T) {
	skipUnlessParking(t)
	e := sleepEnv(t)
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	const n = 16
	rcs := sleepingClients(t, e, n)
	for i, rc := range rcs {
		// Two pipelined requests and the FIN, in one go.
		rc.send(get1(fmt.Sprintf("/last/%d/a", i)) + get1(fmt.Sprintf("/last/%d/b", i)))
		if err := rc.c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
	}
	for i, rc := range rcs {
		for _, p := range []string{"a", "b"} {
			path := fmt.Sprintf("/last/%d/%s", i, p)
			if res, body := rc.read("GET"); res.StatusCode != 200 || body != echoed("GET", path, "") {
				t.Fatalf("connection %d, %s after its FIN: %d %q", i, path, res.StatusCode, body)
			}
		}
		rc.closed()
	}
	waitFor(t, "all closed and given back", func() bool {
		return sleepers(e.srv) == 0 && e.openH1() == 0 && e.srv.clients.Usage(addrA).Conns == 0
	})
}

// TestSleeperAccountingAcrossHosts: one connection's requests go to two hostnames and to
// an unknown one, with sleeps between each: every byte the client sent and received is
// in the HTTP/1.1 totals, and each hostname has exactly its requests' bytes; the
// connection is counted once, under its first hostname.
func TestSleeperAccountingAcrossHosts(t *testing.T) {
	skipUnlessParking(t)
	e := sleepEnv(t)
	tg := echoTarget(t)
	const other = "other.example.test"
	e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}, {host: other, backends: []string{tg.addr}}})
	rc := newRawClient(t, e.http)
	_ = rc.c.SetDeadline(time.Now().Add(30 * time.Second))
	cr := &byteCounter{r: rc.c}
	rc.br = bufio.NewReader(cr)
	before := e.totals.Snapshot()
	type sent struct{ in, out int64 }
	per := map[string]*sent{h1Host: {}, other: {}, "unknown.example.test": {}}
	hosts := []string{h1Host, other, "unknown.example.test", h1Host, other, h1Host}
	parks := parkedTotal.Load()
	for i, h := range hosts {
		req := fmt.Sprintf("GET /r%d HTTP/1.1\r\nHost: %s\r\n\r\n", i, h)
		out0 := cr.n
		rc.send(req)
		res, _ := rc.read("GET")
		if (h == "unknown.example.test") != (res.StatusCode != 200) {
			t.Fatalf("GET /r%d for %s: %d", i, h, res.StatusCode)
		}
		per[h].in += int64(len(req))
		per[h].out += cr.n - out0
		asleepAgain(t, e, 1, parks)
		parks = parkedTotal.Load()
	}
	_ = rc.c.Close()
	var in int64
	for _, s := range per {
		in += s.in
	}
	waitFor(t, "closed", func() bool { return e.openH1() == 0 && sleepers(e.srv) == 0 })
	after := e.totals.Snapshot()
	if gi, go_ := int64(after.BytesIn[0]-before.BytesIn[0]), int64(after.BytesOut[0]-before.BytesOut[0]); gi != in || go_ != cr.n {
		t.Fatalf("HTTP/1.1 totals: %d bytes in, %d out; the wire had %d and %d", gi, go_, in, cr.n)
	}
	for _, h := range []string{h1Host, other} {
		st := e.stat(h)
		if int64(st.BytesIn) != per[h].in || int64(st.BytesOut) != per[h].out {
			t.Errorf("%s: %d bytes in, %d out; its requests had %d and %d", h, st.BytesIn, st.BytesOut, per[h].in, per[h].out)
		}
	}
	if c1, c2 := e.stat(h1Host).Connections, e.stat(other).Connections; c1 != 1 || c2 != 0 {
		t.Errorf("connections counted: %d under %s, %d under %s; want 1 and 0", c1, h1Host, c2, other)
	}
}

// TestSleeperWakeAfterReset: clients that send a request to a sleeping connection and
// reset it at once (SO_LINGER 0): the wake may find the socket no longer connected
// (getpeername fails, so net.FileConn's connection has no remote address). The proxy
// must close such connections and count them closed, not fail on the missing address;
// the other sleepers are served on.
func TestSleeperWakeAfterReset(t *testing.T) {
	skipUnlessParking(t)
	e := sleepEnv(t, func(c *Config) { c.MaxConnsPerClient = -1 })
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	const n = 32
	rcs := sleepingClients(t, e, n)
	for _, rc := range rcs[:n/2] {
		rc.send(get1("/then-reset"))
		_ = rc.c.(*net.TCPConn).SetLinger(0)
		_ = rc.c.Close()
	}
	for i, rc := range rcs[n/2:] {
		path := fmt.Sprintf("/still/%d", i)
		rc.send(get1(path))
		if res, body := rc.read("GET"); res.StatusCode != 200 || body != echoed("GET", path, "") {
			t.Fatalf("GET %s: %d %q", path, res.StatusCode, body)
		}
	}
	for _, rc := range rcs[n/2:] {
		_ = rc.c.Close()
	}
	waitFor(t, "all closed and given back", func() bool {
		return sleepers(e.srv) == 0 && e.openH1() == 0 && e.srv.clients.Usage(addrA).Conns == 0
	})
}

// TestSleeperSlowRequestsStayAwake: in a crowd (h1ParkSoon), a client that sends its
// next request as soon as it has the answer keeps its connection awake whatever the
// requests take: the idle deadline is renewed once half its wait is gone
// (idleDeadlineStale), so requests of 10 ms (no renewal, at least 25 ms of wait left),
// 40 ms (renewed) and 60 ms (the deadline passed while they were served, inside the raw
// loop's RawConn.Read, and is renewed there) alike leave the next wait its time. Every
// answer is the right one.
func TestSleeperSlowRequestsStayAwake(t *testing.T) {
	skipUnlessParking(t)
	for _, d := range []time.Duration{10 * time.Millisecond, 40 * time.Millisecond, 60 * time.Millisecond} {
		t.Run(d.String(), func(t *testing.T) {
			e := sleepEnv(t)
			tg := newH1Target(t, func(c net.Conn, r *http.Request, body string) bool {
				time.Sleep(d) // the target's pace
				return echoAnswer(c, r, body)
			})
			e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}})
			rc := newRawClient(t, e.http)
			_ = rc.c.SetDeadline(time.Now().Add(30 * time.Second))
			const n = 20
			parks := parkedTotal.Load()
			for i := range n {
				path := fmt.Sprintf("/slow/%d", i)
				rc.send(get1(path))
				if res, body := rc.read("GET"); res.StatusCode != 200 || body != echoed("GET", path, "") {
					t.Fatalf("GET %s: %d %q", path, res.StatusCode, body)
				}
			}
			// A client on a loaded machine may take longer than 25 ms to send the next
			// request now and then; a deadline left to pass while requests are served
			// would park after nearly every one.
			if p := parkedTotal.Load() - parks; p > n/4 {
				t.Fatalf("%d requests of %s back to back: the connection parked %d times", n, d, p)
			}
		})
	}
}

// TestSleeperIdleTimeout: a sleeping connection ends at its idle timeout, counted from
// the start of its idle wait (not from when it went to sleep), and gives its place and
// count back.
func TestSleeperIdleTimeout(t *testing.T) {
	skipUnlessParking(t)
	const idle = h1ParkAfter + 500*time.Millisecond
	e := newEnv(t, func(c *Config) { c.IdleTimeout = idle })
	e.srv.parkCrowd = 0
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	rc := newRawClient(t, e.http)
	start := time.Now() // before the request: the idle wait begins once it is answered
	rc.send(get1("/a"))
	rc.read("GET")
	waitFor(t, "asleep", func() bool { return sleepers(e.srv) == 1 })
	_ = rc.c.SetReadDeadline(time.Now().Add(idle + 5*time.Second))
	rc.closed()
	if d := time.Since(start); d < idle-100*time.Millisecond || d > idle+2*time.Second {
		t.Fatalf("a sleeper idle for %s closed after %s", idle, d)
	}
	waitFor(t, "given back", func() bool {
		return sleepers(e.srv) == 0 && e.openH1() == 0 && e.srv.clients.Usage(addrA).Conns == 0
	})
}
