package proxy

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/crypto/ocsp"

	"github.com/serve-zone/ingress/routetable"
)

// ocspCA is a test CA with an OCSP responder that answers status for every serial. A
// serial marked held is answered only when a test sends on release (or the request ends).
type ocspCA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	status  atomic.Int32 // ocsp.Good, ocsp.Revoked, …
	queries atomic.Int32
	serials atomic.Int64 // the last serial issued
	srv     *httptest.Server

	mu      sync.Mutex
	held    map[int64]bool // serials whose answer waits for release; holdAll holds every one
	holdAll bool
	release chan struct{}

	inflight    atomic.Int32 // requests being answered
	maxInflight atomic.Int32
}

func newOCSPCA(t *testing.T) *ocspCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca := &ocspCA{key: key, held: map[int64]bool{}, release: make(chan struct{})}
	ca.serials.Store(1)
	ca.cert, _ = x509.ParseCertificate(der)
	ca.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ca.queries.Add(1)
		body, _ := io.ReadAll(r.Body)
		req, err := ocsp.ParseRequest(body)
		if err != nil {
			http.Error(w, "bad request", 400)
			return
		}
		n := ca.inflight.Add(1)
		for m := ca.maxInflight.Load(); n > m && !ca.maxInflight.CompareAndSwap(m, n); m = ca.maxInflight.Load() {
		}
		ca.mu.Lock()
		hold := ca.holdAll || ca.held[req.SerialNumber.Int64()]
		ca.mu.Unlock()
		if hold {
			select {
			case <-ca.release:
			case <-r.Context().Done():
			}
		}
		// Out of flight before the answer leaves: the fetcher that gets it can only then
		// free its slot.
		ca.inflight.Add(-1)
		now := time.Now()
		tmpl := ocsp.Response{
			Status: int(ca.status.Load()), SerialNumber: req.SerialNumber,
			ThisUpdate: now.Add(-time.Minute), NextUpdate: now.Add(time.Hour), RevokedAt: now.Add(-time.Hour),
		}
		resp, err := ocsp.CreateResponse(ca.cert, ca.cert, tmpl, ca.key)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Type", "application/ocsp-response")
		_, _ = w.Write(resp)
	}))
	t.Cleanup(ca.srv.Close)
	return ca
}

// hold makes the responder keep the answer for serial until release.
func (ca *ocspCA) hold(serial int64) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	ca.held[serial] = true
}

// leaf issues a certificate for host; withResponder names the CA's responder in it.
func (ca *ocspCA) leaf(t *testing.T, host string, withResponder bool) (certPEM, keyPEM string) {
	l := ca.issue(t, "", host, withResponder)
	return l.CertificatePEM, l.PrivateKeyPEM
}

// testLeaf is an issued certificate with its route-table id and hostname.
type testLeaf struct {
	routetable.Certificate
	host   string
	serial int64
}

// issue issues a certificate for host under id.
func (ca *ocspCA) issue(t *testing.T, id, host string, withResponder bool) testLeaf {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial := ca.serials.Add(1)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(12 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if withResponder {
		tmpl.OCSPServer = []string{ca.srv.URL}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalPKCS8PrivateKey(key)
	chain := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})...)
	return testLeaf{
		Certificate: routetable.Certificate{ID: id, CertificatePEM: string(chain),
			PrivateKeyPEM: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}))},
		host: host, serial: serial,
	}
}

// leaves issues n certificates with a responder, ids c00… and hosts h00.example.test…,
// in table order.
func (ca *ocspCA) leaves(t *testing.T, n int) []testLeaf {
	out := make([]testLeaf, n)
	for i := range out {
		out[i] = ca.issue(t, fmt.Sprintf("c%02d", i), fmt.Sprintf("h%02d.example.test", i), true)
	}
	return out
}

