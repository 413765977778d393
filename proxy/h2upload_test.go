package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Open opens an h2c connection to addr and sends the preface, SETTINGS and a request
// head on stream 1 (with END_STREAM when end); the rest is the caller's.
func h2Open(t testing.TB, addr string, end bool, fields ...[2]string) (net.Conn, *http2.Framer) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	fr := http2.NewFramer(nc, nc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range fields {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	_, _ = nc.Write([]byte(http2.ClientPreface))
	_ = fr.WriteSettings()
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: end, EndHeaders: true})
	return nc, fr
}

// h2Await reads frames until stream 1's final status (and its end, when wantEnd) or
// a reset; it answers SETTINGS.
func h2Await(t *testing.T, fr *http2.Framer, wantEnd bool) (status string, body string, rst http2.ErrCode) {
	t.Helper()
	var b bytes.Buffer
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after status %q body %q: %v", status, b.String(), err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if s := f.PseudoValue("status"); s != "" && s[0] != '1' {
				status = s
			}
			if status != "" && (f.StreamEnded() || !wantEnd) {
				return status, b.String(), 0
			}
		case *http2.DataFrame:
			b.Write(f.Data())
			if f.StreamEnded() {
				return status, b.String(), 0
			}
		case *http2.RSTStreamFrame:
			if status != "" && f.ErrCode == http2.ErrCodeNo {
				continue
			}
			return status, b.String(), f.ErrCode
		}
	}
}

func postFields(extra ...[2]string) [][2]string {
	return append([][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", h1Host}, {":path", "/up"}}, extra...)
}

// TestH2UploadFraming: a request body reaches the target as it comes, framed from what
// is forwarded: under the client's content-length, chunked when it stated none, chunked
// with its trailers when it announced some; the target connection is reused after each.
func TestH2UploadFraming(t *testing.T) {
	e := newEnv(t)
	tg := echoTarget(t)
	e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}})
	for _, tc := range []struct {
		name     string
		fields   [][2]string
		chunks   []string
		trailers [][2]string
		wantHead []string // in the raw head the target received
	}{
		{"content-length", postFields([2]string{"content-length", "11"}), []string{"hello", " world"}, nil,
			[]string{"\r\nContent-Length: 11\r\n"}},
		{"no length: chunked", postFields(), []string{"hello", " world"}, nil,
			[]string{"\r\nTransfer-Encoding: chunked\r\n"}},
		{"trailers announced: chunked with trailers", postFields([2]string{"content-length", "11"}, [2]string{"trailer", "x-sum"}), []string{"hello", " world"},
			[][2]string{{"x-sum", "42"}}, []string{"\r\nTransfer-Encoding: chunked\r\n", "\r\nTrailer: x-sum\r\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, fr := h2Open(t, e.http, false, tc.fields...)
			for i, c := range tc.chunks {
				_ = fr.WriteData(1, i == len(tc.chunks)-1 && tc.trailers == nil, []byte(c))
			}
			if tc.trailers != nil {
				var hb bytes.Buffer
				enc := hpack.NewEncoder(&hb)
				for _, f := range tc.trailers {
					_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
				}
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
			}
			status, body, rst := h2Await(t, fr, true)
			if status != "200" || rst != 0 || body != echoed("POST", "/up", "hello world") {
				t.Fatalf("%s %q %v", status, body, rst)
			}
			got := tg.last(t)
			for _, w := range tc.wantHead {
				if !strings.Contains(got.rawHead, w) {
					t.Errorf("target head %q lacks %q", got.rawHead, w)
				}
			}
			for _, f := range tc.trailers {
				if v := got.req.Trailer.Get(f[0]); v != f[1] {
					t.Errorf("trailer %s = %q at the target, want %q", f[0], v, f[1])
				}
			}
		})
	}
	if n := tg.conns.Load(); n != 1 {
		t.Errorf("target accepted %d connections, want 1 (reused after each body)", n)
	}
}

