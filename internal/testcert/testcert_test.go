package testcert

import (
	"crypto/tls"
	"testing"
	"time"
)

func TestGenerateCoversHosts(t *testing.T) {
	certPEM, keyPEM, err := Generate("example.test", "*.example.test")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"example.test", "a.example.test"} {
		if err := kp.Leaf.VerifyHostname(h); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	if err := kp.Leaf.VerifyHostname("a.b.example.test"); err == nil {
		t.Error("a.b.example.test must not be covered")
	}
	if d := kp.Leaf.NotAfter.Sub(kp.Leaf.NotBefore); d < 364*24*time.Hour {
		t.Errorf("validity %v, want a year", d)
	}
}

func TestNewFormats(t *testing.T) {
	for name, o := range map[string]Options{
		"sec1":  {Hosts: []string{"a.test"}, Format: SEC1},
		"pkcs1": {Hosts: []string{"a.test"}, RSA: true, Format: PKCS1},
		"chain": {Hosts: []string{"a.test"}, Chain: true},
	} {
		t.Run(name, func(t *testing.T) {
			c, k, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			kp, err := tls.X509KeyPair([]byte(c), []byte(k))
			if err != nil {
				t.Fatal(err)
			}
			want := 1
			if o.Chain {
				want = 2
			}
			if len(kp.Certificate) != want {
				t.Errorf("%d certificates, want %d", len(kp.Certificate), want)
			}
		})
	}
	if _, _, err := New(Options{Format: PKCS1}); err == nil {
		t.Error("PKCS#1 with an ECDSA key must fail")
	}
}
