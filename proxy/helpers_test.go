package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/testcert"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// genCert returns a self-signed ECDSA P-256 certificate and key (PEM) covering hosts.
func genCert(t testing.TB, hosts ...string) (certPEM, keyPEM string) {
	t.Helper()
	c, k, err := testcert.Generate(hosts...)
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}

// env is a proxy on loopback with its store and statistics registry.
type env struct {
	t      testing.TB
	reg    *stats.Registry
	store  *routetable.Store
	srv    *Server
	totals *stats.Totals
	http   string // "127.0.0.1:port"
	https  string
	rev    int64
	served chan error
}

func newEnv(t testing.TB, opts ...func(*Config)) *env {
	t.Helper()
	reg := stats.NewRegistry(stats.Options{NodeID: "node-1"})
	store := routetable.NewStore(routetable.StoreOptions{Stats: reg})
	e := &env{t: t, reg: reg, store: store, totals: new(stats.Totals), served: make(chan error, 1)}
	cfg := Config{
		HTTPAddr:              "127.0.0.1:0",
		HTTPSAddr:             "127.0.0.1:0",
		Tables:                store,
		Totals:                e.totals,
		DialTimeout:           2 * time.Second,
		ResponseHeaderTimeout: 5 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	ha, hsa := srv.Addrs()
	if ha != nil {
		e.http = ha.String()
	}
	if hsa != nil {
		e.https = hsa.String()
	}
	go func() { e.served <- srv.Serve(context.Background()) }()
	waitFor(t, "ready", srv.Ready)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		select {
		case err := <-e.served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return after Shutdown")
		}
	})
	return e
}

// routeSpec describes a route of a table; apply sorts what the contract wants sorted.
type routeSpec struct {
	host     string
	tls      *routetable.RouteTLS
	backends []string // "127.0.0.1:port"
}

type certSpec struct {
	id    string
	hosts []string
}

func (e *env) apply(routes []routeSpec, certs ...certSpec) *routetable.Table {
	e.t.Helper()
	e.rev++
	tb := &routetable.Table{Revision: e.rev, Routes: []routetable.Route{}, Certificates: []routetable.Certificate{}}
	for _, c := range certs {
		cp, kp := genCert(e.t, c.hosts...)
		tb.Certificates = append(tb.Certificates, routetable.Certificate{ID: c.id, CertificatePEM: cp, PrivateKeyPEM: kp})
	}
	for _, r := range routes {
		rt := routetable.Route{Hostname: r.host, TLS: r.tls}
		for _, b := range r.backends {
			rt.Targets = append(rt.Targets, targetOf(e.t, b))
		}
		slices.SortFunc(rt.Targets, func(a, b routetable.Target) int {
			if c := strings.Compare(a.Address, b.Address); c != 0 {
				return c
			}
			return a.Port - b.Port
		})
		tb.Routes = append(tb.Routes, rt)
	}
	slices.SortFunc(tb.Routes, func(a, b routetable.Route) int { return strings.Compare(a.Hostname, b.Hostname) })
	slices.SortFunc(tb.Certificates, func(a, b routetable.Certificate) int { return strings.Compare(a.ID, b.ID) })
	if err := e.store.Apply(tb); err != nil {
		e.t.Fatalf("apply: %v", err)
	}
	return tb
}

// stat returns today's counters of hostname (zero entry when it has none).
func (e *env) stat(hostname string) stats.Entry {
	p, err := e.reg.Query(stats.Query{FromDay: e.reg.Today(), ToDay: e.reg.Today(), Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, en := range p.Statistics {
		if en.Hostname == hostname {
			return en
		}
	}
	return stats.Entry{}
}

func (e *env) entries() int {
	p, err := e.reg.Query(stats.Query{FromDay: e.reg.Today(), ToDay: e.reg.Today(), Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(p.Statistics)
}

// waitFor is testwait.Until with the package's usual 5 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 15*time.Second, what, cond) // generous for a loaded machine: it ends at the event
}

// Clients. Each dials the proxy's listener whatever the URL's host says.

func (e *env) h1Client() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:              nil,
			DisableCompression: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", e.http)
			},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       20 * time.Second,
	}
}

func (e *env) h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{
		Transport: &http.Transport{
			Proxy:     nil,
			Protocols: &p,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", e.http)
			},
		},
		Timeout: 20 * time.Second,
	}
}

// tlsClient speaks h2 when h2 is true, else HTTP/1.1 over TLS. The served certificate is
// checked by the tests themselves (self-signed).
func (e *env) tlsClient(h2 bool) *http.Client {
	var p http.Protocols
	if h2 {
		p.SetHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:           nil,
			Protocols:       &p,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", e.https)
			},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       20 * time.Second,
	}
}

// echoInfo answers with what it saw, as headers.
func echoInfo() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen-Host", r.Host)
		w.Header().Set("X-Seen-Path", r.URL.RequestURI())
		w.Header().Set("X-Seen-Proto", r.Proto)
		for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Forwarded", "Connection", "Keep-Alive", "Te", "Upgrade", "Proxy-Authorization", "X-Custom", "User-Agent"} {
			if v, ok := r.Header[k]; ok {
				w.Header()["X-Seen-"+k] = []string{strings.Join(v, " | ")}
			}
		}
		fmt.Fprintf(w, "hello from %s", r.Host)
	})
}

// collect is a tiny concurrent error collector for load tests.
type collect struct {
	mu   sync.Mutex
	errs []error
}

func (c *collect) add(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}

func (c *collect) check(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, err := range c.errs {
		if i >= 5 {
			t.Errorf("... and %d more", len(c.errs)-5)
			break
		}
		t.Error(err)
	}
}

func dialRaw(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

// waitRequests waits until hostname has counted n requests: a request is counted after
// its response has been flushed, so a client can see the answer a moment earlier.
func (e *env) waitRequests(hostname string, n uint64) {
	e.t.Helper()
	waitFor(e.t, hostname+" requests", func() bool { return e.stat(hostname).Requests == n })
}

// waitServed fails t unless Serve returns nil within 5 s (after a Shutdown or a cancel);
// it puts the result back for the env's cleanup.
func (e *env) waitServed(t testing.TB) { t.Helper(); e.waitServedWithin(t, 5*time.Second) }

// waitServedWithin is waitServed with a limit of d.
func (e *env) waitServedWithin(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case err := <-e.served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
		e.served <- nil
	case <-time.After(d):
		t.Fatal("Serve did not return")
	}
}

// openFDs is how many descriptors the process has open (Linux: /proc/self/fd).
func openFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
