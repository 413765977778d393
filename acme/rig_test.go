package acme

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/serve-zone/ingress/internal/pebbletest"
	"github.com/serve-zone/ingress/internal/testcert"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/proxy"
	"github.com/serve-zone/ingress/routetable"
)

// The tests' harness: a real proxy (plain and TLS listeners on loopback) serving a
// standalone-mode Store, with the Manager's hooks, and a recorder of the Manager's events.

// waitLimit bounds every wait for an event.
const waitLimit = 60 * time.Second

// recorder keeps every event; tests wait for the one they expect.
type recorder struct {
	mu      sync.Mutex
	events  []event
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) add(e event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// mark is the index the next event will have.
func (r *recorder) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// since returns the events from index from on.
func (r *recorder) since(from int) []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events[from:])
}

// wait returns the first event from index from on that match accepts, and the index after
// it; it fails the test after limit.
func (r *recorder) wait(t testing.TB, from int, what string, match func(event) bool) (event, int) {
	t.Helper()
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	for {
		r.mu.Lock()
		for i := from; i < len(r.events); i++ {
			if match(r.events[i]) {
				e := r.events[i]
				r.mu.Unlock()
				return e, i + 1
			}
		}
		from = len(r.events)
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("no %s within %s; events: %+v", what, waitLimit, r.since(0))
		}
	}
}

func is(kind, host string) func(event) bool {
	return func(e event) bool { return e.Kind == kind && e.Hostname == host }
}

// rig is one ingress under test.
type rig struct {
	t       *testing.T
	store   *routetable.Store
	srv     *proxy.Server
	mgr     *Manager
	rec     *recorder
	logs    *pebbletest.SyncBuffer
	backend routetable.Target
	rev     int64

	httpAddr, httpsAddr net.Addr
	stopRun             context.CancelFunc
	runDone             chan error
	stopped             bool
}

// newRig binds the proxy (so that Pebble can be pointed at its ports) and builds the
// Manager; start runs it.
func newRig(t *testing.T, opts Options) *rig {
	t.Helper()
	r := &rig{t: t, rec: newRecorder(), logs: &pebbletest.SyncBuffer{}}
	r.store = routetable.NewStore(routetable.StoreOptions{Mode: routetable.ModeStandalone})
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
		zapcore.AddSync(r.logs), zapcore.DebugLevel))
	if opts.Logger == nil {
		opts.Logger = log.Named("acme")
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	mgr, err := New(r.store, opts)
	if err != nil {
		t.Fatal(err)
	}
	mgr.notify = r.rec.add
	r.mgr = mgr
	srv, err := proxy.New(proxy.Config{
		HTTPAddr:       "127.0.0.1:0",
		HTTPSAddr:      "127.0.0.1:0",
		Tables:         r.store,
		Logger:         log.Named("proxy"),
		GetCertificate: mgr.GetCertificate,
		NextProtos:     []string{ALPNProto},
		HTTPChallenge:  mgr.HandleHTTPChallenge,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	r.srv = srv
	r.httpAddr, r.httpsAddr = srv.Addrs()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()
	t.Cleanup(func() {
		r.stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
		if t.Failed() {
			t.Logf("ingress log:\n%s", r.logs.String())
		}
	})

	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		fmt.Fprintf(w, "backend %s %s", hostOnly(req.Host), req.URL.Path)
	}))
	t.Cleanup(be.Close)
	host, port, _ := net.SplitHostPort(be.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	r.backend = routetable.Target{LeaseID: "lease-1", Address: host, Port: p}
	return r
}

func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

// httpPort and httpsPort are the bound ports (for Pebble).
func (r *rig) httpPort() int  { return r.httpAddr.(*net.TCPAddr).Port }
func (r *rig) httpsPort() int { return r.httpsAddr.(*net.TCPAddr).Port }

// start runs the Manager until the test ends or stop.
func (r *rig) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.stopRun = cancel
	r.runDone = make(chan error, 1)
	go func() { r.runDone <- r.mgr.Run(ctx, r.httpAddr, r.httpsAddr) }()
}

