package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// The own HTTP/2 server against net/http's (the reference): the same requests through
// both, what the target sees and what the client gets compared. Accepted differences
// (h2diffIgnored) are listed with their reasons.

// h2diffIgnored are response fields that may differ, and why.
var h2diffIgnored = map[string]string{
	"Date": "the time of the answer",
}

// seenRequest is what the recording target saw.
type seenRequest struct {
	Method, URI, Host string
	Header            map[string][]string
	Body              string
	Trailer           map[string][]string
}

// recordingTarget answers with what it saw as JSON, plus the response the request asks
// for through its X-Want-* fields.
func recordingTarget(t testing.TB) string {
	return backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := r.Header.Clone()
		for _, k := range []string{"X-Forwarded-For", "Forwarded"} {
			// The client's port differs between the two runs; the address does not.
			h[k] = []string{strings.ReplaceAll(strings.Join(h[k], ","), "127.0.0.1", "IP")}
		}
		seen, _ := json.Marshal(seenRequest{Method: r.Method, URI: r.RequestURI, Host: r.Host, Header: h, Body: string(body), Trailer: r.Trailer})
		if v := r.Header.Get("X-Want-Trailer"); v != "" {
			w.Header().Set("Trailer", "X-Resp-Trailer")
			defer func() { w.Header().Set("X-Resp-Trailer", v) }()
		}
		w.Header().Set("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		w.Header().Set("Set-Cookie", "s=1")
		switch r.Header.Get("X-Want-Status") {
		case "204":
			w.WriteHeader(http.StatusNoContent)
			return
		case "304":
			w.WriteHeader(http.StatusNotModified)
			return
		case "500":
			w.WriteHeader(http.StatusInternalServerError)
		}
		if r.Header.Get("X-Want-Chunked") != "" {
			_, _ = w.Write(seen[:10])
			w.(http.Flusher).Flush()
			_, _ = w.Write(seen[10:])
			return
		}
		if r.Header.Get("X-Want-Trailer") == "" {
			w.Header().Set("Content-Length", fmt.Sprint(len(seen)))
		}
		_, _ = w.Write(seen)
	}))
}

type diffCase struct {
	name, method, url string
	header            http.Header
	body              string
	unknownLength     bool
	trailer           http.Header
}

func (c diffCase) do(t *testing.T, client *http.Client) (int, http.Header, string, http.Header) {
	t.Helper()
	var body io.Reader
	if c.body != "" || c.unknownLength {
		body = strings.NewReader(c.body)
		if c.unknownLength {
			body = io.MultiReader(body) // hides the length
		}
	}
	req, err := http.NewRequest(c.method, c.url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, vv := range c.header {
		req.Header[k] = vv
	}
	if c.trailer != nil {
		req.Trailer = c.trailer.Clone()
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res.StatusCode, res.Header, string(b), res.Trailer
}

func TestH2OwnMatchesStd(t *testing.T) {
	be := recordingTarget(t)
	envs := map[string]*env{}
	for _, impl := range []string{h2Std, h2Own} {
		e := newEnv(t, withH2(impl))
		e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})
		envs[impl] = e
	}
	cases := []diffCase{
		{name: "get", method: "GET", url: "http://app.example.test/a/b%20c?q=1&r=%2F", header: http.Header{"X-One": {"1"}, "Accept": {"text/html", "*/*"}}},
		{name: "cookies", method: "GET", url: "http://app.example.test/c", header: http.Header{"Cookie": {"a=1; b=2", "c=3"}}},
		{name: "head", method: "HEAD", url: "http://app.example.test/h"},
		{name: "post", method: "POST", url: "http://app.example.test/p", body: strings.Repeat("x", 100000)},
		{name: "post unknown length", method: "POST", url: "http://app.example.test/u", body: "hello", unknownLength: true},
		{name: "request trailers", method: "PUT", url: "http://app.example.test/t", body: "abc", unknownLength: true, trailer: http.Header{"X-Req-Trailer": {"t1"}}},
		{name: "response trailers", method: "GET", url: "http://app.example.test/rt", header: http.Header{"X-Want-Trailer": {"v1"}}},
		{name: "chunked response", method: "GET", url: "http://app.example.test/ch", header: http.Header{"X-Want-Chunked": {"1"}}},
		{name: "204", method: "DELETE", url: "http://app.example.test/d", header: http.Header{"X-Want-Status": {"204"}}},
		{name: "304", method: "GET", url: "http://app.example.test/n", header: http.Header{"X-Want-Status": {"304"}}},
		{name: "500", method: "GET", url: "http://app.example.test/e", header: http.Header{"X-Want-Status": {"500"}}},
		{name: "forwarding fields replaced", method: "GET", url: "http://app.example.test/f",
			header: http.Header{"X-Forwarded-For": {"6.6.6.6"}, "Forwarded": {"for=6.6.6.6"}, "X-Real-Ip": {"6.6.6.6"}, "X-Forwarded-Host": {"evil"}}},
		{name: "options", method: "OPTIONS", url: "http://app.example.test/o"},
		{name: "unknown host", method: "GET", url: "http://nope.example.test/"},
		{name: "te trailers", method: "GET", url: "http://app.example.test/te", header: http.Header{"Te": {"trailers"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			type result struct {
				status     int
				header, tr http.Header
				body       string
			}
			var got [2]result
			for i, impl := range []string{h2Std, h2Own} {
				r := &got[i]
				r.status, r.header, r.body, r.tr = c.do(t, envs[impl].h2cClient())
				for k := range h2diffIgnored {
					delete(r.header, k)
				}
			}
			std, own := got[0], got[1]
			if std.status != own.status || std.body != own.body {
				t.Errorf("std: %d %s\nown: %d %s", std.status, std.body, own.status, own.body)
			}
			if !sameHeader(std.header, own.header) {
				t.Errorf("response fields differ:\nstd: %v\nown: %v", std.header, own.header)
			}
			if c.name == "response trailers" && own.tr.Get("X-Resp-Trailer") != "v1" {
				t.Errorf("response trailer lost: %v", own.tr)
			}
			if !sameHeader(std.tr, own.tr) {
				t.Errorf("response trailers differ:\nstd: %v\nown: %v", std.tr, own.tr)
			}
		})
	}
}

func sameHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb, ok := b[k]
		if !ok || !slices.Equal(va, vb) {
			return false
		}
	}
	return true
}
