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
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// Client progress timeouts (Config.ClientBodyTimeout and Config.ClientSendTimeout) on
// the paths net/http and quic-go serve: the HTTP/1.1 connections the fast path hands
// off, HTTP/2 (h2c here; h2 over TLS is the same server) and HTTP/3.

const progressTimeout = 300 * time.Millisecond

// withProgressTimeouts sets both timeouts to progressTimeout and records the access log
// in logs.
func withProgressTimeouts(logs **observer.ObservedLogs) func(*Config) {
	return func(c *Config) {
		c.ClientBodyTimeout = progressTimeout
		c.ClientSendTimeout = progressTimeout
		core, l := observer.New(zap.InfoLevel)
		c.AccessLog = zap.New(core)
		*logs = l
	}
}

// statuses returns the statuses of the access log's lines so far.
func statuses(logs *observer.ObservedLogs) []int {
	var out []int
	for _, en := range logs.All() {
		if v, ok := en.ContextMap()["status"]; ok {
			out = append(out, int(v.(int64)))
		}
	}
	return out
}

// waitStatuses waits until the access log has n lines, all with status want, and
// empties it.
func waitStatuses(t *testing.T, logs *observer.ObservedLogs, n, want int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d access log lines", n), func() bool { return logs.Len() >= n })
	got := statuses(logs)
	logs.TakeAll()
	for _, st := range got {
		if st != want {
			t.Errorf("access log statuses %v, want %d each", got, want)
			return
		}
	}
}

func noBackendFailures(t *testing.T, e *env) {
	t.Helper()
	if f := e.totals.Snapshot().BackendFailures; f != [len(f)]uint64{} {
		t.Errorf("backend failures counted: %v", f)
	}
}

// recv waits for n values on ch, failing t after limit.
func recv[T any](t *testing.T, what string, ch <-chan T, n int, limit time.Duration) []T {
	t.Helper()
	deadline := time.After(limit)
	var got []T
	for len(got) < n {
		select {
		case v := <-ch:
			got = append(got, v)
		case <-deadline:
			t.Fatalf("%s: %d of %d after %s", what, len(got), n, limit)
		}
	}
	return got
}

// signal sends on ch unless its buffer is full (a target must never block on a test that
// stopped listening).
func signal[T any](ch chan<- T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// bigTarget answers every request with size zero bytes (Content-Length), reports on
// opened when it starts answering and on closed when it has seen its connection closed
// (a failed write, or EOF after the whole answer).
func bigTarget(t *testing.T, size int64, opened, closed chan<- struct{}) string {
	return rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		signal(opened, struct{}{})
		_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", size)
		if err == nil {
			_, err = io.CopyN(c, zeros{}, size)
		}
		if err == nil {
			_, _ = io.Copy(io.Discard, br)
		}
		signal(closed, struct{}{})
	})
}

// uploadTarget reads a request's body until it ends or fails and reports how much it
// got (-1 when not even the head arrived before the connection closed); a whole body
// is answered 200.
func uploadTarget(t *testing.T, got chan<- int64) string {
	return rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			signal(got, -1)
			return
		}
		n, err := io.Copy(io.Discard, req.Body)
		if err == nil {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
		signal(got, n)
	})
}

// dripReader yields size bytes, one per every, for a client that uploads more slowly
// than a window allows but fast enough for a deadline per read.
type dripReader struct {
	left  int
	every time.Duration
	stop  chan struct{}
}

func (d *dripReader) Read(p []byte) (int, error) {
	if d.left == 0 {
		return 0, io.EOF
	}
	select {
	case <-time.After(d.every):
	case <-d.stop:
		return 0, errors.New("stopped")
	}
	p[0] = 'x'
	d.left--
	return 1, nil
}

