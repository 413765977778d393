package h2

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// client returns Go's HTTP/2 client for ts (h2c with prior knowledge or TLS).
func (ts *testServer) client() *http.Client {
	p := new(http.Protocols)
	tr := &http.Transport{Protocols: p}
	if ts.tls != nil {
		p.SetHTTP2(true)
		tr.TLSClientConfig = ts.tls
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	return &http.Client{Transport: tr}
}

func (ts *testServer) url() string {
	if ts.tls != nil {
		return "https://" + ts.addr
	}
	return "http://" + ts.addr
}

func TestEngineRoundTrips(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "h2c", true: "tls"}[useTLS], func(t *testing.T) {
			ts := startServer(t, Config{}, echoHandler, useTLS)
			c := ts.client()
			res, err := c.Get(ts.url() + "/x")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || !strings.HasPrefix(string(b), "hello") || res.ContentLength != int64(len(b)) {
				t.Fatalf("GET: %d %q (length %d)", res.StatusCode, b, res.ContentLength)
			}

			// A body larger than every window, both ways, on several streams at once.
			big := make([]byte, 5<<20+17)
			rand.Read(big)
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					res, err := c.Post(ts.url()+"/up", "application/octet-stream", bytes.NewReader(big))
					if err != nil {
						t.Error(err)
						return
					}
					got, err := io.ReadAll(res.Body)
					res.Body.Close()
					if err != nil || !bytes.Equal(got, big) {
						t.Errorf("echo of %d bytes: got %d, %v", len(big), len(got), err)
					}
				})
			}
			wg.Wait()

			// Trailers go through.
			req, _ := http.NewRequest("POST", ts.url()+"/tr", io.NopCloser(strings.NewReader("abc")))
			req.Trailer = http.Header{"X-Sum": nil}
			req.ContentLength = -1
			req.Trailer.Set("X-Sum", "42")
			res, err = c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ = io.ReadAll(res.Body)
			res.Body.Close()
			if string(b) != "abc" || res.Trailer.Get("X-Sum") != "42" {
				t.Fatalf("trailers: body %q trailer %v", b, res.Trailer)
			}
		})
	}
}

// TestEngineRejectsMalformed: RFC 9113 request rules are stream errors, and nothing of
// such a request reaches the handler.
func TestEngineRejectsMalformed(t *testing.T) {
	reached := make(chan string, 16)
	h := HandlerFunc(func(st *Stream) {
		c, _ := st.Request().Get("cookie")
		reached <- st.Request().Path + "|" + c
		echoHandler(st)
	})
	ts := startServer(t, Config{}, h, false)
	cases := map[string][][2]string{
		"connection field": {{"connection", "close"}},
		"te gzip":          {{"te", "gzip"}},
		"upgrade":          {{"upgrade", "websocket"}},
		"host mismatch":    {{"host", "other.example"}},
		"bad cl":           {{"content-length", "1x"}},
		"cl with end":      {{"content-length", "3"}},
	}
	for name, extra := range cases {
		t.Run(name, func(t *testing.T) {
			p := newPeer(t, ts)
			fields := append([][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "a.example"}, {":path", "/" + name}}, extra...)
			p.headers(1, true, fields...)
			if code := p.expectReset(1); code != http2.ErrCodeProtocol {
				t.Fatalf("reset code %v, want PROTOCOL_ERROR", code)
			}
		})
	}
	// A good request on a fresh connection is served, cookies joined.
	p := newPeer(t, ts)
	p.headers(1, true, [2]string{":method", "GET"}, [2]string{":scheme", "http"}, [2]string{":authority", "a.example"},
		[2]string{":path", "/ok"}, [2]string{"cookie", "a=1"}, [2]string{"cookie", "b=2"}, [2]string{"host", "a.example"})
	if st := p.expectResponse(1); st != "200" {
		t.Fatalf("status %s", st)
	}
	select {
	case path := <-reached:
		if path != "/ok|a=1; b=2" {
			t.Fatalf("handler saw %q", path)
		}
	default:
		t.Fatal("handler not reached")
	}
	if len(reached) != 0 {
		t.Fatalf("a malformed request reached the handler: %q", <-reached)
	}
}

