package reliability

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/internal/binarytest"
)

// rawTarget is a TCP target that records every byte it receives, on every connection,
// and answers each HTTP/1.1 request it can parse with 200 "ok".
type rawTarget struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	got   bytes.Buffer
	conns []net.Conn
}

// newRawTarget starts a rawTarget on loopback; the cleanup closes its listener and
// connections and waits for its goroutines.
func newRawTarget(t *testing.T) *rawTarget {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rt := &rawTarget{ln: ln}
	rt.wg.Add(1)
	go rt.accept()
	t.Cleanup(func() {
		ln.Close()
		rt.mu.Lock()
		for _, c := range rt.conns {
			c.Close()
		}
		rt.mu.Unlock()
		rt.wg.Wait()
	})
	return rt
}

// accept serves connections until the listener closes.
func (rt *rawTarget) accept() {
	defer rt.wg.Done()
	for {
		c, err := rt.ln.Accept()
		if err != nil {
			return
		}
		rt.mu.Lock()
		rt.conns = append(rt.conns, c)
		rt.mu.Unlock()
		rt.wg.Add(1)
		go rt.serve(c)
	}
}

// serve records c's bytes and answers its requests until it ends.
func (rt *rawTarget) serve(c net.Conn) {
	defer rt.wg.Done()
	defer c.Close()
	br := bufio.NewReader(io.TeeReader(c, rt))
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			_, _ = io.Copy(io.Discard, br) // record whatever else arrives
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
			return
		}
	}
}

// Write records p (rawTarget is the TeeReader's writer).
func (rt *rawTarget) Write(p []byte) (int, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.got.Write(p)
}

// received is every byte received so far.
func (rt *rawTarget) received() string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.got.String()
}

// Marks of TestMalformedBodiesNeverReachTarget's bad requests: in their paths and in
// every body byte, so that any part of them reaching the target shows.
const (
	badPath = "/malformed-"
	badMark = "BADBODYMARK"
)

// badChunkedRequest is a POST of 4 KiB of chunked body whose chunk-size line in the
// middle is not hexadecimal.
func badChunkedRequest(host string) string {
	chunk := strings.Repeat(badMark+"-", 512/(len(badMark)+1)+1)[:512]
	var b strings.Builder
	fmt.Fprintf(&b, "POST %sh1 HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n", badPath, host)
	for i := range 8 {
		if i == 4 {
			b.WriteString("zz" + badMark + "\r\n") // the bad chunk-size line
		} else {
			b.WriteString("200\r\n")
		}
		b.WriteString(chunk + "\r\n")
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

// TestMalformedBodiesNeverReachTarget: requests whose bodies are malformed are refused
// before any byte of them reaches a target (issue 25): (a) an HTTP/1.1 POST whose 4 KiB
// chunked body has a bad chunk-size line in the middle gets 400; (b) an HTTP/2 (h2c)
// POST announcing content-length 4096 that ends its stream after 1000 bytes of DATA is
// reset with PROTOCOL_ERROR or answered 400. A sentinel GET through the same route
// afterwards is answered by the target, and the target's raw bytes hold the sentinel
// and nothing of the two bad requests (neither their paths nor their bodies' mark).
func TestMalformedBodiesNeverReachTarget(t *testing.T) {
	const host = "raw.rel.test"
	target := newRawTarget(t)
	p, _ := standalone(t, binarytest.TableJSON(t, 1, nil,
		binarytest.Route(host, "", false, binarytest.TargetOf(t, target.ln.Addr().String(), "lease-raw"))))

	t.Run("HTTP/1.1 bad chunk size", func(t *testing.T) {
		c, err := net.Dial("tcp", p.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(waitLimit))
		if _, err := io.WriteString(c, badChunkedRequest(host)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("reading the answer to the malformed chunked body: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("malformed chunked body answered %s %q; want 400", resp.Status, body)
		}
	})

	t.Run("HTTP/2 body shorter than content-length", func(t *testing.T) {
		a, err := dialH2(net.IPv4(127, 0, 0, 71), p.HTTP, "", false)
		if err != nil {
			t.Fatal(err)
		}
		defer a.c.Close()
		_ = a.c.SetDeadline(time.Now().Add(waitLimit))
		block := a.headers(":method", "POST", ":scheme", "http", ":authority", host, ":path", badPath+"h2",
			"content-type", "text/plain", "content-length", "4096")
		if err := a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		data := bytes.Repeat([]byte(badMark+"-"), 1000/(len(badMark)+1)+1)[:1000]
		if err := a.fr.WriteData(1, true, data); err != nil {
			t.Fatal(err)
		}
		got := h2Outcome(t, a)
		t.Logf("stream 1 ended with %s", got)
		if got != "RST_STREAM PROTOCOL_ERROR" && got != "status 400" {
			t.Fatalf("HTTP/2 body of 1000 bytes with content-length 4096: stream 1 ended with %s; want RST_STREAM PROTOCOL_ERROR or status 400", got)
		}
	})

	mustStatus(t, client(t), p.HTTP, host, "/sentinel", http.StatusOK)
	got := target.received()
	if !strings.Contains(got, "GET /sentinel ") {
		t.Fatalf("the target did not record the sentinel request; it received:\n%q", got)
	}
	if strings.Contains(got, badMark) || strings.Contains(got, badPath) {
		t.Fatalf("bytes of a malformed request reached the target; it received:\n%q", got)
	}
	if n := strings.Count(got, " HTTP/1.1\r\n"); n != 1 {
		t.Fatalf("the target received %d requests; want only the sentinel:\n%q", n, got)
	}
}

// h2Outcome reads a's frames until stream 1 ends: "RST_STREAM <code>", "status <code>"
// (the response's :status), or "GOAWAY <code>" when the whole connection is ended.
func h2Outcome(t *testing.T, a *h2Attacker) string {
	t.Helper()
	a.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	for {
		f, err := a.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the answer to stream 1: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := a.fr.WriteSettingsAck(); err != nil {
					t.Fatal(err)
				}
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return "RST_STREAM " + f.ErrCode.String()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 {
				return "status " + f.PseudoValue("status")
			}
		case *http2.GoAwayFrame:
			return "GOAWAY " + f.ErrCode.String()
		}
	}
}
