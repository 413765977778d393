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
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/ocsp"

	"github.com/serve-zone/ingress/routetable"
)

// ocspCA is a test CA with an OCSP responder that answers status for every serial.
type ocspCA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	status  atomic.Int32 // ocsp.Good, ocsp.Revoked, …
	queries atomic.Int32
	srv     *httptest.Server
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
	ca := &ocspCA{key: key}
	ca.cert, _ = x509.ParseCertificate(der)
	ca.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ca.queries.Add(1)
		body, _ := io.ReadAll(r.Body)
		req, err := ocsp.ParseRequest(body)
		if err != nil {
			http.Error(w, "bad request", 400)
			return
		}
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

// leaf issues a certificate for host; withResponder names the CA's responder in it.
func (ca *ocspCA) leaf(t *testing.T, host string, withResponder bool) (certPEM, keyPEM string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
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
	return string(chain), string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}))
}

func stapleTable(t *testing.T, ca *ocspCA, rev int64, withResponder bool) *routetable.Store {
	t.Helper()
	certPEM, keyPEM := ca.leaf(t, "app.example.test", withResponder)
	store := routetable.NewStore(routetable.StoreOptions{})
	err := store.Apply(&routetable.Table{
		Revision: rev,
		Routes: []routetable.Route{{Hostname: "app.example.test",
			Targets: []routetable.Target{{LeaseID: "l1", Address: "127.0.0.1", Port: 9}},
			TLS:     &routetable.RouteTLS{CertificateID: "c1"}}},
		Certificates: []routetable.Certificate{{ID: "c1", CertificatePEM: certPEM, PrivateKeyPEM: keyPEM}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

func TestStaplerStaplesGoodResponses(t *testing.T) {
	ca := newOCSPCA(t)
	ca.status.Store(ocsp.Good)
	store := stapleTable(t, ca, 1, true)
	s := newStapler(store, zap.NewNop())
	s.refresh(context.Background(), store.Load())
	cert := store.Load().GetCertificate("app.example.test")
	got := s.staple(cert)
	if len(got.OCSPStaple) == 0 {
		t.Fatal("no staple for a certificate whose leaf names a responder")
	}
	leaf, issuer := chainOf(cert)
	if r, err := ocsp.ParseResponseForCert(got.OCSPStaple, leaf, issuer); err != nil || r.Status != ocsp.Good {
		t.Fatalf("staple unusable: %v", err)
	}
	if len(cert.OCSPStaple) != 0 {
		t.Fatal("the table's certificate was modified; it is shared and must stay immutable")
	}
	// A fresh staple is not fetched again.
	s.refresh(context.Background(), store.Load())
	if n := ca.queries.Load(); n != 1 {
		t.Fatalf("%d responder queries, want 1", n)
	}
}

func TestStaplerSkipsRevokedAndResponderless(t *testing.T) {
	ca := newOCSPCA(t)
	ca.status.Store(ocsp.Revoked)
	store := stapleTable(t, ca, 1, true)
	s := newStapler(store, zap.NewNop())
	s.refresh(context.Background(), store.Load())
	cert := store.Load().GetCertificate("app.example.test")
	if len(s.staple(cert).OCSPStaple) != 0 {
		t.Fatal("a revoked response was stapled")
	}
	plain := stapleTable(t, ca, 2, false)
	s2 := newStapler(plain, zap.NewNop())
	before := ca.queries.Load()
	s2.refresh(context.Background(), plain.Load())
	if ca.queries.Load() != before {
		t.Fatal("asked a responder for a leaf that names none")
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
