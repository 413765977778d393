package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/serve-zone/ingress/stats"
)

func TestConnectFailureRetriedAndMarkedDown(t *testing.T) {
	e := newEnv(t)
	live := backend(t, echoInfo())
	dead := deadAddr(t)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{live, dead}}})
	c := e.h1Client()
	// With two targets the first pick goes to the dead one about half the time; after
	// its first failure it is down for a second and never picked while another is up.
	for i := range 20 {
		req, _ := http.NewRequest("POST", "http://app.example.test/", stringsReader("body"))
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, res.StatusCode)
		}
	}
	e.waitRequests("app.example.test", 20)
	st := e.stat("app.example.test")
	if st.Requests != 20 {
		t.Errorf("requests %d", st.Requests)
	}
	if st.BackendFailures.Connect > 1 {
		t.Errorf("connect failures %d: the dead target was not kept down", st.BackendFailures.Connect)
	}
	var deadState *struct{ f int32 }
	for _, b := range e.store.Load().Lookup("app.example.test").Backends {
		if b.Addr == dead && b.State.Failures.Load() == 1 && b.State.DownUntil.Load() > time.Now().UnixNano() {
			deadState = &struct{ f int32 }{1}
		}
		if b.Addr == live && (b.State.Failures.Load() != 0 || b.State.DownUntil.Load() != 0) {
			t.Errorf("live target marked down")
		}
	}
	if st.BackendFailures.Connect == 1 && deadState == nil {
		t.Errorf("dead target not marked down after its failure")
	}
}

func TestBackoffDoubles(t *testing.T) {
	e := newEnv(t)
	dead := deadAddr(t)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{dead}}})
	b := e.store.Load().Lookup("app.example.test").Backends[0]
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		res, body := get(t, e.h1Client(), "http://"+e.http+"/", "app.example.test")
		if res.StatusCode != 502 || body != "502 Bad Gateway\n" {
			t.Fatalf("status %d %q", res.StatusCode, body)
		}
		left := time.Until(time.Unix(0, b.State.DownUntil.Load()))
		if left > want || left < want-time.Second/2 {
			t.Errorf("after failure %d down for %v, want about %v", i+1, left, want)
		}
	}
	e.waitRequests("app.example.test", 3)
	if st := e.stat("app.example.test"); st.BackendFailures.Connect != 3 || st.Requests != 3 {
		t.Errorf("stats %+v, want 3 requests and 3 connect failures", st)
	}
	markUp(b)
	if b.State.Failures.Load() != 0 || b.State.DownUntil.Load() != 0 {
		t.Errorf("markUp did not reset")
	}
}

func TestPickPrefersUpAndLessLoaded(t *testing.T) {
	e := newEnv(t)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{"127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003"}}})
	bs := e.store.Load().Lookup("app.example.test").Backends
	bs[0].State.DownUntil.Store(time.Now().Add(time.Hour).UnixNano())
	bs[1].State.InFlight.Store(10)
	counts := map[int]int{}
	for range 300 {
		counts[pick(bs, 0)]++
	}
	if counts[0] != 0 {
		t.Errorf("down target picked %d times", counts[0])
	}
	if counts[2] <= counts[1] {
		t.Errorf("less loaded target not preferred: %v", counts)
	}
	if got := pick(bs, 0b110); got != 0 {
		t.Errorf("only untried target is the down one: got %d, want 0", got)
	}
	if got := pick(bs, 0b111); got != -1 {
		t.Errorf("all tried: got %d", got)
	}
	for i := range bs {
		bs[i].State.DownUntil.Store(time.Now().Add(time.Hour).UnixNano())
	}
	if got := pick(bs, 0); got < 0 {
		t.Errorf("all down must still pick one")
	}
}

func TestFailureMapping(t *testing.T) {
	// A raw target that misbehaves in a chosen way after reading the request header.
	rawTarget := func(t *testing.T, act func(net.Conn)) string {
		return rawServer(t, func(c net.Conn) {
			if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
				act(c)
			}
		})
	}
	tests := []struct {
		name   string
		act    func(net.Conn)
		status int
		kind   stats.FailureKind
	}{
		{"reset before response", func(c net.Conn) { c.(*net.TCPConn).SetLinger(0) }, 502, stats.FailureRequest},
		{"malformed response", func(c net.Conn) { io.WriteString(c, "HTTP/1.1 abc\r\n\r\n") }, 502, stats.FailureRequest},
		{"no response header in time", func(c net.Conn) { io.Copy(io.Discard, c) }, 504, stats.FailureRequest}, // never answers
		{"dead", nil, 502, stats.FailureConnect},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.ResponseHeaderTimeout = 300 * time.Millisecond })
			addr := deadAddr(t)
			if tc.act != nil {
				addr = rawTarget(t, tc.act)
			}
			e.apply([]routeSpec{{host: "app.example.test", backends: []string{addr}}})
			res, body := get(t, e.h1Client(), "http://"+e.http+"/", "app.example.test")
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.status)
			}
			if want := http.StatusText(tc.status); body != res.Status+"\n" || res.Status[4:] != want {
				t.Errorf("body %q names something else than the status", body)
			}
			st := e.stat("app.example.test")
			got := [3]uint64{st.BackendFailures.Connect, st.BackendFailures.Handshake, st.BackendFailures.Request}
			var want [3]uint64
			want[tc.kind] = 1
			if got != want {
				t.Errorf("failures connect/handshake/request = %v, want %v", got, want)
			}
		})
	}
}

func TestTruncatedBodyAbortsAndCounts(t *testing.T) {
	e := newEnv(t)
	target := rawServer(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly a part")
	})
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{target}}})
	req, _ := http.NewRequest("GET", "http://app.example.test/", nil)
	res, err := e.h1Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(res.Body)
	res.Body.Close()
	if err == nil {
		t.Fatalf("client read a truncated body without error")
	}
	waitFor(t, "request failure counted", func() bool { return e.stat("app.example.test").BackendFailures.Request == 1 })
}

func TestClientCancelIsNotABackendFailure(t *testing.T) {
	e := newEnv(t)
	started := make(chan struct{}, 1)
	done := make(chan struct{})
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-r.Context().Done() // the proxy must cancel the target request
		close(done)
	}))
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://app.example.test/", nil)
	errc := make(chan error, 1)
	go func() {
		_, err := e.h1Client().Do(req)
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client error %v", err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("target request was not cancelled")
	}
	waitFor(t, "request counted", func() bool { return e.stat("app.example.test").Requests == 1 })
	st := e.stat("app.example.test")
	if st.BackendFailures != (stats.BackendFailures{}) {
		t.Errorf("client cancel counted as backend failure: %+v", st.BackendFailures)
	}
}
