package proxy

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// TestHandlerRefusesFieldsNoHeadMayCarry: net/http's front-end writes the fields its
// server decoded into an HTTP/1.1 head as they are, so a name that is no token or a value
// with a line end (which an HTTP/3 server's decoder might pass on) is refused with 400 and
// never reaches a target; a trailer of that kind is left out.
func TestHandlerRefusesFieldsNoHeadMayCarry(t *testing.T) {
	e := newEnv(t)
	var hits atomic.Int64
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})
	for name, h := range map[string]http.Header{
		"value with CRLF":    {"X-Evil": {"a\r\nInjected: 1"}},
		"value with LF":      {"X-Evil": {"a\nInjected: 1"}},
		"value with NUL":     {"X-Evil": {"a\x00b"}},
		"name with a colon":  {"X-Evil:Injected": {"1"}},
		"name with a space":  {"X Evil": {"1"}},
		"name with CRLF":     {"X-Evil\r\nInjected": {"1"}},
		"Host-less smuggler": {"X-A": {"1\r\n\r\nGET /admin HTTP/1.1"}},
	} {
		t.Run(name, func(t *testing.T) {
			r, _ := http.NewRequest("GET", "http://app.example.test/p", nil)
			r.RemoteAddr = "192.0.2.7:4711"
			r.RequestURI = "/p"
			r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/3.0", 3, 0 // as quic-go hands them over
			r.Header = h
			w := &discardRW{h: http.Header{}}
			e.srv.handler.ServeHTTP(w, r)
			if w.code != http.StatusBadRequest {
				t.Errorf("status %d, want 400", w.code)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d of the requests reached the target", n)
	}
	r, _ := http.NewRequest("GET", "http://app.example.test/p", nil)
	r.RemoteAddr, r.RequestURI, r.Host = "192.0.2.7:4711", "/p", "app.example.test\r\nX: y"
	w := &discardRW{h: http.Header{}}
	e.srv.handler.ServeHTTP(w, r)
	if w.code != http.StatusBadRequest || hits.Load() != 0 {
		t.Errorf("a Host with a line end: status %d, target hits %d", w.code, hits.Load())
	}
	if got := trailerNames(http.Header{"Good": nil, "Bad\r\nName": nil}); strings.Contains(got, "\r") || got != "Good" {
		t.Errorf("trailer names %q", got)
	}
}
