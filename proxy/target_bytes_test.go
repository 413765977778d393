package proxy

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// Issue 25 finding 7: what an HTTP/2 or HTTP/3 :path carries that an HTTP/1.1 request
// line's target may not is percent-encoded in the query, and an extended CONNECT's :path
// must be origin-form.

// rawQueryCases are :path values with raw bytes in the query, and the target each must
// reach the target as.
var rawQueryCases = []struct{ path, want string }{
	{"/q?a=\xff\xfe&b=\xc3\xa9", "/q?a=%FF%FE&b=%C3%A9"},
	{"/q?x=\"<>{|}^`\\#", "/q?x=%22%3C%3E%7B%7C%7D%5E%60%5C%23"},
	{"/q?bad=%zz&ok=%41&end=%", "/q?bad=%25zz&ok=%41&end=%25"},
	{"/q?keep=a/b?c:d@e!$&'()*+,;=-._~", "/q?keep=a/b?c:d@e!$&'()*+,;=-._~"},
	{"/p\xff/x?y=\xff", "/p%FF/x?y=%FF"},
	{"/a b?c", "/a%20b?c"},
}

// wireTargetOf returns the request-target of the one head tg received, failing unless exactly
// one arrived.
func wireTargetOf(t *testing.T, tg *wireTarget, what string) string {
	t.Helper()
	heads, stray := tg.take()
	if len(heads) != 1 || len(stray) > 0 {
		t.Fatalf("%s: the target received %v (stray %v), want one head", what, heads, stray)
	}
	return parseWireHead(heads[0].head).target
}

