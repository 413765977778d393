package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// rawWireTarget answers every request with 200 "ok" and sends the request's raw head and
// body (as read off its wire) on got.
func rawWireTarget(t *testing.T, got chan<- string) string {
	return rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			var head bytes.Buffer
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				head.WriteString(line)
				if line == "\r\n" {
					break
				}
			}
			req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head.Bytes())))
			if err != nil {
				return
			}
			body := make([]byte, max(req.ContentLength, 0))
			if _, err := io.ReadFull(br, body); err != nil {
				return
			}
			got <- head.String() + string(body)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
}

// sortedHead is a request's bytes with its header lines sorted, the request line and
// the body kept in place.
func sortedHead(s string) string {
	head, body, _ := strings.Cut(s, "\r\n\r\n")
	lines := strings.Split(head, "\r\n")
	fields := lines[1:]
	slices.Sort(fields)
	return lines[0] + "\r\n" + strings.Join(fields, "\r\n") + "\r\n\r\n" + body
}

// TestUpstreamWireSameOnBothFrontEnds: the fast path and net/http's front-end put the
// same request bytes on the target's wire (modulo header order) for a GET and a POST.
func TestUpstreamWireSameOnBothFrontEnds(t *testing.T) {
	reqs := []struct{ method, body string }{{"GET", ""}, {"POST", "small body"}}
	var wire [2][]string
	for i, fe := range frontEnds {
		got := make(chan string, len(reqs))
		addr := rawWireTarget(t, got)
		e := upEnv(t, fe.netOnly, addr)
		c := e.h1Client()
		for _, r := range reqs {
			var rb io.Reader
			if r.body != "" {
				rb = strings.NewReader(r.body)
			}
			req, _ := http.NewRequest(r.method, "http://app.example.test/p?q=1", rb)
			req.Header.Set("User-Agent", "wire-test")
			req.Header.Set("X-Custom", "v")
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("%s %s: status %d", fe.name, r.method, res.StatusCode)
			}
			w := <-got
			if !strings.Contains(w, "\r\nX-Custom: v\r\n") || !strings.HasSuffix(w, "\r\n\r\n"+r.body) {
				t.Errorf("%s %s: target got %q", fe.name, r.method, w)
			}
			wire[i] = append(wire[i], sortedHead(w))
		}
	}
	for j, r := range reqs {
		if wire[0][j] != wire[1][j] {
			t.Errorf("%s: fast path wrote\n%q\nnet/http's front-end wrote\n%q", r.method, wire[0][j], wire[1][j])
		}
	}
}
