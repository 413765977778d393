package proxy

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/serve-zone/ingress/proxy/internal/h1wire"
	"golang.org/x/net/http/httpguts"
)

// FuzzHeaderRewrite feeds client-controlled values (Connection tokens, Host, RemoteAddr)
// through the header rewrite of net/http's front-ends (removeHopByHop, then appendHead):
// it must never panic, must leave no hop-by-hop header, the Forwarded element must keep
// its three parameters, and the head must be one request net/http reads back with this
// hop's forwarding fields.
func FuzzHeaderRewrite(f *testing.F) {
	f.Add("keep-alive, X-Foo, Upgrade", "app.example.test", "192.0.2.1:1234", "trailers")
	f.Add("close", "a.test:8080", "[2001:db8::1]:443", "gzip")
	f.Add(",,,", `we"ird\host`, "garbage", "")
	f.Fuzz(func(t *testing.T, conn, host, remote, te string) {
		h := http.Header{"Connection": {conn}, "X-Foo": {"1"}, "Te": {te}, "Upgrade": {"h2c"}, "Keep-Alive": {"1"}}
		teTrailers := removeHopByHop(h)
		for _, k := range h1wire.HopByHop {
			if _, ok := h[k]; ok {
				t.Fatalf("%s survived", k)
			}
		}
		ip := clientIP(remote)
		elem := string(appendForwardedElement(nil, ip, host, false))
		if !strings.HasPrefix(elem, "for=") || !strings.Contains(elem, ";host=") || !strings.HasSuffix(elem, ";proto=http") {
			t.Fatalf("element %q", elem)
		}
		if !h1wire.ValidHostPort(host) || !httpguts.ValidHostHeader(host) || !validFieldValue(ip) {
			return // refused before a head is written (malformed, or by the servers' own checks)
		}
		var lf listFields
		lf.fields = appendHeaderFields(nil, h)
		lf.classify(nil)
		b, _ := appendHead(nil, &lf, &outHead{method: "GET", target: "/", host: host, te: teTrailers,
			fwd: forwardedFor{clientIP: ip, host: host}})
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			t.Fatalf("head %q: %v", b, err)
		}
		if req.Header.Get("X-Forwarded-For") != ip || req.Header.Get("X-Forwarded-Host") != host || req.Header.Get("Forwarded") != elem {
			t.Fatalf("forwarded fields %v", req.Header)
		}
		for _, k := range h1wire.HopByHop {
			if _, ok := req.Header[k]; ok && !(k == "Te" && teTrailers) {
				t.Fatalf("%s reached the target: %q", k, b)
			}
		}
	})
}

// validFieldValue reports a value a field may carry: no control byte but HTAB, no DEL,
// nothing net/http's reader would trim.
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if h1wire.BadValueByte[v[i]] {
			return false
		}
	}
	return strings.TrimSpace(v) == v
}
