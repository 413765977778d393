package proxy

import (
	"crypto/tls"
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
