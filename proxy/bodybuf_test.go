package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

func withRequestBuffer(n int64) func(*Config) {
	return func(c *Config) { c.RequestBuffer = n }
}

func withAccessLog(logs **observer.ObservedLogs) func(*Config) {
	return func(c *Config) {
		core, l := observer.New(zap.InfoLevel)
		c.AccessLog = zap.New(core)
		*logs = l
	}
}

// loggedStatuses waits for n access log lines and returns their statuses, sorted.
func loggedStatuses(t *testing.T, logs *observer.ObservedLogs, n int) []int {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d access log lines", n), func() bool { return logs.Len() >= n })
	s := statuses(logs)
	slices.Sort(s)
	return s
}

// byteTarget is a raw HTTP/1.1 target that keeps every byte it received, per
// connection, and answers "ok" to each request it could read whole.
type byteTarget struct {
	addr     string
	accepted atomic.Int32
	mu       sync.Mutex
	got      []*bytes.Buffer // per connection, in the order their goroutines started
}

func newByteTarget(t *testing.T) *byteTarget {
	rt := &byteTarget{}
	rt.addr = rawServer(t, func(c net.Conn) {
		rt.accepted.Add(1)
		var b bytes.Buffer
		rt.mu.Lock()
		rt.got = append(rt.got, &b)
		rt.mu.Unlock()
		br := bufio.NewReader(io.TeeReader(c, lockedWriter{&rt.mu, &b}))
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if _, err := io.Copy(io.Discard, req.Body); err != nil {
				return
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	return rt
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// received is what each connection brought so far.
func (rt *byteTarget) received() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var s []string
	for _, b := range rt.got {
		s = append(s, b.String())
	}
	return s
}

// onlySentinel sends a GET for /sentinel through the proxy at addr (plain HTTP/1.1),
// waits until the target has it, and then fails t unless it was all the target ever
// received: one connection, starting with the sentinel's head. A request that had been
// sent to the target before (a cut body's head) came on a connection of its own, which
// its failure closed.
func (rt *byteTarget) onlySentinel(t *testing.T, addr, host string) {
	t.Helper()
	c := dialRaw(t, addr)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /sentinel HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("the sentinel request: %v %v", res, err)
	}
	res.Body.Close()
	got := rt.received()
	if n := rt.accepted.Load(); n != 1 || len(got) != 1 || !strings.HasPrefix(got[0], "GET /sentinel ") {
		t.Fatalf("the target accepted %d connections and received %q; want only the sentinel", n, got)
	}
	if strings.Contains(got[0], "/bad") {
		t.Fatalf("the malformed request reached the target: %q", got[0])
	}
}

// malformedChunked is a 4 KiB chunked body whose chunk size line in the middle is not
// hexadecimal.
func malformedChunked() string {
	var b strings.Builder
	chunk := strings.Repeat("x", 500)
	for i := 0; i < 8; i++ {
		if i == 4 {
			b.WriteString("zz\r\n" + chunk + "\r\n")
			continue
		}
		fmt.Fprintf(&b, "%x\r\n%s\r\n", len(chunk), chunk)
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

// TestHeldBodyMalformedChunkedNeverReachesTarget: a 4 KiB chunked body with a broken
// size line in the middle is answered 400 (and the connection closed) before any target
// saw the request, on the fast path's listener (which hands chunked bodies to net/http),
// on net/http alone, and over TLS.
func TestHeldBodyMalformedChunkedNeverReachesTarget(t *testing.T) {
	head := "POST /bad HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n"
	for _, tc := range []struct {
		name  string
		h1Off bool
		tls   bool
	}{{"fast path", false, false}, {"net/http", true, false}, {"fast path over TLS", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, withH1OffIf(tc.h1Off))
			rt := newByteTarget(t)
			host := "app.example.test"
			e.tlsRoute(host, rt.addr)
			var c net.Conn = dialRaw(t, e.http)
			if tc.tls {
				c = tls.Client(dialRaw(t, e.https), &tls.Config{InsecureSkipVerify: true, ServerName: host, NextProtos: []string{"http/1.1"}})
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, fmt.Sprintf(head, host)+malformedChunked()); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusBadRequest || !res.Close {
				t.Fatalf("status %d, close %v: want 400 and the connection closed", res.StatusCode, res.Close)
			}
			rt.onlySentinel(t, e.http, host)
			if f := e.stat(host).BackendFailures; f.Request+f.Connect != 0 {
				t.Errorf("backend failures %+v, want none: the client's body was at fault", f)
			}
		})
	}
}

// TestHeldBodyH2LengthMismatchNeverReachesTarget: an HTTP/2 body shorter or longer than
// its content-length is a malformed request (RFC 9113 §8.1.1): its stream is reset with
// PROTOCOL_ERROR, no target saw it, and it is recorded as the 400 it would have got.
func TestHeldBodyH2LengthMismatchNeverReachesTarget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length int
		send   int
	}{{"shorter", 4096, 2048}, {"longer", 1024, 2048}} {
		t.Run(tc.name, func(t *testing.T) {
			var logs *observer.ObservedLogs
			e := newEnv(t, withAccessLog(&logs))
			rt := newByteTarget(t)
			e.apply([]routeSpec{{host: h1Host, backends: []string{rt.addr}}})
			fields := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", h1Host}, {":path", "/bad"},
				{"content-length", strconv.Itoa(tc.length)}}
			_, fr := h2Open(t, e.http, false, fields...)
			_ = fr.WriteData(1, false, bytes.Repeat([]byte("x"), tc.send/2))
			_ = fr.WriteData(1, true, bytes.Repeat([]byte("x"), tc.send/2))
			status, _, rst := h2Await(t, fr, true)
			if status != "" || rst != http2.ErrCodeProtocol {
				t.Fatalf("status %q, reset %v: want the stream reset with PROTOCOL_ERROR", status, rst)
			}
			rt.onlySentinel(t, e.http, h1Host)
			if got := loggedStatuses(t, logs, 2); !slices.Equal(got, []int{200, 400}) {
				t.Errorf("access log statuses %v, want the sentinel's 200 and a 400", got)
			}
			if f := e.stat(h1Host).BackendFailures; f.Request+f.Connect != 0 {
				t.Errorf("backend failures %+v, want none: the client's body was at fault", f)
			}
		})
	}
}