// stop ends the Manager's Run and waits for it.
func (r *rig) stop() {
	if r.stopRun == nil || r.stopped {
		return
	}
	r.stopped = true
	r.stopRun()
	if err := <-r.runDone; err != nil {
		r.t.Errorf("Run: %v", err)
	}
}

// route describes one route of apply.
type route struct {
	host     string
	acme     bool
	certID   string
	redirect bool
}

// apply serves a table of routes (certificates made for the certID ones), all to the
// backend.
func (r *rig) apply(routes ...route) {
	r.t.Helper()
	r.rev++
	tb := &routetable.Table{Revision: r.rev, Routes: []routetable.Route{}, Certificates: []routetable.Certificate{}}
	for _, rt := range routes {
		x := routetable.Route{Hostname: rt.host, Targets: []routetable.Target{r.backend}}
		switch {
		case rt.acme:
			x.TLS = &routetable.RouteTLS{ACME: true, RedirectHTTP: rt.redirect}
		case rt.certID != "":
			x.TLS = &routetable.RouteTLS{CertificateID: rt.certID, RedirectHTTP: rt.redirect}
			c, k, err := testcert.Generate(rt.host)
			if err != nil {
				r.t.Fatal(err)
			}
			tb.Certificates = append(tb.Certificates, routetable.Certificate{ID: rt.certID, CertificatePEM: c, PrivateKeyPEM: k})
		}
		tb.Routes = append(tb.Routes, x)
	}
	slices.SortFunc(tb.Routes, func(a, b routetable.Route) int { return strings.Compare(a.Hostname, b.Hostname) })
	slices.SortFunc(tb.Certificates, func(a, b routetable.Certificate) int { return strings.Compare(a.ID, b.ID) })
	if err := r.store.ApplyStandalone(tb, true); err != nil {
		r.t.Fatalf("apply: %v", err)
	}
}

// handshake completes a TLS handshake for sni (offering h2 and http/1.1) and returns the
// leaf served, verified against roots (nil: not verified).
func (r *rig) handshake(sni string, roots *x509.CertPool) (*x509.Certificate, error) {
	cfg := &tls.Config{ServerName: sni, NextProtos: []string{"h2", "http/1.1"}, RootCAs: roots, InsecureSkipVerify: roots == nil}
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", r.httpsAddr.String(), cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

// waitServed waits until a handshake for sni verifies against roots and accept takes its
// leaf (nil accepts any), and returns that leaf.
func (r *rig) waitServed(sni string, roots *x509.CertPool, accept func(*x509.Certificate) bool) *x509.Certificate {
	r.t.Helper()
	var served *x509.Certificate
	testwait.UntilWhy(r.t, waitLimit, sni+": an acceptable certificate served", func() (bool, string) {
		leaf, err := r.handshake(sni, roots)
		if err != nil {
			return false, err.Error()
		}
		served = leaf
		return accept == nil || accept(leaf), "not accepted: " + leaf.Subject.String()
	})
	return served
}

// get sends GET url through the listeners (https to the TLS one, verified against roots;
// http to the plain one) and returns the status and body; redirects are not followed.
func (r *rig) get(rawURL string, roots *x509.CertPool) (int, string, error) {
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			var d net.Dialer
			if strings.HasSuffix(addr, ":443") {
				return d.DialContext(ctx, "tcp", r.httpsAddr.String())
			}
			return d.DialContext(ctx, "tcp", r.httpAddr.String())
		},
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Get(rawURL)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

// mustGet is get that fails the test on a transport error or an unexpected status.
func (r *rig) mustGet(rawURL string, roots *x509.CertPool, want int) string {
	r.t.Helper()
	st, body, err := r.get(rawURL, roots)
	if err != nil {
		r.t.Fatalf("GET %s: %v", rawURL, err)
	}
	if st != want {
		r.t.Fatalf("GET %s: %d %q, want %d", rawURL, st, body, want)
	}
	return body
}
