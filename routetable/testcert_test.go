package routetable

import (
	"sync"
	"testing"

	"github.com/serve-zone/ingress/internal/testcert"
)

// testPair is one generated certificate and key.
type testPair struct{ cert, key string }

var (
	pairsMu sync.Mutex
	pairs   = map[string]testPair{}
)

// pairFor returns a P-256 certificate covering hosts, generated once per host set per
// test binary so table-driven tests stay fast.
func pairFor(t testing.TB, hosts ...string) testPair {
	t.Helper()
	k := ""
	for _, h := range hosts {
		k += h + ","
	}
	pairsMu.Lock()
	defer pairsMu.Unlock()
	if p, ok := pairs[k]; ok {
		return p
	}
	c, key, err := testcert.Generate(hosts...)
	if err != nil {
		t.Fatal(err)
	}
	p := testPair{c, key}
	pairs[k] = p
	return p
}

// validTable returns a fresh valid table: a wildcard and an exact TLS route sharing one
// certificate, and a plain route. Each call returns a new value the caller may modify.
func validTable(t testing.TB) *Table {
	p := pairFor(t, "example.test", "*.example.test")
	return &Table{
		Revision: 7,
		Routes: []Route{
			{Hostname: "*.example.test", Targets: []Target{{LeaseID: "lease-web-2", Address: "127.0.0.1", Port: 8080}},
				TLS: &RouteTLS{CertificateID: "cert-a", RedirectHTTP: true}},
			{Hostname: "api.example.test", Targets: []Target{
				{LeaseID: "lease-api-1", Address: "127.0.0.1", Port: 3000},
				{LeaseID: "lease-api-2", Address: "127.0.0.2", Port: 3000},
			}, TLS: &RouteTLS{CertificateID: "cert-a", RedirectHTTP: false}},
			{Hostname: "plain.example.test", Targets: []Target{{LeaseID: "lease-plain-1", Address: "127.0.0.3", Port: 80}}},
		},
		Certificates: []Certificate{{ID: "cert-a", CertificatePEM: p.cert, PrivateKeyPEM: p.key}},
	}
}