// TestHeldBodyH3ShortNeverReachesTarget: an HTTP/3 body shorter than its content-length
// is answered 400 before any target saw it.
func TestHeldBodyH3ShortNeverReachesTarget(t *testing.T) {
	var logs *observer.ObservedLogs
	e := newEnv(t, withHTTP3, withAccessLog(&logs))
	rt := newByteTarget(t)
	host := "app.example.test"
	e.tlsRoute(host, rt.addr)
	c, _ := e.h3Client()
	req, _ := http.NewRequest("POST", "https://"+host+"/bad", strings.NewReader(strings.Repeat("x", 2048)))
	req.ContentLength = 4096 // the client sends 2048 bytes and ends the stream
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", res.StatusCode)
	}
	rt.onlySentinel(t, e.http, host)
	if got := loggedStatuses(t, logs, 2); !slices.Equal(got, []int{200, 400}) {
		t.Errorf("access log statuses %v, want the sentinel's 200 and a 400", got)
	}
}

// TestHeldBodyH3LongNeverReachesTarget: an HTTP/3 body longer than its content-length
// is a malformed request (RFC 9114 §4.1.2): quic-go resets its stream with
// H3_MESSAGE_ERROR once the held body is read past its length, and no target saw it.
func TestHeldBodyH3LongNeverReachesTarget(t *testing.T) {
	var logs *observer.ObservedLogs
	e := newEnv(t, withHTTP3, withAccessLog(&logs))
	rt := newByteTarget(t)
	host := "app.example.test"
	e.tlsRoute(host, rt.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, e.srv.HTTP3Addr().String(),
		&tls.Config{InsecureSkipVerify: true, ServerName: host, NextProtos: []string{http3.NextProtoH3}}, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = qc.CloseWithError(0, "") }()
	// The client's control stream and SETTINGS, then a request stream written frame by
	// frame: quic-go's own request writer sends no more than the length it states.
	cc := (&http3.Transport{}).NewClientConn(qc)
	select {
	case <-cc.ReceivedSettings():
	case <-ctx.Done():
		t.Fatal("no SETTINGS")
	}
	str, err := qc.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := qpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", host}, {":path", "/bad"}, {"content-length", "1024"}} {
		_ = enc.WriteField(qpack.HeaderField{Name: f[0], Value: f[1]})
	}
	frames := quicvarint.Append(quicvarint.Append(nil, 0x1), uint64(hb.Len())) // HEADERS
	frames = append(frames, hb.Bytes()...)
	for range 2 { // two DATA frames: the first one alone is all the stated length
		frames = quicvarint.Append(quicvarint.Append(frames, 0x0), 1024)
		frames = append(frames, bytes.Repeat([]byte("x"), 1024)...)
	}
	if _, err := str.Write(frames); err != nil {
		t.Fatal(err)
	}
	_ = str.Close()
	_ = str.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(str)
	var se *quic.StreamError
	if !errors.As(err, &se) || se.ErrorCode != quic.StreamErrorCode(http3.ErrCodeMessageError) {
		t.Fatalf("read %q, error %v: want the stream reset with H3_MESSAGE_ERROR; the target got %q", got, err, rt.received())
	}
	rt.onlySentinel(t, e.http, host)
	if got := loggedStatuses(t, logs, 2); !slices.Equal(got, []int{200, 400}) {
		t.Errorf("access log statuses %v, want the sentinel's 200 and a 400", got)
	}
}