// TestH2ZeroWindowStreamsAreReset: an h2c client that grants its streams no
// flow-control window (SETTINGS_INITIAL_WINDOW_SIZE 0) and never sends WINDOW_UPDATE
// gets each stream reset once a write has waited ClientSendTimeout; every target
// connection is closed, the handlers are gone while the client's connection stays open,
// and the requests are recorded as client disconnects, not backend failures.
func TestH2ZeroWindowStreamsAreReset(t *testing.T) {
	const streams = 20
	var logs *observer.ObservedLogs
	e := newEnv(t, withProgressTimeouts(&logs))
	opened, closed := make(chan struct{}, streams), make(chan struct{}, streams)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{bigTarget(t, 16<<20, opened, closed)}}})

	h := dialH2Raw(t, e.http, 0)
	if got := h.serverSetting(t, http2.SettingMaxConcurrentStreams); got != maxConcurrentStreams {
		t.Errorf("server allows %d concurrent streams, want %d", got, maxConcurrentStreams)
	}
	base := runtime.NumGoroutine()
	start := time.Now()
	for i := range streams {
		h.get(t, uint32(2*i+1), "app.example.test", "/big")
	}
	recv(t, "targets answering", opened, streams, 10*time.Second)
	ended := recv(t, "streams reset", h.ended, streams, 10*time.Second)
	if d := time.Since(start); d < progressTimeout {
		t.Errorf("streams ended after %s, before the %s send timeout", d, progressTimeout)
	}
	for _, f := range ended {
		if f.rst != http2.ErrCodeInternal {
			t.Errorf("stream %d ended by %T %v, want RST_STREAM INTERNAL_ERROR", f.id, f.frame, f.rst)
		}
	}
	recv(t, "target connections closed", closed, streams, 10*time.Second)
	if n := h.data.Load(); n != 0 {
		t.Errorf("%d DATA bytes sent into a zero window", n)
	}
	waitFor(t, "handler goroutines to end", func() bool { return runtime.NumGoroutine() <= base+2 })
	waitStatuses(t, logs, streams, statusClientClosed)
	noBackendFailures(t, e)
	if h.goaway.Load() {
		t.Error("the connection was sent away: only its streams should end")
	}
}

// TestSlowUploadGets408: an upload that sends a byte every 100 ms (every read would
// meet a 300 ms deadline, but no 300 ms window delivers 1 KiB) is answered 408 after
// about one window on every net/http and HTTP/3 path, and the target's connection is
// closed before it got the body. Bodies are not held here (Config.RequestBuffer):
// the timeout of a body that streams is tested; TestHeldBodyFailures has one that
// stalls while held.
func TestSlowUploadGets408(t *testing.T) {
	const size = 64 << 10
	var logs *observer.ObservedLogs
	e := newEnv(t, withProgressTimeouts(&logs), withHTTP3, withH1Off, withRequestBuffer(-1))
	h3c, _ := e.h3Client()

	upload := func(t *testing.T, c *http.Client, url string) {
		stop := make(chan struct{})
		defer close(stop)
		req, _ := http.NewRequest("POST", url, &dripReader{left: size, every: 100 * time.Millisecond, stop: stop})
		req.Host = "app.example.test"
		req.ContentLength = size
		start := time.Now()
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("upload: %v", err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("status %d, want 408", res.StatusCode)
		}
		if d := time.Since(start); d < progressTimeout {
			t.Errorf("answered after %s, before a %s window ended", d, progressTimeout)
		}
	}
	cases := []struct {
		name string
		do   func(t *testing.T)
	}{
		{"HTTP/1.1 on net/http", func(t *testing.T) {
			c := dialRaw(t, e.http)
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				if _, err := fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: app.example.test\r\nContent-Length: %d\r\n\r\n", size); err != nil {
					return
				}
				_, _ = io.Copy(c, &dripReader{left: size, every: 100 * time.Millisecond, stop: stop})
			}()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			if res.StatusCode != http.StatusRequestTimeout || !res.Close {
				t.Fatalf("status %d, close %v: want 408 and the connection closed", res.StatusCode, res.Close)
			}
		}},
		{"h2c", func(t *testing.T) { upload(t, e.h2cClient(), "http://app.example.test/up") }},
		{"h2", func(t *testing.T) { upload(t, e.tlsClient(true), "https://app.example.test/up") }},
		{"HTTP/3", func(t *testing.T) { upload(t, h3c, "https://app.example.test/up") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan int64, 1)
			e.tlsRoute("app.example.test", uploadTarget(t, got))
			tc.do(t)
			if n := recv(t, "target connection closed", got, 1, 10*time.Second)[0]; n >= size {
				t.Errorf("the target got the whole body (%d bytes)", n)
			}
			waitStatuses(t, logs, 1, http.StatusRequestTimeout)
		})
	}
	noBackendFailures(t, e)
}

