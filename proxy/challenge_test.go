package proxy

import (
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/serve-zone/ingress/routetable"
)

// TestHTTPChallengeHook: on the plain listener, requests under /.well-known/acme-challenge/
// are offered to Config.HTTPChallenge before routing and redirects, on the fast path's
// connections (handed to net/http) and over h2c alike; what the hook declines is routed as
// usual, and the TLS listener never asks it.
func TestHTTPChallengeHook(t *testing.T) {
	var asked atomic.Int64
	e := newEnv(t, func(c *Config) {
		c.HTTPChallenge = func(w http.ResponseWriter, r *http.Request) bool {
			asked.Add(1)
			if r.URL.Path != "/.well-known/acme-challenge/tok" || hostOnly(r.Host) != "a.example.test" {
				return false
			}
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "tok.thumbprint")
			return true
		}
	})
	be := backend(t, echoInfo())
	e.apply([]routeSpec{
		{host: "a.example.test", tls: &routetable.RouteTLS{CertificateID: "c", RedirectHTTP: true}, backends: []string{be}},
	}, certSpec{"c", []string{"a.example.test"}})

	for name, c := range map[string]*http.Client{"http1": e.h1Client(), "h2c": e.h2cClient()} {
		t.Run(name, func(t *testing.T) {
			before := asked.Load()
			res, body := get(t, c, "http://a.example.test/.well-known/acme-challenge/tok", "")
			if res.StatusCode != http.StatusOK || body != "tok.thumbprint" {
				t.Fatalf("challenge: %d %q, want 200 with the key authorization", res.StatusCode, body)
			}
			if name == "h2c" {
				return // the h2c client follows redirects; the declines are checked on HTTP/1.1
			}
			res, _ = get(t, c, "http://a.example.test/.well-known/acme-challenge/other", "")
			if res.StatusCode != http.StatusPermanentRedirect {
				t.Errorf("declined challenge path: %d, want the route's 308", res.StatusCode)
			}
			res, _ = get(t, c, "http://a.example.test/x", "")
			if res.StatusCode != http.StatusPermanentRedirect {
				t.Errorf("other path: %d, want 308", res.StatusCode)
			}
			if n := asked.Load() - before; n != 2 {
				t.Errorf("hook asked %d times, want 2 (never for other paths)", n)
			}
		})
	}

	before := asked.Load()
	res, body := get(t, e.tlsClient(false), "https://a.example.test/.well-known/acme-challenge/tok", "")
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(body, "hello from") {
		t.Errorf("over TLS: %d %q, want the backend's answer", res.StatusCode, body)
	}
	if asked.Load() != before {
		t.Error("the hook was asked on the TLS listener")
	}
}

// TestTLSALPNChallengeHook: a hello that offers only Config.NextProtos goes to
// Config.GetCertificate even for a name the table has a certificate for, negotiates that
// protocol and is closed after the handshake; a hello that also offers h2 or http/1.1 gets
// the table's certificate; a name neither knows gets the unrecognized_name alert.
func TestTLSALPNChallengeHook(t *testing.T) {
	cp, kp := genCert(t, "challenge.invalid")
	chal, err := tls.X509KeyPair([]byte(cp), []byte(kp))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) {
		c.NextProtos = []string{"acme-tls/1"}
		c.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == "acme-tls/1" {
				return &chal, nil
			}
			return nil, nil
		}
	})
	be := backend(t, echoInfo())
	e.apply([]routeSpec{
		{host: "a.example.test", tls: &routetable.RouteTLS{CertificateID: "c"}, backends: []string{be}},
	}, certSpec{"c", []string{"a.example.test"}})

	dial := func(sni string, protos ...string) (*tls.Conn, error) {
		return tls.Dial("tcp", e.https, &tls.Config{ServerName: sni, InsecureSkipVerify: true, NextProtos: protos})
	}
	c, err := dial("a.example.test", "acme-tls/1")
	if err != nil {
		t.Fatal(err)
	}
	st := c.ConnectionState()
	if st.NegotiatedProtocol != "acme-tls/1" || st.PeerCertificates[0].DNSNames[0] != "challenge.invalid" {
		t.Errorf("challenge hello: protocol %q, certificate %v; want acme-tls/1 and the hook's certificate",
			st.NegotiatedProtocol, st.PeerCertificates[0].DNSNames)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("read after a challenge handshake: %v, want EOF (the ingress closes it)", err)
	}
	c.Close()

	c, err = dial("a.example.test", "h2", "http/1.1", "acme-tls/1")
	if err != nil {
		t.Fatal(err)
	}
	st = c.ConnectionState()
	if st.NegotiatedProtocol != "h2" || st.PeerCertificates[0].DNSNames[0] != "a.example.test" {
		t.Errorf("browser hello: protocol %q, certificate %v; want h2 and the table's certificate",
			st.NegotiatedProtocol, st.PeerCertificates[0].DNSNames)
	}
	c.Close()

	if c, err := dial("pending.example.test", "h2", "http/1.1"); err == nil {
		c.Close()
		t.Error("a name without a certificate completed a handshake")
	} else if !strings.Contains(err.Error(), "unrecognized name") {
		t.Errorf("a name without a certificate: %v, want the unrecognized_name alert", err)
	}
}