// TestHeldBodyStalls408: a body that stalls while it is held is answered 408 under
// ClientBodyTimeout's rule, and no target saw it.
func TestHeldBodyStalls408(t *testing.T) {
	e := newEnv(t, withH1Off, func(c *Config) { c.ClientBodyTimeout = 300 * time.Millisecond })
	rt := newByteTarget(t)
	e.apply([]routeSpec{{host: h1Host, backends: []string{rt.addr}}})
	c := dialRaw(t, e.http)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST /bad HTTP/1.1\r\nHost: %s\r\nContent-Length: 100\r\n\r\nonly this", h1Host)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout || !res.Close {
		t.Fatalf("status %d, close %v: want 408 and the connection closed", res.StatusCode, res.Close)
	}
	rt.onlySentinel(t, e.http, h1Host)
}

// TestHeldBodyH2TrickleGets408: on the own HTTP/2 engine, a held body that sends a byte
// every 50 ms (every wait shorter than ClientBodyTimeout, but no window delivers 1 KiB)
// fails after about one window, and no target saw it: the client gets 408, or its
// stream reset with CANCEL when the engine's wait ran out first (its rule for a stalled
// body); the access log says 408 either way.
func TestHeldBodyH2TrickleGets408(t *testing.T) {
	const timeout = 300 * time.Millisecond
	var logs *observer.ObservedLogs
	e := newEnv(t, withAccessLog(&logs), func(c *Config) { c.ClientBodyTimeout = timeout })
	rt := newByteTarget(t)
	e.apply([]routeSpec{{host: h1Host, backends: []string{rt.addr}}})
	fields := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", h1Host}, {":path", "/bad"},
		{"content-length", "2000"}}
	start := time.Now() // before the stream opens: the server's window may begin with it
	nc, fr := h2Open(t, e.http, false, fields...)
	stop := make(chan struct{})
	wf := http2.NewFramer(nc, nil) // the trickle's own: h2Await's framer answers SETTINGS meanwhile
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for range 1999 {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if err := wf.WriteData(1, false, []byte("x")); err != nil {
				return
			}
		}
	}()
	defer close(stop)
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second)) // the trickle alone would take 100 s
	status, _, rst := h2Await(t, fr, false)
	if status != "408" && !(status == "" && rst == http2.ErrCodeCancel) {
		t.Fatalf("status %q, reset %v: want 408 or the stream reset with CANCEL", status, rst)
	}
	if d := time.Since(start); d < timeout {
		t.Errorf("answered after %s, before a %s window ended", d, timeout)
	}
	rt.onlySentinel(t, e.http, h1Host)
	if got := loggedStatuses(t, logs, 2); !slices.Equal(got, []int{200, 408}) {
		t.Errorf("access log statuses %v, want the sentinel's 200 and a 408", got)
	}
}

// pausingTarget reads one request and tells reached when it has received at least mark
// bytes of its body, then answers with how many it received in all.
func pausingTarget(t *testing.T, mark int64, reached chan<- struct{}) string {
	return rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		var n int64
		buf := make([]byte, 32<<10)
		told := false
		for {
			k, err := req.Body.Read(buf)
			n += int64(k)
			if n >= mark && !told {
				told = true
				close(reached)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return
			}
		}
		body := strconv.FormatInt(n, 10)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	})
}

// pausedBody yields first, then waits for go on before it yields the rest.
type pausedBody struct {
	first, rest int
	goOn        <-chan struct{}
	waited      bool
}