// TestUnreadResponseIsCut: clients that never read a 10 MiB answer (HTTP/1.1 on
// net/http, HTTP/3) are cut once a write has waited ClientSendTimeout; the target's
// connection is closed and the request recorded as a client disconnect.
func TestUnreadResponseIsCut(t *testing.T) {
	const size = 10 << 20
	var logs *observer.ObservedLogs
	e := newEnv(t, withProgressTimeouts(&logs), withHTTP3, withH1Off)
	target := func(t *testing.T) (opened, closed chan struct{}) {
		opened, closed = make(chan struct{}, 1), make(chan struct{}, 1)
		e.tlsRoute("app.example.test", bigTarget(t, size, opened, closed))
		return opened, closed
	}

	t.Run("HTTP/1.1 on net/http", func(t *testing.T) {
		opened, closed := target(t)
		c := dialRaw(t, e.http)
		_ = c.(*net.TCPConn).SetReadBuffer(8 << 10)
		if _, err := io.WriteString(c, "GET /big HTTP/1.1\r\nHost: app.example.test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		recv(t, "target answering", opened, 1, 10*time.Second)
		recv(t, "target connection closed", closed, 1, 10*time.Second)
		// The client still finds what the kernel had queued for it before the FIN, as
		// slowly as its window lets it: the proxy's side of the connection is what ends.
		waitFor(t, "the client's connection closed", func() bool { return e.totals.Snapshot().Conns[stats.ProtoHTTP1] == 0 })
		waitStatuses(t, logs, 1, statusClientClosed)
	})
	t.Run("HTTP/3", func(t *testing.T) {
		opened, closed := target(t)
		tr := &http3.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
			QUICConfig:      &quic.Config{InitialStreamReceiveWindow: 64 << 10, MaxStreamReceiveWindow: 64 << 10},
			Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
				return quic.DialAddr(ctx, e.srv.HTTP3Addr().String(), tlsCfg, cfg)
			},
		}
		defer tr.Close()
		res, err := (&http.Client{Transport: tr, Timeout: 20 * time.Second}).Get("https://app.example.test/big")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		recv(t, "target answering", opened, 1, 10*time.Second)
		recv(t, "target connection closed", closed, 1, 10*time.Second)
		n, err := io.Copy(io.Discard, res.Body)
		if err == nil || n >= size {
			t.Errorf("read %d bytes and %v: want the stream reset", n, err)
		}
		waitStatuses(t, logs, 1, statusClientClosed)
	})
	noBackendFailures(t, e)
}