// applyLeaves applies a table of revision rev with one route per leaf.
func applyLeaves(t *testing.T, store *routetable.Store, rev int64, leaves ...testLeaf) {
	t.Helper()
	tb := &routetable.Table{Revision: rev}
	for _, l := range leaves {
		tb.Routes = append(tb.Routes, routetable.Route{Hostname: l.host,
			Targets: []routetable.Target{{LeaseID: "l1", Address: "127.0.0.1", Port: 9}},
			TLS:     &routetable.RouteTLS{CertificateID: l.ID}})
		tb.Certificates = append(tb.Certificates, l.Certificate)
	}
	// A table lists both in byte order.
	slices.SortFunc(tb.Routes, func(x, y routetable.Route) int { return strings.Compare(x.Hostname, y.Hostname) })
	slices.SortFunc(tb.Certificates, func(x, y routetable.Certificate) int { return strings.Compare(x.ID, y.ID) })
	if err := store.Apply(tb); err != nil {
		t.Fatal(err)
	}
}

// runStapler runs a stapler over store, looking for new tables every 5 ms, until the test
// ends; the cleanup waits for run (and so every fetch) to return. logs holds its log.
func runStapler(t *testing.T, store *routetable.Store) (*stapler, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	s := newStapler(store, zap.New(core))
	s.checkEvery = 5 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("the stapler's run did not return after its context ended")
		}
	})
	return s, logs
}

// stapled reports whether the serving table's certificate for host is served stapled.
func stapled(s *stapler, store *routetable.Store, host string) bool {
	return len(s.staple(store.Load().GetCertificate(host)).OCSPStaple) > 0
}

// fetchesOf counts the fetches the stapler started for certificate id.
func fetchesOf(logs *observer.ObservedLogs, id string) int {
	n := 0
	for _, e := range logs.FilterMessage("fetching OCSP response").All() {
		if e.ContextMap()["certificateId"] == id {
			n++
		}
	}
	return n
}

func TestStaplerStaplesGoodResponses(t *testing.T) {
	ca := newOCSPCA(t)
	ca.status.Store(ocsp.Good)
	store := routetable.NewStore(routetable.StoreOptions{})
	a := ca.issue(t, "c1", "app.example.test", true)
	applyLeaves(t, store, 1, a)
	s, _ := runStapler(t, store)
	waitFor(t, "the staple", func() bool { return stapled(s, store, a.host) })
	cert := store.Load().GetCertificate(a.host)
	got := s.staple(cert)
	leaf, issuer := chainOf(cert)
	if r, err := ocsp.ParseResponseForCert(got.OCSPStaple, leaf, issuer); err != nil || r.Status != ocsp.Good {
		t.Fatalf("staple unusable: %v", err)
	}
	if len(cert.OCSPStaple) != 0 {
		t.Fatal("the table's certificate was modified; it is shared and must stay immutable")
	}
}

func TestStaplerSkipsRevokedAndResponderless(t *testing.T) {
	ca := newOCSPCA(t)
	ca.status.Store(ocsp.Revoked)
	store := routetable.NewStore(routetable.StoreOptions{})
	revoked := ca.issue(t, "revoked", "revoked.example.test", true)
	plain := ca.issue(t, "plain", "plain.example.test", false)
	applyLeaves(t, store, 1, revoked, plain)
	s, logs := runStapler(t, store)
	waitFor(t, "the revocation to be seen", func() bool {
		return logs.FilterMessage("certificate revoked according to its OCSP responder; served without a staple").Len() > 0
	})
	if stapled(s, store, revoked.host) || stapled(s, store, plain.host) {
		t.Fatal("a revoked response was stapled, or a leaf without responder")
	}
	// Both fetches would have been started together (the bound is 8); only one was.
	if fetchesOf(logs, "plain") != 0 || ca.queries.Load() != 1 {
		t.Fatal("asked a responder for a leaf that names none")
	}
}

// A responder slow for one certificate delays no other certificate's staple: they are
// fetched concurrently and each is published as it arrives.
func TestStaplerSlowResponderDelaysOnlyItsCertificate(t *testing.T) {
	ca := newOCSPCA(t)
	ca.status.Store(ocsp.Good)
	store := routetable.NewStore(routetable.StoreOptions{})
	ls := ca.leaves(t, 12)
	ca.hold(ls[0].serial) // the first of the table: a one-at-a-time fetch waits for it first
	applyLeaves(t, store, 1, ls...)
	s, _ := runStapler(t, store)
	waitFor(t, "every other certificate stapled", func() bool {
		for _, l := range ls[1:] {
			if !stapled(s, store, l.host) {
				return false
			}
		}
		return true
	})
	if stapled(s, store, ls[0].host) {
		t.Fatal("the held certificate is stapled before its responder answered")
	}
	ca.release <- struct{}{}
	waitFor(t, "the slow certificate stapled", func() bool { return stapled(s, store, ls[0].host) })
}