func (b *pausedBody) Read(p []byte) (int, error) {
	if b.first > 0 {
		n := min(len(p), b.first)
		b.first -= n
		return n, nil
	}
	if !b.waited {
		select {
		case <-b.goOn:
		case <-time.After(10 * time.Second):
			return 0, fmt.Errorf("the target never got the first part while the client waited")
		}
		b.waited = true
	}
	if b.rest == 0 {
		return 0, io.EOF
	}
	n := min(len(p), b.rest)
	b.rest -= n
	return n, nil
}

// TestHeldBodyLargeUploadStreams: a 1 MiB upload streams once the bound is held: a client
// that pauses after 128 KiB (until the target says it has them) completes, on every
// front-end that holds bodies.
func TestHeldBodyLargeUploadStreams(t *testing.T) {
	const size, pause = 1 << 20, 128 << 10
	e := newEnv(t, withHTTP3)
	h3c, _ := e.h3Client()
	for _, tc := range []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"HTTP/1.1", &http.Client{Timeout: 20 * time.Second}, "http://" + e.http + "/up"},
		{"h2c", e.h2cClient(), "http://" + e.http + "/up"},
		{"HTTP/3", h3c, "https://app.example.test/up"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reached := make(chan struct{})
			e.tlsRoute("app.example.test", pausingTarget(t, pause, reached))
			req, _ := http.NewRequest("POST", tc.url, &pausedBody{first: pause, rest: size - pause, goOn: reached})
			req.Host = "app.example.test"
			req.ContentLength = size
			res, err := tc.c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || string(b) != strconv.Itoa(size) {
				t.Fatalf("status %d, the target got %q bytes; want 200 and %d", res.StatusCode, b, size)
			}
		})
	}
}

// bodyEchoTarget answers requests with their bodies. With stale, it answers only each
// connection's first one, then reads a byte of the next and closes without answering: a
// keep-alive connection the target closed just as it was reused.
func bodyEchoTarget(t *testing.T, stale bool) string {
	return rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			if stale {
				_, _ = br.ReadByte()
				return
			}
		}
	})
}

// TestHeldBodyReplayedOnStaleConnection: a request whose body was held whole is sent
// again, body included, when the pooled target connection it went out on turns out
// dead, if its method or an idempotency key allows it (upstream.Replayable), on every
// front-end; a POST without a key is not.
func TestHeldBodyReplayedOnStaleConnection(t *testing.T) {
	e := newEnv(t, withHTTP3)
	h3c, _ := e.h3Client()
	const host, body = "app.example.test", "hello world"
	for _, tc := range []struct {
		name    string
		c       *http.Client
		url     string
		chunked bool
		keyed   bool
	}{
		{"fast path", &http.Client{Timeout: 10 * time.Second}, "http://" + e.http + "/up", false, true},
		{"HTTP/1.1 chunked on net/http", &http.Client{Timeout: 10 * time.Second}, "http://" + e.http + "/up", true, true},
		{"h2c", e.h2cClient(), "http://" + e.http + "/up", false, true},
		{"HTTP/3", h3c, "https://" + host + "/up", false, true},
		{"h2c without a key", e.h2cClient(), "http://" + e.http + "/up", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := bodyEchoTarget(t, true)
			e.tlsRoute(host, addr)
			for i := range 2 {
				if i == 1 {
					waitFor(t, "the target connection pooled", func() bool { return e.srv.up.Idle(addr) == 1 })
				}
				var rd io.Reader = strings.NewReader(body)
				if tc.chunked {
					rd = io.MultiReader(rd) // no length known: sent chunked
				}
				req, _ := http.NewRequest("POST", tc.url, rd)
				req.Host = host
				if tc.keyed {
					req.Header.Set("Idempotency-Key", "k"+strconv.Itoa(i))
				}
				res, err := tc.c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				switch {
				case i == 0 || tc.keyed:
					if res.StatusCode != 200 || string(b) != body {
						t.Fatalf("request %d: %d %q, want 200 and the body sent again", i, res.StatusCode, b)
					}
				case res.StatusCode != http.StatusBadGateway:
					t.Fatalf("request %d without a key: %d, want 502 (not sent again)", i, res.StatusCode)
				}
			}
		})
	}
}

// slowBody yields first, waits pause, then yields rest: a client whose body takes longer
// than the target's header timeout to arrive, within the held bound.
type slowBody struct {
	first, rest []byte
	pause       time.Duration
	paused      bool
}