func TestH2QueryBytesArePercentEncoded(t *testing.T) {
	for _, impl := range []string{h2Own, h2Std} {
		t.Run(impl, func(t *testing.T) {
			tg := newWireTarget(t, wireOK)
			e := newEnv(t, func(c *Config) { c.stdH2 = impl == h2Std })
			e.apply([]routeSpec{{host: wireHost, backends: []string{tg.addr}}})
			for _, tc := range rawQueryCases {
				o := h2Exchange(t, e.http, [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", wireHost}, {":path", tc.path}}, nil)
				if o.status != "200" {
					t.Fatalf("%q answered %v, want 200", tc.path, o)
				}
				if got := wireTargetOf(t, tg, tc.path); got != tc.want {
					t.Errorf(":path %q reached the target as %q, want %q", tc.path, got, tc.want)
				}
			}
		})
	}
}

// TestH2ControlBytesInPathRefused: a control byte anywhere in :path, or a space in its
// query, never reaches a target (refused as before the query was encoded; a space in the
// path is escaped, as net/http's request writer escapes it).
func TestH2ControlBytesInPathRefused(t *testing.T) {
	tg := newWireTarget(t, wireOK)
	e := newEnv(t)
	e.apply([]routeSpec{{host: wireHost, backends: []string{tg.addr}}})
	for _, p := range []string{"/a\x01b", "/a?b=\x7f", "/a?b=\tc", "/a?b c"} {
		o := h2Exchange(t, e.http, [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", wireHost}, {":path", p}}, nil)
		if o.status == "200" {
			t.Errorf("%q answered 200, want it refused", p)
		}
		if heads, _ := tg.take(); len(heads) > 0 {
			t.Errorf("%q reached the target: %v", p, heads)
		}
	}
}

func TestH3QueryBytesArePercentEncoded(t *testing.T) {
	tg := newWireTarget(t, wireOK)
	e := newEnv(t, withHTTP3)
	const host = "raw.example.test"
	e.tlsRoute(host, tg.addr)
	client, _ := e.h3Client()
	for _, tc := range rawQueryCases {
		path, query, _ := strings.Cut(tc.path, "?")
		if strings.ContainsFunc(path, func(r rune) bool { return r >= 0x80 || r == 0xfffd }) {
			continue // the client escapes the path itself; the query it sends as it is
		}
		req, _ := http.NewRequest(http.MethodGet, "https://"+host+path, nil)
		req.URL.RawQuery = query
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%q: %v", tc.path, err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("%q answered %d, want 200", tc.path, res.StatusCode)
		}
		if got := wireTargetOf(t, tg, tc.path); got != tc.want {
			t.Errorf(":path %q reached the target as %q, want %q", tc.path, got, tc.want)
		}
	}
}

// TestExtendedConnectPathMustBeOriginForm: RFC 8441 over the own HTTP/2 engine. A :path
// that is not origin-form is answered 400 and reaches no target; "/ws" is upgraded.
func TestExtendedConnectPathMustBeOriginForm(t *testing.T) {
	tg := newWireTarget(t, wireOK) // answers the upgrade 200: the tunnel is refused after
	e := newEnv(t)
	e.apply([]routeSpec{{host: "ws.example.test", backends: []string{tg.addr}}})
	for _, p := range []string{"*", "ws.example.test:80", "http://ws.example.test/ws", "ws"} {
		res, w := extendedConnect(t, e.http, "ws.example.test", p, "websocket", "sec-websocket-version", "13")
		_ = w.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf(":path %q answered %d, want 400", p, res.StatusCode)
		}
		if heads, _ := tg.take(); len(heads) > 0 {
			t.Errorf(":path %q reached the target: %v", p, heads)
		}
	}
	// The same request with an origin-form path does reach the target.
	res, w := extendedConnect(t, e.http, "ws.example.test", "/ws?q=\xff", "websocket", "sec-websocket-version", "13")
	_ = w.Close()
	if res.StatusCode == http.StatusBadRequest {
		t.Fatalf("an origin-form :path answered 400")
	}
	if got := wireTargetOf(t, tg, "/ws"); got != "/ws?q=%FF" {
		t.Errorf("the upgrade reached the target for %q, want /ws?q=%%FF", got)
	}
}

// TestH3ExtendedConnectPathMustBeOriginForm: RFC 9220. quic-go's parser refuses a :path
// that is not origin-form before the handler; the ingress refuses it too. Either way no
// target sees it and the client gets no 200.
func TestH3ExtendedConnectPathMustBeOriginForm(t *testing.T) {
	tg := newWireTarget(t, wireOK)
	e := newEnv(t, withHTTP3)
	const host = "ws.example.test"
	e.tlsRoute(host, tg.addr)
	for _, target := range []*url.URL{{Opaque: "*"}} { // quic-go's client sends no other such path
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		qc, err := quic.DialAddr(ctx, e.srv.HTTP3Addr().String(),
			&tls.Config{InsecureSkipVerify: true, ServerName: host, NextProtos: []string{http3.NextProtoH3}}, &quic.Config{})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		cc := (&http3.Transport{}).NewClientConn(qc)
		<-cc.ReceivedSettings()
		str, err := cc.OpenRequestStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		req := &http.Request{Method: http.MethodConnect, URL: target, Host: host, Proto: "websocket",
			Header: http.Header{"Sec-Websocket-Version": {"13"}}}
		status := 0
		err = str.SendRequestHeader(req)
		if err == nil {
			var res *http.Response
			if res, err = str.ReadResponse(); err == nil {
				status = res.StatusCode
			}
		}
		_ = qc.CloseWithError(0, "")
		cancel()
		if status == http.StatusOK {
			t.Errorf("%v answered 200", target)
		}
		if heads, _ := tg.take(); len(heads) > 0 {
			t.Errorf("%v reached the target: %v", target, heads)
		}
	}
}

// TestAppendTargetQueryAllocatesNothing: encoding the query writes into the work area's
// buffer; it costs no allocation.
func TestAppendTargetQueryAllocatesNothing(t *testing.T) {
	buf := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if buf, err = appendTarget(buf[:0], "/q?a=\xff\xfe&b=%zz&c={x}"); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("appendTarget allocated %.1f times per call, want 0", allocs)
	}
	if got := string(buf); got != "/q?a=%FF%FE&b=%25zz&c=%7Bx%7D" {
		t.Fatalf("appendTarget wrote %q", got)
	}
}

// TestH3TunnelHandlerRefusesNonOriginPath: what quic-go's parser lets through reaches the
// handler's own check: an HTTP/3 extended CONNECT whose :path is not origin-form is
// answered 400 and no target sees it.
func TestH3TunnelHandlerRefusesNonOriginPath(t *testing.T) {
	tg := newWireTarget(t, wireOK)
	e := newEnv(t)
	const host = "ws.example.test"
	e.apply([]routeSpec{{host: host, backends: []string{tg.addr}}})
	for _, p := range []string{"*", "ws", "ws.example.test:443", "/ws\x01"} {
		r := httptest.NewRequest(http.MethodConnect, "https://"+host+"/ws", nil)
		r.Proto, r.ProtoMajor, r.ProtoMinor = "websocket", 3, 0
		r.Host = host // NewRequest reads a CONNECT's URL as an authority
		r.RequestURI = p
		r.TLS = nil // a plain route: the certificate check would need a QUIC connection
		r.Header.Set("Sec-Websocket-Version", "13")
		w := httptest.NewRecorder()
		e.srv.handler.ServeHTTP(w, r)
		if w.Code != http.StatusBadRequest {
			t.Errorf(":path %q answered %d %q, want 400", p, w.Code, w.Body.String())
		}
		if heads, _ := tg.take(); len(heads) > 0 {
			t.Errorf(":path %q reached the target: %v", p, heads)
		}
	}
}