// TestProgressingTransfersAreNotCut: with both timeouts at 300 ms, transfers that keep
// moving, and targets that pause for longer than the timeouts (answering, or taking an
// upload), are untouched on every path: time spent waiting for the target never counts
// against the client, and HTTP/2's per-stream timers do not run while it passes.
func TestProgressingTransfersAreNotCut(t *testing.T) {
	const pause = 4 * progressTimeout
	var logs *observer.ObservedLogs
	e := newEnv(t, withProgressTimeouts(&logs), withHTTP3, withH1Off)
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/pause": // 256 KiB, a pause, 256 KiB (Content-Length)
			w.Header().Set("Content-Length", strconv.Itoa(512<<10))
			io.CopyN(w, zeros{}, 256<<10)
			w.(http.Flusher).Flush()
			time.Sleep(pause) // the target's pause is the input under test
			io.CopyN(w, zeros{}, 256<<10)
		case "/events": // an event, a pause, an event (no length: flushed as it comes)
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: one\n\n")
			w.(http.Flusher).Flush()
			time.Sleep(pause) // the target's pause is the input under test
			io.WriteString(w, "data: two\n\n")
		case "/up":
			n, _ := io.Copy(io.Discard, r.Body)
			io.WriteString(w, strconv.FormatInt(n, 10))
		}
	}))
	slowTaker := rawServer(t, func(c net.Conn) { // reads 1 MiB of an upload, pauses, reads the rest
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		n, _ := io.CopyN(io.Discard, req.Body, 1<<20)
		time.Sleep(pause) // the target's pause is the input under test
		m, _ := io.Copy(io.Discard, req.Body)
		body := strconv.FormatInt(n+m, 10)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	})
	cert := &routetable.RouteTLS{CertificateID: "c1"} // for HTTP/3; plain HTTP is served too
	e.apply([]routeSpec{
		{host: "app.example.test", tls: cert, backends: []string{be}},
		{host: "slow.example.test", tls: cert, backends: []string{slowTaker}},
	}, certSpec{"c1", []string{"app.example.test", "slow.example.test"}})
	h3c, _ := e.h3Client()
	clients := []struct {
		name string
		c    *http.Client
		base string
	}{
		{"HTTP/1.1 on net/http", e.h1Client(), "http://"},
		{"h2c", e.h2cClient(), "http://"},
		{"HTTP/3", h3c, "https://"},
	}
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			t.Run("target pauses its answer", func(t *testing.T) {
				res, body := get(t, cl.c, cl.base+"app.example.test/pause", "")
				if res.StatusCode != 200 || len(body) != 512<<10 {
					t.Fatalf("status %d, %d bytes", res.StatusCode, len(body))
				}
				waitStatuses(t, logs, 1, 200)
			})
			t.Run("event stream pauses", func(t *testing.T) {
				res, body := get(t, cl.c, cl.base+"app.example.test/events", "")
				if res.StatusCode != 200 || body != "data: one\n\ndata: two\n\n" {
					t.Fatalf("status %d, body %q", res.StatusCode, body)
				}
				waitStatuses(t, logs, 1, 200)
			})
			// The uploads come from this process: an attempt cut while it was held still
			// (or, for the steady one, while its client lost its pace) proves nothing
			// and is run again (steady_test.go).
			t.Run("target pauses taking an upload", func(t *testing.T) {
				const size = 32 << 20 // more than the socket buffers hold: the proxy waits
				untilConclusive(t, 3, progressTimeout/2, func(t *testing.T) (bool, time.Duration, string) {
					stalls := watchStalls(t)
					status, b := upload(cl.c.Post(cl.base+"slow.example.test/up", "application/octet-stream", io.LimitReader(zeros{}, size)))
					stalled := stalls()
					return uploadVerdict(t, logs, status, b, size, stalled, fmt.Sprintf("this process stalled up to %s", stalled))
				})
			})
			t.Run("slow but steady upload", func(t *testing.T) {
				// 2 KiB every 100 ms: each 300 ms window gets its 1 KiB.
				const size = 12 * (2 << 10)
				untilConclusive(t, 3, progressTimeout/2, func(t *testing.T) (bool, time.Duration, string) {
					stalls := watchStalls(t)
					var late lateness
					pr, pw := io.Pipe()
					wrote := make(chan struct{})
					defer func() { pr.Close(); <-wrote }()
					go func() {
						defer close(wrote)
						chunk := bytes.Repeat([]byte("y"), 2<<10)
						for range 12 {
							t0 := time.Now()
							time.Sleep(100 * time.Millisecond) // the client's pace is the input under test
							if _, err := pw.Write(chunk); err != nil {
								return
							}
							now := time.Now()
							late.add(now, now.Sub(t0)-100*time.Millisecond)
						}
						pw.Close()
					}()
					req, _ := http.NewRequest("POST", cl.base+"app.example.test/up", pr)
					req.ContentLength = size
					status, b := upload(cl.c.Do(req))
					stalled := stalls()
					lost := late.worst(progressTimeout)
					return uploadVerdict(t, logs, status, b, size, lost+stalled,
						fmt.Sprintf("the client lost up to %s of a %s window, this process stalled up to %s", lost, progressTimeout, stalled))
				})
			})
		})
	}
	noBackendFailures(t, e)
	if n := e.totals.Snapshot().Requests[stats.ProtoHTTP2][2]; n != 4 {
		t.Errorf("%d HTTP/2 requests succeeded, want 4", n)
	}
}