// TestUnreadBodiesReturnWindow: request bodies a handler never reads (it answers first)
// give their connection window back when their streams close; else a few such
// requests would stall every later upload on the connection.
func TestUnreadBodiesReturnWindow(t *testing.T) {
	h := HandlerFunc(func(st *Stream) {
		if st.Request().Path == "/echo" {
			echoHandler(st)
			return
		}
		_ = st.WriteHead(200, nil, nil, true) // the body is left unread
	})
	ts := startServer(t, Config{}, h, false)
	c := ts.client()
	body := make([]byte, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 12 {
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.url()+"/ignore", bytes.NewReader(body))
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		res.Body.Close()
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.url()+"/echo", bytes.NewReader(body))
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || len(got) != len(body) {
		t.Fatalf("echo after unread bodies: %d bytes, %v", len(got), err)
	}
}

// writeCounter counts the writes to a connection's socket.
type writeCounter struct {
	net.Conn
	n *atomic.Int64
}

func (w writeCounter) Write(p []byte) (int, error) {
	w.n.Add(1)
	return w.Conn.Write(p)
}

// TestSmallResponseOneWrite: a small response's HEADERS and DATA(END_STREAM) leave in
// one write to the socket (one TLS record write over TLS).
func TestSmallResponseOneWrite(t *testing.T) {
	var writes atomic.Int64
	ts := startServerWrapped(t, Config{}, echoHandler, true, func(nc net.Conn) net.Conn { return writeCounter{nc, &writes} })
	p := newPeer(t, ts)
	_ = p.fr.WriteSettingsAck()
	for acked := false; !acked; {
		f, err := p.next()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && sf.IsAck() {
			acked = true
		}
	}
	for i := range 5 {
		before := writes.Load()
		id := uint32(2*i + 1)
		p.get(id, "/small")
		for ended := false; !ended; {
			f, err := p.next()
			if err != nil {
				t.Fatal(err)
			}
			if d, ok := f.(*http2.DataFrame); ok && d.StreamID == id && d.StreamEnded() {
				ended = true
			}
		}
		if n := writes.Load() - before; n != 1 {
			t.Fatalf("response %d took %d writes, want 1", i, n)
		}
	}
}

func TestSameAuthority(t *testing.T) {
	for _, c := range []struct {
		a, b, scheme string
		want         bool
	}{
		{"a.example", "A.Example", "https", true},
		{"a.example:443", "a.example", "https", true},
		{"a.example:80", "a.example", "http", true},
		{"a.example:", "a.example", "http", true},
		{"a.example:80", "a.example", "https", false},
		{"a.example:8080", "a.example", "http", false},
		{"[::1]:443", "[::1]", "https", true},
		{"[::1]", "[::2]", "https", false},
		{"b.example", "a.example", "http", false},
	} {
		if got := sameAuthority(c.a, c.b, c.scheme); got != c.want {
			t.Errorf("sameAuthority(%q, %q, %s) = %v", c.a, c.b, c.scheme, got)
		}
	}
}

// TestHandlerPanic: with OnPanic set, a handler's panic resets its stream and is
// reported; the connection serves the next request.
func TestHandlerPanic(t *testing.T) {
	reported := make(chan any, 1)
	h := HandlerFunc(func(st *Stream) {
		if st.Request().Path == "/panic" {
			panic("boom")
		}
		echoHandler(st)
	})
	ts := startServer(t, Config{OnPanic: func(v any, _ []byte) { reported <- v }}, h, false)
	p := newPeer(t, ts)
	p.get(1, "/panic")
	if code := p.expectReset(1); code != http2.ErrCodeInternal {
		t.Fatalf("reset %v, want INTERNAL_ERROR", code)
	}
	if v := <-reported; v != "boom" {
		t.Fatalf("reported %v", v)
	}
	p.get(3, "/after")
	if st := p.expectResponse(3); st != "200" {
		t.Fatalf("status %s", st)
	}
}

