package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

type countReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func TestHTTP1ByteAccountingIsExact(t *testing.T) {
	e := newEnv(t)
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/chunked":
			w.WriteHeader(200)
			for i := range 5 {
				fmt.Fprintf(w, "chunk %d %s\n", i, strings.Repeat("z", i*100))
				w.(http.Flusher).Flush()
			}
		case "/trailer":
			w.Header().Set("Trailer", "X-Sum")
			w.WriteHeader(200)
			io.WriteString(w, "with trailer")
			w.Header().Set("X-Sum", "42")
		default:
			fmt.Fprintf(w, "read %d bytes: %s", len(b), strings.Repeat("y", len(b)))
		}
	}))
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})

	c := dialRaw(t, e.http)
	cr := &countReader{r: c}
	br := bufio.NewReader(cr)
	var sent int64
	reqs := []string{
		"GET /a HTTP/1.1\r\nHost: app.example.test\r\nX-Pad: " + strings.Repeat("p", 300) + "\r\n\r\n",
		"POST /b HTTP/1.1\r\nHost: APP.example.test:80\r\nContent-Length: 11\r\n\r\nhello world",
		"GET /chunked HTTP/1.1\r\nHost: app.example.test\r\n\r\n",
		"GET /trailer HTTP/1.1\r\nHost: app.example.test\r\n\r\n",
		"HEAD /d HTTP/1.1\r\nHost: app.example.test\r\n\r\n",
		"GET /e HTTP/1.1\r\nHost: app.example.test\r\n\r\n",
		// Last: a chunked request goes to net/http, which closes the connection after it.
		"POST /c HTTP/1.1\r\nHost: app.example.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
	}
	for _, raw := range reqs {
		n, err := io.WriteString(c, raw)
		if err != nil {
			t.Fatal(err)
		}
		sent += int64(n)
		req, _ := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		res, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("%q: status %d", raw, res.StatusCode)
		}
	}
	c.Close()
	received := cr.n.Load()
	waitFor(t, "exact bytes", func() bool {
		st := e.stat("app.example.test")
		return int64(st.BytesIn) == sent && int64(st.BytesOut) == received && st.Requests == uint64(len(reqs))
	})
	if st := e.stat("app.example.test"); st.Connections != 1 {
		t.Errorf("connections %d, want 1", st.Connections)
	}
}

func TestHTTP2FieldBytes(t *testing.T) {
	r, _ := http.NewRequest("GET", "http://a.test/x?y", nil)
	r.Host = "a.test"
	r.RequestURI = "/x?y"
	r.Header = http.Header{"Accept": {"*/*"}}
	// :method GET :scheme https :authority a.test :path /x?y accept */*
	want := int64(len(":method") + 3 + len(":scheme") + 5 + len(":authority") + 6 + len(":path") + 4 + len("Accept") + 3)
	if got := requestFieldBytes(r, true); got != want {
		t.Errorf("request field bytes %d, want %d", got, want)
	}
	if got := responseFieldBytes(http.Header{"Content-Length": {"12"}}); got != int64(len(":status")+3+len("Content-Length")+2) {
		t.Errorf("response field bytes %d", got)
	}
}
