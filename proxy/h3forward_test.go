package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// HTTP/3 through net/http's front-end (forward.go): quic-go gives every request a body of
// unknown length unless it carries content-length.

// captureServer answers every request with "ok" (keep-alive) after reading its head and,
// with readBody, a chunked body and its trailers; seen returns every byte it read.
func captureServer(t *testing.T, readBody bool) (string, func() string) {
	var mu sync.Mutex
	var all bytes.Buffer
	addr := rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			var head bytes.Buffer
			for {
				l, err := br.ReadString('\n')
				head.WriteString(l)
				if err != nil {
					mu.Lock()
					all.Write(head.Bytes())
					mu.Unlock()
					return
				}
				if l == "\r\n" {
					break
				}
			}
			mu.Lock()
			all.Write(head.Bytes())
			mu.Unlock()
			if readBody && strings.Contains(strings.ToLower(head.String()), "transfer-encoding: chunked") {
				// read chunks and trailers to the blank line after "0"
				for {
					l, err := br.ReadString('\n')
					mu.Lock()
					all.WriteString(l)
					mu.Unlock()
					if err != nil {
						return
					}
					if l == "0\r\n" {
						for {
							l, err := br.ReadString('\n')
							mu.Lock()
							all.WriteString(l)
							mu.Unlock()
							if err != nil || l == "\r\n" {
								break
							}
						}
						break
					}
				}
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	return addr, func() string { mu.Lock(); defer mu.Unlock(); return all.String() }
}

// TestH3GetWithoutBody: an HTTP/3 GET without content-length whose stream ended with its
// HEADERS goes to the target without a body (no chunked GET: probeBody).
func TestH3GetWithoutBody(t *testing.T) {
	e := newEnv(t, withHTTP3)
	addr, seen := captureServer(t, true)
	e.tlsRoute("app.example.test", addr)
	c, _ := e.h3Client()
	res, err := c.Get("https://app.example.test/p")
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(res.Body)
	res.Body.Close()
	if strings.Contains(strings.ToLower(seen()), "transfer-encoding") {
		t.Errorf("HTTP/3 GET without body went chunked")
	}
}

// TestH3TrailerAnnouncementFiltered: an announcement of request trailers keeps only the
// names a trailer may carry to an HTTP/1.1 target (appendTrailerNames).
func TestH3TrailerAnnouncementFiltered(t *testing.T) {
	e := newEnv(t, withHTTP3)
	addr, seen := captureServer(t, true)
	e.tlsRoute("app.example.test", addr)
	c, _ := e.h3Client()
	req, _ := http.NewRequest("POST", "https://app.example.test/p", strings.NewReader("hello"))
	req.Header.Set("Trailer", "Content-Length, Host, Transfer-Encoding, X-T")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(res.Body)
	res.Body.Close()
	if got := strings.ToLower(seen()); !strings.Contains(got, "trailer: x-t\r\n") || strings.Contains(got, "trailer: content-length") {
		t.Errorf("a Trailer announcement naming framing fields reached the target")
	}
}

// TestH3GetReplayedOnStaleConnection: an HTTP/3 GET is replayable like any GET: a pooled
// connection the target closed as it was reused is replaced, not answered 502.
func TestH3GetReplayedOnStaleConnection(t *testing.T) {
	e := newEnv(t, withHTTP3)
	addr := rawServer(t, func(c net.Conn) {
		br, ok := readWholeRequest(c)
		if !ok {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		// wait for the next request, then close without answering: a keep-alive
		// connection the target closed just as it was reused
		br.ReadByte()
	})
	e.tlsRoute("app.example.test", addr)
	c, _ := e.h3Client()
	for i := 0; i < 2; i++ {
		res, err := c.Get("https://app.example.test/p")
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Errorf("GET %d over HTTP/3 on a stale pooled connection: %d, not replayed", i, res.StatusCode)
		}
	}
}

// TestH3BodyBytesCountedOnFailure: a body the target took is counted whatever the exchange
// came to.
func TestH3BodyBytesCountedOnFailure(t *testing.T) {
	e := newEnv(t, withHTTP3)
	addr := rawServer(t, func(c net.Conn) {
		readWholeRequest(c) // takes the whole body, then closes without answering
	})
	e.tlsRoute("app.example.test", addr)
	c, _ := e.h3Client()
	res, err := c.Post("https://app.example.test/p", "text/plain", strings.NewReader(strings.Repeat("a", 100000)))
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(res.Body)
	res.Body.Close()
	e.waitRequests("app.example.test", 1)
	st := e.stat("app.example.test")
	if st.BytesIn < 100000 {
		t.Errorf("a 100,000-byte body taken by the target counted as %d bytes in", st.BytesIn)
	}
}

// readWholeRequest reads one request from c, body included; ok is false when none came.
func readWholeRequest(c net.Conn) (br *bufio.Reader, ok bool) {
	br = bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return br, false
	}
	_, _ = io.Copy(io.Discard, req.Body)
	return br, true
}
