package loadtool

import (
	"bytes"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		p    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 9}, {0, 1}, {1, 10}}
	for _, tt := range tests {
		if got := Percentile(d, tt.p); got != tt.want {
			t.Errorf("Percentile(%v) = %v, want %v", tt.p, got, tt.want)
		}
	}
	if Percentile(nil, 0.5) != 0 || Mean(nil) != 0 {
		t.Error("empty input must give 0")
	}
}

// TestWriteFormat pins the lines bench/compare parses.
func TestWriteFormat(t *testing.T) {
	var b bytes.Buffer
	Write(&b, Summary{
		Latencies: []time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond},
		Failed:    1, Elapsed: 2 * time.Second, RateUnit: "req/s",
		Extra: []string{"tls: TLS 1.3"}, FirstErr: errors.New("boom"),
	})
	want := "connections: 3 ok, 1 failed in 2.00 s\n" +
		"rate: 1.50 req/s\n" +
		"latency ms: p50 2.000 p99 2.000 mean 2.000\n" +
		"tls: TLS 1.3\n" +
		"first error: boom\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestCheckLoopbackAndReadCA(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:1", "[::1]:1"} {
		if err := CheckLoopback("t", ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"192.0.2.1:1", "localhost:1", "nonsense"} {
		if err := CheckLoopback("t", bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	empty := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCA("t", empty); err == nil {
		t.Error("a CA file without certificates was accepted")
	}
	if _, err := ReadCA("t", filepath.Join(t.TempDir(), "missing.pem")); err == nil {
		t.Error("a missing CA file was accepted")
	}
}

func TestSelfSigned(t *testing.T) {
	cert, der, err := SelfSigned("bench.test")
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.VerifyHostname("bench.test"); err != nil {
		t.Fatal(err)
	}
	if c.VerifyHostname("other.test") == nil {
		t.Fatal("the certificate covers a name it was not made for")
	}
	if len(cert.Certificate) != 1 || cert.PrivateKey == nil {
		t.Fatal("the tls.Certificate lacks its chain or key")
	}
}
