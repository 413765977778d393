package proxy

import (
	"bufio"
	"errors"
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

// TestH2BodyLongerThanContentLength: an HTTP/2 request whose DATA exceeds its
// content-length is reset, and whatever of it reached a target ends that target
// connection, which is never used again: the next request gets a clean exchange.
func TestH2BodyLongerThanContentLength(t *testing.T) {
	e := newEnv(t)
	type event struct {
		conn int
		what string // "request <method> <path> <n>", "cut <path>", "closed"
	}
	events := make(chan event, 64)
	var conns atomic.Int32
	addr := rawServer(t, func(c net.Conn) {
		id := int(conns.Add(1))
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				events <- event{id, "closed"}
				return
			}
			b, err := io.ReadAll(req.Body)
			if err != nil {
				events <- event{id, "cut " + req.URL.Path}
				return
			}
			events <- event{id, "request " + req.Method + " " + req.URL.Path + " " + string(b)}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{addr}}})

	h := dialH2Raw(t, e.http, 65535)
	h.write(t, func(fr *http2.Framer) error {
		var hb []byte
		enc := hpack.NewEncoder(&sliceWriter{&hb})
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "app.example.test"},
			{":path", "/long"}, {"content-length", "5"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb, EndHeaders: true}); err != nil {
			return err
		}
		return fr.WriteData(1, true, []byte("0123456789"))
	})
	select {
	case end := <-h.ended:
		if end.id != 1 || end.rst == 0 {
			t.Errorf("stream 1 ended with %+v, want a reset", end)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stream 1 neither reset nor answered")
	}

	// A later request: a clean exchange, on a connection that carried nothing cut.
	c := e.h1Client()
	res, body := get(t, c, "http://app.example.test/next", "")
	if res.StatusCode != 200 || body != "ok" {
		t.Fatalf("next request: %d %q", res.StatusCode, body)
	}
	cut := map[int]bool{}
	for {
		select {
		case ev := <-events:
			switch {
			case ev.what == "request GET /next ":
				if cut[ev.conn] {
					t.Errorf("the next request went over connection %d, which carried the cut request", ev.conn)
				}
				return
			case ev.what == "request POST /long 01234":
				t.Errorf("the target got a whole request from a body longer than its content-length")
			case ev.what == "cut /long":
				cut[ev.conn] = true
			}
		case <-time.After(10 * time.Second):
			t.Fatal(errors.New("the target never saw the next request"))
		}
	}
}

type sliceWriter struct{ b *[]byte }

func (w *sliceWriter) Write(p []byte) (int, error) { *w.b = append(*w.b, p...); return len(p), nil }

// TestH2RequestLineInjectionRefused: HTTP/2 carries the method and the query as fields;
// a method that is not a token, or a query holding a space or a control byte, would
// become another request line at the target. Both are refused with 400 and reach no
// target.
func TestH2RequestLineInjectionRefused(t *testing.T) {
	e := newEnv(t)
	var got atomic.Int32 // request lines the target received, however malformed
	addr := rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			got.Add(1)
			for { // the rest of the head
				l, err := br.ReadString('\n')
				if err != nil {
					return
				}
				if l == "\r\n" {
					break
				}
			}
			if !strings.HasPrefix(line, "GET /fine?a=b HTTP/1.1") {
				return // a line no valid request has: close, as a strict target would
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{addr}}})
	h := dialH2Raw(t, e.http, 65535)
	cases := [][2]string{
		{"GET /inj", "/m"},
		{"G{T", "/m"},
		{"GET", "/q?a=b HTTP/1.0"},
		{"GET", "/q?a=\x01"},
	}
	for i, c := range cases {
		id := uint32(2*i + 1)
		h.write(t, func(fr *http2.Framer) error {
			var hb []byte
			enc := hpack.NewEncoder(&sliceWriter{&hb})
			for _, f := range [][2]string{{":method", c[0]}, {":scheme", "http"}, {":authority", "app.example.test"}, {":path", c[1]}} {
				_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb, EndStream: true, EndHeaders: true})
		})
		select {
		case end := <-h.ended:
			if hf, ok := end.frame.(*http2.HeadersFrame); ok && end.id == id {
				_ = hf // a HEADERS with END_STREAM: answered without a body
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%q %q: no answer", c[0], c[1])
		}
	}
	// A valid request on the same connection reaches the target: the refused ones did not.
	c := e.h2cClient()
	res, body := get(t, c, "http://app.example.test/fine?a=b", "")
	if res.StatusCode != 200 || body != "ok" {
		t.Fatalf("valid request: %d %q", res.StatusCode, body)
	}
	if n := got.Load(); n != 1 {
		t.Errorf("the target got %d requests, want only the valid one", n)
	}
}
