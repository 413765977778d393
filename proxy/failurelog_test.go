package proxy

import (
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/serve-zone/ingress/routetable"
)

// withLogs records the server's log at debug level and its access log.
func withLogs(logs, access **observer.ObservedLogs) func(*Config) {
	return func(c *Config) {
		core, l := observer.New(zapcore.DebugLevel)
		c.Logger = zap.New(core)
		*logs = l
		acore, al := observer.New(zapcore.InfoLevel)
		c.AccessLog = zap.New(acore)
		*access = al
	}
}

// TestBackendFailuresAreLogged: a failing target is said in the log, with the route, the
// target's lease and address, the failure kind and the error, one line per target per
// failureLogEvery, the next line counting the failures not logged in between; the access
// log carries the same target and error, the client's address and the query, on both
// HTTP/1.1 paths.
func TestBackendFailuresAreLogged(t *testing.T) {
	for _, h1Off := range []bool{false, true} {
		var logs, access *observer.ObservedLogs
		e := newEnv(t, withLogs(&logs, &access), withH1OffIf(h1Off))
		dead := deadAddr(t)
		tb := e.apply([]routeSpec{{host: "app.example.test", backends: []string{dead}}})
		lease := tb.Routes[0].Targets[0].LeaseID
		c := e.h1Client()
		const n = 20
		for range n {
			res, _ := get(t, c, "http://app.example.test/p?q=1&r=2", "")
			if res.StatusCode != http.StatusBadGateway {
				t.Fatalf("h1Off=%v: status %d, want 502", h1Off, res.StatusCode)
			}
		}
		lines := logs.FilterMessage("backend failure").All()
		if len(lines) != 1 {
			t.Fatalf("h1Off=%v: %d failure lines for %d failures within %s, want 1", h1Off, len(lines), n, failureLogEvery)
		}
		f := lines[0].ContextMap()
		if f["host"] != "app.example.test" || f["lease"] != lease || f["target"] != dead || f["kind"] != "connect" ||
			!strings.Contains(f["error"].(string), "connect") || lines[0].Level != zapcore.WarnLevel {
			t.Errorf("h1Off=%v: failure line %v", h1Off, f)
		}
		// The gate opens again after failureLogEvery (moved back here rather than waited
		// for): the next line counts the failures it held back.
		b := e.srv.tables.Load().Lookup("app.example.test").Backends[0]
		b.State.LoggedAt.Add(-int64(failureLogEvery))
		get(t, c, "http://app.example.test/", "")
		lines = logs.FilterMessage("backend failure").All()
		if len(lines) != 2 || lines[1].ContextMap()["unlogged"] != int64(n-1) {
			t.Errorf("h1Off=%v: after the gate reopened: %d lines, last %v; want 2, unlogged %d", h1Off, len(lines), lines[len(lines)-1].ContextMap(), n-1)
		}
		waitFor(t, "access lines", func() bool { return access.Len() >= n+1 })
		a := access.All()[0].ContextMap()
		if a["status"] != int64(502) || a["query"] != "q=1&r=2" || a["path"] != "/p" || a["lease"] != lease ||
			a["target"] != dead || !strings.HasPrefix(a["client"].(string), "127.0.0.1:") || !strings.Contains(a["error"].(string), "connect") {
			t.Errorf("h1Off=%v: access line %v", h1Off, a)
		}
	}
}

// TestHandshakeFailuresAreLogged: a refused TLS handshake is said at debug level, with
// the client's address and the SNI asked for.
func TestHandshakeFailuresAreLogged(t *testing.T) {
	var logs, access *observer.ObservedLogs
	e := newEnv(t, withLogs(&logs, &access))
	be := backend(t, echoInfo())
	e.apply([]routeSpec{{host: "a.example.test", tls: &routetable.RouteTLS{CertificateID: "c"}, backends: []string{be}}},
		certSpec{"c", []string{"a.example.test"}})
	if c, err := tls.Dial("tcp", e.https, &tls.Config{ServerName: "nobody.example.test", InsecureSkipVerify: true}); err == nil {
		c.Close()
		t.Fatal("handshake for an unknown name succeeded")
	}
	waitFor(t, "handshake failure line", func() bool { return logs.FilterMessage("TLS handshake failed").Len() == 1 })
	f := logs.FilterMessage("TLS handshake failed").All()[0]
	if f.Level != zapcore.DebugLevel || f.ContextMap()["sni"] != "nobody.example.test" ||
		!strings.HasPrefix(f.ContextMap()["client"].(string), "127.0.0.1:") {
		t.Errorf("handshake failure line %v at %v", f.ContextMap(), f.Level)
	}
}

// TestForwardingLookalikesDropped: X_Forwarded_For and its kin, which CGI and WSGI
// targets read as X-Forwarded-For, never reach a target, on either HTTP/1.1 path.
func TestForwardingLookalikesDropped(t *testing.T) {
	for _, h1Off := range []bool{false, true} {
		e := newEnv(t, withH1OffIf(h1Off))
		seen := make(chan http.Header, 1)
		be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header.Clone() }))
		e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})
		req, _ := http.NewRequest("GET", "http://app.example.test/", nil)
		for _, k := range []string{"X_Forwarded_For", "x_forwarded_proto", "X_FORWARDED_HOST", "X_Real_Ip"} {
			req.Header[k] = []string{"6.6.6.6"}
		}
		req.Header["X_Other_Thing"] = []string{"kept"}
		res, err := e.h1Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		h := <-seen
		for k, v := range h {
			if strings.Contains(strings.Join(v, ","), "6.6.6.6") {
				t.Errorf("h1Off=%v: %s: %q reached the target", h1Off, k, v)
			}
		}
		if len(h.Values("X_other_thing")) != 1 {
			t.Errorf("h1Off=%v: an unrelated field with '_' was dropped: %v", h1Off, h)
		}
	}
}

// TestAccessFieldsClipped: a client-chosen path or query longer than accessFieldMax is
// cut in the access log (HPACK makes repeating one cheap for an HTTP/2 client).
func TestAccessFieldsClipped(t *testing.T) {
	var logs, access *observer.ObservedLogs
	e := newEnv(t, withLogs(&logs, &access))
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{backend(t, echoInfo())}}})
	long := strings.Repeat("p", 3*accessFieldMax)
	get(t, e.h2cClient(), "http://app.example.test/"+long+"?"+long, "")
	waitFor(t, "access line", func() bool { return access.Len() == 1 })
	a := access.All()[0].ContextMap()
	for _, k := range []string{"path", "query"} {
		if v := a[k].(string); len(v) > accessFieldMax+len("…") || !strings.HasSuffix(v, "…") {
			t.Errorf("%s logged with %d bytes, want it clipped to %d", k, len(v), accessFieldMax)
		}
	}
}
