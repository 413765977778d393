package binarytest

// Fixtures: route tables and the targets and routes in them, and the routes file.

import (
	"cmp"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/serve-zone/ingress/routetable"
)

// TargetOf is the target at addr (host:port) with lease id lease.
func TargetOf(t testing.TB, addr, lease string) routetable.Target {
	t.Helper()
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil {
		t.Fatal(err)
	}
	return routetable.Target{LeaseID: lease, Address: host, Port: port}
}

// Route is a route to targets (put in contract order); cert "" means tls null, else the
// route is TLS with that certificate id and redirect as its redirectHttp.
func Route(hostname, cert string, redirect bool, targets ...routetable.Target) routetable.Route {
	targets = slices.Clone(targets)
	slices.SortFunc(targets, func(a, b routetable.Target) int {
		return cmp.Or(strings.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port))
	})
	r := routetable.Route{Hostname: hostname, Targets: targets}
	if cert != "" {
		r.TLS = &routetable.RouteTLS{CertificateID: cert, RedirectHTTP: redirect}
	}
	return r
}

// TableJSON encodes a route table with its routes and certificates put in contract order.
func TableJSON(t testing.TB, revision int64, certs []routetable.Certificate, routes ...routetable.Route) []byte {
	t.Helper()
	routes = slices.Clone(routes)
	slices.SortFunc(routes, func(a, b routetable.Route) int { return strings.Compare(a.Hostname, b.Hostname) })
	certs = slices.Clone(certs)
	slices.SortFunc(certs, func(a, b routetable.Certificate) int { return strings.Compare(a.ID, b.ID) })
	if routes == nil {
		routes = []routetable.Route{}
	}
	if certs == nil {
		certs = []routetable.Certificate{}
	}
	b, err := json.Marshal(routetable.Table{Revision: revision, Routes: routes, Certificates: certs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// WriteFileAtomic replaces path by a rename (from a temporary file beside it), as config
// managers do.
func WriteFileAtomic(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".next-"+filepath.Base(path))
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