// upload returns an upload's status and answer, or 0 and the error that ended it.
func upload(res *http.Response, err error) (int, string) {
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, err.Error()
	}
	return res.StatusCode, string(b)
}

// uploadVerdict judges one upload of TestProgressingTransfersAreNotCut for
// untilConclusive: whole (the target read size bytes and answered 200, logged 200) or
// cut (anything else, a failed request too). It takes the upload's access log line.
func uploadVerdict(t *testing.T, logs *observer.ObservedLogs, status int, body string, size int, stalled time.Duration, how string) (bool, time.Duration, string) {
	t.Helper()
	waitFor(t, "the upload's access log line", func() bool { return logs.Len() >= 1 })
	logged := statuses(logs)
	logs.TakeAll()
	what := fmt.Sprintf("status %d, answer %q (the bytes the target read, of %d) (access log %v); %s", status, body, size, logged, how)
	whole := status == 200 && body == strconv.Itoa(size)
	if whole && (len(logged) != 1 || logged[0] != 200) {
		t.Fatalf("a whole upload logged with statuses %v", logged)
	}
	return !whole, stalled, what
}

// TestSlowSteadyReaderIsNotCut: a client that reads a 16 MiB answer at its own steady
// pace (128 KiB every 10 ms, so that the proxy's writes wait for it once the socket
// buffers are full, and the whole transfer takes several send timeouts) gets all of it:
// the timeout bounds each write, not the response. The reader runs in a process of its
// own, and an attempt cut while the reader or this process lost half a timeout to the
// machine's scheduling proves nothing and is run again (steady_test.go).
func TestSlowSteadyReaderIsNotCut(t *testing.T) {
	const size = 16 << 20
	var logs *observer.ObservedLogs
	e := newEnv(t, withProgressTimeouts(&logs), withH1Off)
	opened, closed := make(chan struct{}, 4), make(chan struct{}, 4)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{bigTarget(t, size, opened, closed)}}})
	untilConclusive(t, 3, progressTimeout/2, func(t *testing.T) (bool, time.Duration, string) {
		stalls := watchStalls(t)
		n, status, readerLate, took := readSlowlyElsewhere(t, slowRead{addr: e.http, host: "app.example.test", path: "/big",
			chunk: 128 << 10, pace: 10 * time.Millisecond, window: progressTimeout})
		stalled := stalls()
		waitFor(t, "the access log line", func() bool { return logs.Len() >= 1 })
		logged := statuses(logs)
		logs.TakeAll()
		what := fmt.Sprintf("status %d, read %d of %d bytes in %s (access log %v); the reader lost up to %s of a %s window, this process stalled up to %s",
			status, n, size, took.Round(time.Millisecond), logged, readerLate, progressTimeout, stalled)
		if status != 200 {
			t.Fatal(what)
		}
		if n == size {
			if len(logged) != 1 || logged[0] != 200 {
				t.Fatalf("a whole answer logged with statuses %v", logged)
			}
			return false, 0, what
		}
		return true, readerLate + stalled, what
	})
}

