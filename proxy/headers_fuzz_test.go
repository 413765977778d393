package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/serve-zone/ingress/proxy/internal/h1wire"
)

// FuzzHeaderRewrite feeds client-controlled values (Connection tokens, Host, RemoteAddr)
// through the header rewrite: it must never panic, must leave no hop-by-hop header, and
// the Forwarded element must keep its three parameters.
func FuzzHeaderRewrite(f *testing.F) {
	f.Add("keep-alive, X-Foo, Upgrade", "app.example.test", "192.0.2.1:1234", "trailers")
	f.Add("close", "a.test:8080", "[2001:db8::1]:443", "gzip")
	f.Add(",,,", `we"ird\host`, "garbage", "")
	f.Fuzz(func(t *testing.T, conn, host, remote, te string) {
		h := http.Header{"Connection": {conn}, "X-Foo": {"1"}, "Te": {te}, "Upgrade": {"h2c"}, "Keep-Alive": {"1"}}
		removeHopByHop(h)
		for _, k := range h1wire.HopByHop {
			if _, ok := h[k]; ok {
				t.Fatalf("%s survived", k)
			}
		}
		ip := clientIP(remote)
		elem := forwardedElement(forwardedFor{clientIP: ip, host: host})
		if !strings.HasPrefix(elem, "for=") || !strings.Contains(elem, ";host=") || !strings.HasSuffix(elem, ";proto=http") {
			t.Fatalf("element %q", elem)
		}
		var o outbound
		setForwarded(h, forwardedFor{clientIP: ip, host: host}, &o)
		if h.Get("X-Forwarded-For") != ip || h.Get("X-Forwarded-Host") != host {
			t.Fatalf("forwarded headers %v", h)
		}
	})
}
