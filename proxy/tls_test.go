package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/serve-zone/ingress/routetable"
)

func TestSNISelection(t *testing.T) {
	e := newEnv(t)
	be := backend(t, echoInfo())
	e.apply([]routeSpec{
		{host: "a.example.test", tls: &routetable.RouteTLS{CertificateID: "exact"}, backends: []string{be}},
		{host: "*.example.test", tls: &routetable.RouteTLS{CertificateID: "wild"}, backends: []string{be}},
		{host: "plain.other.test", backends: []string{be}},
	}, certSpec{"exact", []string{"a.example.test"}}, certSpec{"wild", []string{"*.example.test"}})
	tests := []struct {
		sni      string
		wantName string // first DNS name of the served leaf; "" means the handshake must fail
	}{
		{"a.example.test", "a.example.test"},
		{"b.example.test", "*.example.test"},
		{"B.Example.Test", "*.example.test"},
		{"x.y.example.test", ""},
		{"example.test", ""},
		{"plain.other.test", ""}, // plain-only route: no certificate
		{"unknown.test", ""},
		{"", ""},
	}
	for _, tc := range tests {
		t.Run("sni="+tc.sni, func(t *testing.T) {
			c, err := tls.Dial("tcp", e.https, &tls.Config{ServerName: tc.sni, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
			if tc.wantName == "" {
				if err == nil {
					c.Close()
					t.Fatalf("handshake succeeded")
				}
				if !strings.Contains(err.Error(), "unrecognized name") {
					t.Errorf("handshake failed with %v, want the unrecognized_name alert", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := c.ConnectionState().PeerCertificates[0].DNSNames[0]; got != tc.wantName {
				t.Errorf("served %s, want %s", got, tc.wantName)
			}
		})
	}
	// Connections are attributed at the handshake, by SNI.
	waitFor(t, "connections", func() bool {
		return e.stat("a.example.test").Connections == 1 && e.stat("*.example.test").Connections == 2
	})
}

func TestTLSKeepsCertificateAcrossSwaps(t *testing.T) {
	e := newEnv(t)
	be := backend(t, echoInfo())
	e.apply([]routeSpec{{host: "a.example.test", tls: &routetable.RouteTLS{CertificateID: "c1"}, backends: []string{be}}}, certSpec{"c1", []string{"a.example.test"}})
	c := e.tlsClient(true)
	res, _ := get(t, c, "https://a.example.test/", "")
	first := res.TLS.PeerCertificates[0].SerialNumber
	e.apply([]routeSpec{{host: "a.example.test", tls: &routetable.RouteTLS{CertificateID: "c1"}, backends: []string{be}}}, certSpec{"c1", []string{"a.example.test"}})
	res, _ = get(t, c, "https://a.example.test/", "")
	if res.TLS.PeerCertificates[0].SerialNumber.Cmp(first) != 0 {
		t.Errorf("open connection changed certificate")
	}
	if res.StatusCode != 200 {
		t.Errorf("status %d", res.StatusCode)
	}
}

// TestMisdirectedRequest: a TLS connection answers only for hosts its certificate covers
// (421 otherwise), on the fast HTTP/1.1 path, on net/http's HTTP/1.1 and on h2. Hosts the
// same certificate names share a connection (coalescing), as browsers expect.
func TestMisdirectedRequest(t *testing.T) {
	for _, h1Off := range []bool{false, true} {
		e := newEnv(t, withH1OffIf(h1Off))
		be := backend(t, echoInfo())
		e.apply([]routeSpec{
			{host: "tls.test", tls: &routetable.RouteTLS{CertificateID: "one"}, backends: []string{be}},
			{host: "alt.test", tls: &routetable.RouteTLS{CertificateID: "two"}, backends: []string{be}},
			{host: "other.test", tls: &routetable.RouteTLS{CertificateID: "other"}, backends: []string{be}},
			{host: "b.test", backends: []string{be}},
		}, certSpec{"one", []string{"tls.test", "alt.test"}}, certSpec{"two", []string{"tls.test", "alt.test"}}, certSpec{"other", []string{"other.test"}})
		for _, h2 := range []bool{false, true} {
			name := fmt.Sprintf("h1Off=%v/h2=%v", h1Off, h2)
			t.Run(name, func(t *testing.T) {
				c := e.tlsClient(h2)
				c.Transport.(*http.Transport).TLSClientConfig.ServerName = "tls.test"
				for _, tc := range []struct {
					host string
					want int
				}{
					{"tls.test", 200},
					{"TLS.test:443", 200},
					{"alt.test", 200},   // named by the same certificate
					{"b.test", 421},     // a plain-only route
					{"other.test", 421}, // a TLS route with another certificate
					{"unknown.test", 421},
				} {
					req, _ := http.NewRequest("GET", "https://"+tc.host+"/x", nil)
					req.Host = tc.host
					res, err := c.Do(req)
					if err != nil {
						t.Fatalf("%s: %v", tc.host, err)
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != tc.want {
						t.Errorf("Host %s on SNI tls.test: %d, want %d", tc.host, res.StatusCode, tc.want)
					}
					if res.StatusCode == 421 && res.Header.Get("X-Seen-Host") != "" {
						t.Errorf("Host %s: the target answered", tc.host)
					}
				}
			})
		}
	}
}

// TestTLS12OffersAEADOnly: a TLS 1.2 client that offers only CBC suites is refused; one
// offering GCM or ChaCha20 gets it.
func TestTLS12OffersAEADOnly(t *testing.T) {
	e := newEnv(t)
	be := backend(t, echoInfo())
	e.apply([]routeSpec{{host: "a.example.test", tls: &routetable.RouteTLS{CertificateID: "c"}, backends: []string{be}}},
		certSpec{"c", []string{"a.example.test"}})
	dial := func(suites ...uint16) (uint16, error) {
		c, err := tls.Dial("tcp", e.https, &tls.Config{ServerName: "a.example.test", InsecureSkipVerify: true,
			MaxVersion: tls.VersionTLS12, CipherSuites: suites})
		if err != nil {
			return 0, err
		}
		defer c.Close()
		return c.ConnectionState().CipherSuite, nil
	}
	for _, cbc := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA, tls.TLS_RSA_WITH_AES_128_CBC_SHA,
		tls.TLS_RSA_WITH_AES_128_GCM_SHA256} {
		if got, err := dial(cbc); err == nil {
			t.Errorf("TLS 1.2 with only %s offered: handshake succeeded (%s)", tls.CipherSuiteName(cbc), tls.CipherSuiteName(got))
		}
	}
	for _, aead := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256} {
		if got, err := dial(aead); err != nil || got != aead {
			t.Errorf("TLS 1.2 with %s: %v, got %s", tls.CipherSuiteName(aead), err, tls.CipherSuiteName(got))
		}
	}
}

// anyNameCache is a client session cache that offers its one session for any server
// name, as a hostile client may.
type anyNameCache struct{ cs *tls.ClientSessionState }

func (c *anyNameCache) Get(string) (*tls.ClientSessionState, bool) { return c.cs, c.cs != nil }
func (c *anyNameCache) Put(_ string, cs *tls.ClientSessionState) {
	if cs != nil {
		c.cs = cs
	}
}

// TestResumedSessions: a resumed TLS session keeps coalescing within its certificate
// (it presents none, so the handshake's certificate comes from the table), and a ticket
// resumes only for the name it was issued for.
func TestResumedSessions(t *testing.T) {
	e := newEnv(t)
	be := backend(t, echoInfo())
	e.apply([]routeSpec{
		{host: "tls.test", tls: &routetable.RouteTLS{CertificateID: "one"}, backends: []string{be}},
		{host: "alt.test", tls: &routetable.RouteTLS{CertificateID: "one"}, backends: []string{be}},
		{host: "other.test", tls: &routetable.RouteTLS{CertificateID: "other"}, backends: []string{be}},
	}, certSpec{"one", []string{"tls.test", "alt.test"}}, certSpec{"other", []string{"other.test"}})
	cache := &anyNameCache{}
	do := func(sni, host string) (resumed bool, status int) {
		t.Helper()
		c, err := tls.Dial("tcp", e.https, &tls.Config{ServerName: sni, InsecureSkipVerify: true,
			NextProtos: []string{"http/1.1"}, ClientSessionCache: cache})
		if err != nil {
			t.Fatalf("%s: %v", sni, err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s/%s: %v", sni, host, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return c.ConnectionState().DidResume, res.StatusCode
	}
	if resumed, st := do("tls.test", "tls.test"); resumed || st != 200 {
		t.Fatalf("first connection: resumed %v, status %d", resumed, st)
	}
	if resumed, st := do("tls.test", "alt.test"); !resumed || st != 200 {
		t.Errorf("resumed connection for a name on the same certificate: resumed %v, status %d, want a resumption and 200", resumed, st)
	}
	if resumed, _ := do("other.test", "other.test"); resumed {
		t.Errorf("a ticket issued for tls.test resumed a connection for other.test")
	}
}