// TestWebSocketIdleOutlivesProgressTimeouts: a WebSocket tunnel is idle-legit: it is not
// subject to the client body or send timeouts.
func TestWebSocketIdleOutlivesProgressTimeouts(t *testing.T) {
	var logs *observer.ObservedLogs
	e := newEnv(t, withProgressTimeouts(&logs))
	e.apply([]routeSpec{{host: "ws.example.test", backends: []string{wsEcho(t)}}})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+e.http+"/ws", &websocket.DialOptions{Host: "ws.example.test", HTTPClient: e.h1Client()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	for i := range 2 {
		if i > 0 {
			time.Sleep(4 * progressTimeout) // idle for longer than both timeouts
		}
		msg := []byte("message " + strconv.Itoa(i))
		if err := c.Write(ctx, websocket.MessageText, msg); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if _, b, err := c.Read(ctx); err != nil || !bytes.Equal(b, msg) {
			t.Fatalf("read %d: %q %v", i, b, err)
		}
	}
}

// h2Raw is a minimal prior-knowledge HTTP/2 client on one TCP connection, for what
// net/http's client will not do: leave its streams' flow-control windows shut.
type h2Raw struct {
	c        net.Conn
	fr       *http2.Framer
	wmu      sync.Mutex // frame writes and enc
	enc      *hpack.Encoder
	hbuf     bytes.Buffer
	settings chan http2.Setting
	ended    chan h2End // streams the server reset or ended
	data     atomic.Int64
	goaway   atomic.Bool
}

type h2End struct {
	id    uint32
	frame http2.Frame
	rst   http2.ErrCode
}

// dialH2Raw sends the preface and SETTINGS_INITIAL_WINDOW_SIZE window, and reads frames
// until the connection closes: SETTINGS and PING are acknowledged, DATA never opens a
// window.
func dialH2Raw(t *testing.T, addr string, window uint32) *h2Raw {
	c := dialRaw(t, addr)
	h := &h2Raw{c: c, fr: http2.NewFramer(c, c), settings: make(chan http2.Setting, 16), ended: make(chan h2End, 1024)}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	h.write(t, func(fr *http2.Framer) error {
		return fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
	})
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = f.ForeachSetting(func(s http2.Setting) error {
						select {
						case h.settings <- s:
						default:
						}
						return nil
					})
					h.wmu.Lock()
					_ = h.fr.WriteSettingsAck()
					h.wmu.Unlock()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					h.wmu.Lock()
					_ = h.fr.WritePing(true, f.Data)
					h.wmu.Unlock()
				}
			case *http2.RSTStreamFrame:
				signal(h.ended, h2End{id: f.StreamID, frame: f, rst: f.ErrCode})
			case *http2.DataFrame:
				h.data.Add(int64(len(f.Data())))
				if f.StreamEnded() {
					signal(h.ended, h2End{id: f.StreamID, frame: f})
				}
			case *http2.HeadersFrame:
				if f.StreamEnded() {
					signal(h.ended, h2End{id: f.StreamID, frame: f})
				}
			case *http2.GoAwayFrame:
				h.goaway.Store(true)
			}
		}
	}()
	return h
}

func (h *h2Raw) write(t *testing.T, fn func(*http2.Framer) error) {
	t.Helper()
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if err := fn(h.fr); err != nil {
		t.Fatal(err)
	}
}

// serverSetting waits for the server's SETTINGS and returns setting id's value.
func (h *h2Raw) serverSetting(t *testing.T, id http2.SettingID) uint32 {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case s := <-h.settings:
			if s.ID == id {
				return s.Val
			}
		case <-timeout:
			t.Fatalf("the server sent no %v", id)
		}
	}
}

// get opens stream id with a GET for host and path (no body).
func (h *h2Raw) get(t *testing.T, id uint32, host, path string) {
	t.Helper()
	h.write(t, func(fr *http2.Framer) error {
		if h.enc == nil {
			h.enc = hpack.NewEncoder(&h.hbuf)
		}
		h.hbuf.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", host}, {":path", path}} {
			_ = h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hbuf.Bytes(), EndStream: true, EndHeaders: true})
	})
}