// A new table that keeps a leaf serves its staple at once, without a new fetch and
// without waiting for the fetches of its new leaves.
func TestStaplerTableSwapKeepsStaple(t *testing.T) {
	ca := newOCSPCA(t)
	ca.status.Store(ocsp.Good)
	store := routetable.NewStore(routetable.StoreOptions{})
	a := ca.issue(t, "a", "a.example.test", true)
	b := ca.issue(t, "b", "b.example.test", true)
	c := ca.issue(t, "c", "c.example.test", true)
	applyLeaves(t, store, 1, a)
	s, logs := runStapler(t, store)
	waitFor(t, "a stapled", func() bool { return stapled(s, store, a.host) })
	first := s.staple(store.Load().GetCertificate(a.host)).OCSPStaple

	ca.hold(b.serial) // b's answer waits until the end of the test
	applyLeaves(t, store, 2, a, b)
	cert := store.Load().GetCertificate(a.host)
	waitFor(t, "a stapled in the new table", func() bool { return len(s.staple(cert).OCSPStaple) > 0 })
	if got := s.staple(cert).OCSPStaple; &got[0] != &first[0] {
		t.Fatal("the new table's copy of a does not carry the staple a had")
	}
	if stapled(s, store, b.host) {
		t.Fatal("b stapled before its responder answered")
	}
	// A fetch of a for the second table would have started before the third table is
	// seen; c's fetch starts after it.
	applyLeaves(t, store, 3, a, b, c)
	waitFor(t, "c's fetch", func() bool { return fetchesOf(logs, "c") > 0 })
	if n := fetchesOf(logs, "a"); n != 1 {
		t.Fatalf("a fetched %d times, want once: a kept leaf is not fetched again until due", n)
	}
	waitFor(t, "c stapled", func() bool { return stapled(s, store, c.host) })
}

// At most ocspFetchers fetches run at once, and that many do.
func TestStaplerBoundsConcurrentFetches(t *testing.T) {
	ca := newOCSPCA(t)
	ca.status.Store(ocsp.Good)
	ca.holdAll = true
	store := routetable.NewStore(routetable.StoreOptions{})
	const n = 3 * ocspFetchers
	ls := ca.leaves(t, n)
	applyLeaves(t, store, 1, ls...)
	s, _ := runStapler(t, store)
	// Answer one held request at a time, each once as many are in flight as the bound
	// allows: an unbounded stapler has all n in flight at once.
	for answered := 0; answered < n; answered++ {
		want := int32(min(ocspFetchers, n-answered))
		waitFor(t, fmt.Sprintf("%d fetches in flight", want), func() bool { return ca.inflight.Load() >= want })
		ca.release <- struct{}{}
	}
	waitFor(t, "every certificate stapled", func() bool {
		for _, l := range ls {
			if !stapled(s, store, l.host) {
				return false
			}
		}
		return true
	})
	if m := ca.maxInflight.Load(); m != ocspFetchers {
		t.Fatalf("at most %d fetches at once, want %d", m, ocspFetchers)
	}
}

// TestHandshakeCarriesStaple: a client sees the staple in the TLS handshake.
func TestHandshakeCarriesStaple(t *testing.T) {
	ca := newOCSPCA(t)
	ca.status.Store(ocsp.Good)
	e := newEnv(t)
	certPEM, keyPEM := ca.leaf(t, "app.example.test", true)
	if err := e.store.Apply(&routetable.Table{
		Revision: 1,
		Routes: []routetable.Route{{Hostname: "app.example.test",
			Targets: []routetable.Target{{LeaseID: "l1", Address: "127.0.0.1", Port: 9}},
			TLS:     &routetable.RouteTLS{CertificateID: "c1"}}},
		Certificates: []routetable.Certificate{{ID: "c1", CertificatePEM: certPEM, PrivateKeyPEM: keyPEM}},
	}); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	waitFor(t, "stapled handshake", func() bool {
		c, err := tls.Dial("tcp", e.https, &tls.Config{ServerName: "app.example.test", RootCAs: pool})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return len(c.ConnectionState().OCSPResponse) > 0
	})
}