func (b *slowBody) Read(p []byte) (int, error) {
	if len(b.first) > 0 {
		n := copy(p, b.first)
		b.first = b.first[n:]
		return n, nil
	}
	if !b.paused {
		b.paused = true
		time.Sleep(b.pause) // the client's pace, not a wait for an event
	}
	if len(b.rest) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.rest)
	b.rest = b.rest[n:]
	return n, nil
}

// TestHeldBodyHeaderTimeoutStartsAfterBody: the time a body takes to arrive while it is
// held does not count against the target's header timeout, which starts once the body
// went out.
func TestHeldBodyHeaderTimeoutStartsAfterBody(t *testing.T) {
	const timeout = 300 * time.Millisecond
	var logs *observer.ObservedLogs // the access log: requests then have a start time of their own
	e := newEnv(t, withHTTP3, withAccessLog(&logs), func(c *Config) { c.ResponseHeaderTimeout = timeout })
	h3c, _ := e.h3Client()
	const host = "app.example.test"
	e.tlsRoute(host, bodyEchoTarget(t, false))
	for _, tc := range []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"HTTP/1.1 on net/http", &http.Client{Timeout: 10 * time.Second}, "http://" + e.http + "/up"},
		{"h2c", e.h2cClient(), "http://" + e.http + "/up"},
		{"HTTP/3", h3c, "https://" + host + "/up"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			half := bytes.Repeat([]byte("x"), 5000)
			req, _ := http.NewRequest("POST", tc.url, &slowBody{first: half, rest: half, pause: 3 * timeout})
			req.Host = host
			req.ContentLength = int64(2 * len(half))
			res, err := tc.c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || len(b) != 2*len(half) {
				t.Fatalf("%d, %d bytes back: want 200 and the body (the header timeout ran while the body came)", res.StatusCode, len(b))
			}
		})
	}
}

// TestHeldBodyCostsNoAllocation: holding a small body (pooled buffers) allocates nothing
// more per request than streaming it: 1000-byte POSTs over the own HTTP/2 engine, with
// Config.RequestBuffer off and at its default (proxy and target together).
func TestHeldBodyCostsNoAllocation(t *testing.T) {
	var got [2]float64
	for i, rb := range []int64{-1, 0} {
		// Thousands of streams on one connection: past HTTP2MaxStreamsPerConn's default.
		e := newEnv(t, withRequestBuffer(rb), func(c *Config) { c.HTTP2MaxStreamsPerConn = 1 << 30 })
		tg := rawServer(t, func(c net.Conn) {
			br := bufio.NewReader(c)
			for {
				clen := 0
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						return
					}
					if len(line) <= 2 {
						break
					}
					if len(line) > 16 && strings.EqualFold(string(line[:15]), "content-length:") {
						clen, _ = strconv.Atoi(strings.TrimSpace(string(line[15:])))
					}
				}
				_, _ = br.Discard(clen)
				_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"))
			}
		})
		e.apply([]routeSpec{{host: "app.example.test", backends: []string{tg}}})
		c := dialRaw(t, e.http)
		fr := http2.NewFramer(c, nil)
		br := bufio.NewReader(c)
		var payload [64 << 10]byte
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		fl := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "app.example.test"}, {":path", "/bench"}, {"content-length", "1000"}}
		for _, f := range fl {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		first := bytes.Clone(hb.Bytes())
		hb.Reset()
		for _, f := range fl {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		block := bytes.Clone(hb.Bytes())
		body := make([]byte, 1000)
		_, _ = c.Write([]byte(http2.ClientPreface))
		_ = fr.WriteSettings()
		id := uint32(1)
		var failed error
		do := func() {
			if failed != nil {
				return
			}
			b := block
			if id == 1 {
				b = first
			}
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndHeaders: true}); err != nil {
				failed = err
				return
			}
			if err := fr.WriteData(id, true, body); err != nil {
				failed = err
				return
			}
			if err := readToEndStream(br, payload[:], id); err != nil {
				failed = err
				return
			}
			id += 2
		}
		for range 200 {
			do()
		}
		allocs := testing.AllocsPerRun(2000, do)
		if failed != nil {
			t.Fatal(failed)
		}
		t.Logf("RequestBuffer %d: %.1f allocations per 1000-byte POST", rb, allocs)
		got[i] = allocs
	}
	limit := got[0]
	if raceEnabled {
		limit += 3 // sync.Pool drops a share of what is put back under the race detector
	}
	if got[1] > limit {
		t.Errorf("%.1f allocations per POST whose body is held, %.1f when it streams", got[1], got[0])
	}
}