// TestH2UploadExpectContinue: with Expect: 100-continue a body within
// Config.RequestBuffer is held first (the stream sends its own 100) and goes with the
// head; a larger one is read from the client only once the target said 100, and a
// target that answers at once with a final status gets no body, and its connection is
// not reused (the request was not sent whole).
func TestH2UploadExpectContinue(t *testing.T) {
	t.Run("held body", func(t *testing.T) {
		e := newEnv(t)
		tg := echoTarget(t) // serveRecorded answers 100 to Expect (after the body came)
		e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}})
		_, fr := h2Open(t, e.http, false, postFields([2]string{"content-length", "4"}, [2]string{"expect", "100-continue"})...)
		// The client waits for the 100 before sending (what RFC 9110 §10.1.1 allows):
		// the stream's own, at holdBody's first read.
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if h, ok := f.(*http2.MetaHeadersFrame); ok && h.PseudoValue("status") == "100" {
				break
			}
		}
		_ = fr.WriteData(1, true, []byte("body"))
		status, body, _ := h2Await(t, fr, true)
		if status != "200" || body != echoed("POST", "/up", "body") {
			t.Fatalf("%s %q", status, body)
		}
		if h := tg.last(t).rawHead; !strings.Contains(h, "\r\nexpect: 100-continue\r\n") {
			t.Errorf("target head %q lacks the expectation", h)
		}
	})
	t.Run("target refuses at once", func(t *testing.T) {
		e := newEnv(t)
		copied := make(chan int64, 1)
		addr := rawServer(t, func(c net.Conn) {
			br := bufio.NewReader(c)
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 417 Expectation Failed\r\nContent-Length: 2\r\n\r\nno")
			// Whatever else comes on the connection until the proxy closes it (it
			// must: the request never went out whole).
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, _ := io.Copy(io.Discard, br)
			copied <- n
		})
		e.apply([]routeSpec{{host: h1Host, backends: []string{addr}}})
		_, fr := h2Open(t, e.http, false, postFields([2]string{"content-length", "100000"}, [2]string{"expect", "100-continue"})...)
		status, body, _ := h2Await(t, fr, true)
		if status != "417" || body != "no" {
			t.Fatalf("%s %q", status, body)
		}
		_ = fr.WriteData(1, true, []byte("body")) // too late: the stream is answered
		if n := <-copied; n != 0 {
			t.Fatalf("the target got %d more bytes after its final answer, want none", n)
		}
	})
}

// TestH2UploadEarlyAnswer: a target that answers before the body is whole (and stops
// reading it) gets its answer relayed; the upload stops, the client is told to stop
// sending (RST_STREAM NO_ERROR after the response), and the target connection is not
// pooled, since the request never went out whole. The first part is more than the
// held bytes (Config.RequestBuffer).
func TestH2UploadEarlyAnswer(t *testing.T) {
	e := newEnv(t, withRequestBuffer(8))
	var conns atomic.Int32
	addr := rawServer(t, func(c net.Conn) {
		conns.Add(1)
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 413 Content Too Large\r\nContent-Length: 3\r\n\r\nbig")
		_, _ = io.Copy(io.Discard, c) // until the proxy closes
	})
	e.apply([]routeSpec{{host: h1Host, backends: []string{addr}}})
	_, fr := h2Open(t, e.http, false, postFields([2]string{"content-length", "1000000"})...)
	_ = fr.WriteData(1, false, []byte("first part"))
	status, body, _ := h2Await(t, fr, true)
	if status != "413" || body != "big" {
		t.Fatalf("%s %q", status, body)
	}
	// The response is out; the stream is then reset with NO_ERROR (the client stops).
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == 1 {
			if r.ErrCode != http2.ErrCodeNo {
				t.Fatalf("reset %v, want NO_ERROR", r.ErrCode)
			}
			break
		}
	}
	waitFor(t, "no target connection pooled", func() bool { return e.srv.up.Idle(addr) == 0 })
}

// TestH2UploadClientResets: a client that resets its stream mid-body ends the exchange:
// the target connection is closed, and it is not a backend failure. The first part is
// more than the held bytes (Config.RequestBuffer), so the exchange is under way.
func TestH2UploadClientResets(t *testing.T) {
	e := newEnv(t, withRequestBuffer(8))
	closed := make(chan struct{})
	addr := rawServer(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err == nil || !isTimeout(err) {
			close(closed)
		}
	})
	e.apply([]routeSpec{{host: h1Host, backends: []string{addr}}})
	_, fr := h2Open(t, e.http, false, postFields([2]string{"content-length", "1000000"})...)
	_ = fr.WriteData(1, false, []byte("first part"))
	time.Sleep(50 * time.Millisecond) // part of the test: the upload is under way
	_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the target connection stayed open")
	}
	e.waitRequests(h1Host, 1)
	if f := e.stat(h1Host).BackendFailures; f.Request+f.Connect != 0 {
		t.Errorf("backend failures %+v, want none: the client left", f)
	}
}