// TestLargeResponseHead: a response head larger than the client's frame size goes out
// as HEADERS and CONTINUATION frames.
func TestLargeResponseHead(t *testing.T) {
	big := strings.Repeat("v", 40000)
	h := HandlerFunc(func(st *Stream) {
		_ = st.WriteHead(200, []hpack.HeaderField{{Name: "x-big", Value: big}}, []byte("ok"), true)
	})
	ts := startServer(t, Config{}, h, false)
	res, err := ts.client().Get(ts.url() + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.Header.Get("X-Big") != big || string(b) != "ok" {
		t.Fatalf("header of %d bytes, body %q", len(res.Header.Get("X-Big")), b)
	}
}

// TestValidRequestURI: validRequestURI agrees with url.ParseRequestURI on paths, the
// nasty ones included (the engine refuses what a request line could not carry).
func TestValidRequestURI(t *testing.T) {
	for _, p := range []string{"/", "/a?b", "/%41", "/%4", "/%zz", "/a?%zz", "/a?%", "/%", "/a%2", "/a b",
		"/a\x00", "/a\x7f", "/a?\x01", "//x", "/a?b?c", "/a#b", "/a?", "/\u00e9", "/%2F%2f", "/a%", "/a?b%4"} {
		_, err := url.ParseRequestURI(p)
		if got := validRequestURI(p); got != (err == nil) {
			t.Errorf("%q: validRequestURI %v, url.ParseRequestURI %v", p, got, err)
		}
	}
}

func FuzzValidRequestURI(f *testing.F) {
	for _, p := range []string{"/", "/a?b", "/%41", "/%zz", "/a?%zz", "/a\x00"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if p == "" || p[0] != '/' {
			return
		}
		_, err := url.ParseRequestURI(p)
		if got := validRequestURI(p); got != (err == nil) {
			t.Errorf("%q: validRequestURI %v, url.ParseRequestURI %v", p, got, err)
		}
	})
}

// TestStreamContext: the stream's context is cancelled once; Done made before or after
// the cancel is closed; functions registered with context.AfterFunc (directly or through
// a child of context.WithCancel) run after the cancel, unless stopped before; values come
// from the connection's context.
func TestStreamContext(t *testing.T) {
	type key struct{}
	var c streamCtx
	c.parent = context.WithValue(context.Background(), key{}, "v")
	early := c.Done()
	ran := make(chan string, 3)
	stop1 := context.AfterFunc(&c, func() { ran <- "kept" })
	stop2 := context.AfterFunc(&c, func() { ran <- "stopped" })
	child, cancelChild := context.WithCancel(&c)
	defer cancelChild()
	if !stop2() {
		t.Fatal("stop before the cancel reported false")
	}
	if c.Err() != nil || c.Value(key{}) != "v" {
		t.Fatalf("before the cancel: %v, value %v", c.Err(), c.Value(key{}))
	}
	c.cancel()
	c.cancel()
	<-early
	<-c.Done()
	<-child.Done()
	if got := <-ran; got != "kept" {
		t.Fatalf("ran %q", got)
	}
	if stop1() {
		t.Fatal("stop after the function started reported true")
	}
	if c.Err() != context.Canceled || child.Err() != context.Canceled {
		t.Fatalf("after: %v, child %v", c.Err(), child.Err())
	}
	late := make(chan struct{})
	context.AfterFunc(&c, func() { close(late) })
	<-late // registered after the cancel: runs at once
	select {
	case s := <-ran:
		t.Fatalf("%q ran", s)
	default:
	}
}
