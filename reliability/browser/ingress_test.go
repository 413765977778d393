package browser

// The ingress under test: the real binary in standalone mode, serving a route-table file
// that the tests rewrite, with its access log on.

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/routetable"
)

const (
	// appHost is the page's hostname, which chromium resolves to 127.0.0.1.
	appHost = "app.test"
	// otherHost is a plain-HTTP route that some route-table changes add and remove.
	otherHost = "other.test"
	// startLimit bounds the ingress's start and each table's application.
	startLimit = 15 * time.Second
)

// ingressBin is the binary under test, built once on first use (without -race, as the
// reliability suite's: the browser meets the timing of the real thing).
var ingressBin = &binarytest.Binary{Package: binarytest.IngressPackage, Env: []string{"CGO_ENABLED=0"}}

// ingress is one running ingress and its routes file.
type ingress struct {
	p      *binarytest.Proc
	routes string // the routes file's path
	rev    int64  // the revision last written
}

// startIngress starts the binary in standalone mode on loopback with the access log on
// and HTTP/3 on (its default; UDP on the TLS port), serving one TLS route for appHost (plain HTTP redirected) to to, with a
// certificate from ca; it waits for the "ingress started" line.
func startIngress(t *testing.T, ca *testCA, to *target) *ingress {
	t.Helper()
	in := &ingress{routes: filepath.Join(t.TempDir(), "routes.json")}
	in.write(t, ca, 1, []*target{to}, false)
	args := []string{
		"--routes", in.routes,
		"--http-addr", "127.0.0.1:0", "--https-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--http3=true",
		"--access-log", "--log-format", "json", "--log-level", "info",
		"--drain-timeout", "2s",
	}
	in.p = binarytest.Start(t, ingressBin.Path(t), startLimit, nil, args...)
	in.p.TailLines = 60
	in.waitApplied(t, 1)
	return in
}

// write writes revision rev of the routes file: appHost over TLS (a certificate just
// issued by ca, plain HTTP redirected) to targets, and otherHost in plain HTTP to the
// first target when withOther.
func (in *ingress) write(t *testing.T, ca *testCA, rev int64, targets []*target, withOther bool) {
	t.Helper()
	certPEM, keyPEM, err := ca.issue(appHost)
	if err != nil {
		t.Fatal(err)
	}
	var ts []routetable.Target
	for _, tg := range targets {
		ts = append(ts, binarytest.TargetOf(t, tg.addr(), "lease-"+tg.name))
	}
	routes := []routetable.Route{binarytest.Route(appHost, "app", true, ts...)}
	if withOther {
		routes = append(routes, binarytest.Route(otherHost, "", false, ts[0]))
	}
	certs := []routetable.Certificate{{ID: "app", CertificatePEM: string(certPEM), PrivateKeyPEM: string(keyPEM)}}
	binarytest.WriteFileAtomic(t, in.routes, binarytest.TableJSON(t, rev, certs, routes...))
	in.rev = rev
}

// change writes the next revision and waits until the ingress applied it.
func (in *ingress) change(t *testing.T, ca *testCA, targets []*target, withOther bool) {
	t.Helper()
	in.write(t, ca, in.rev+1, targets, withOther)
	in.waitApplied(t, in.rev)
}

// waitApplied waits for the "route table applied" line of revision rev.
func (in *ingress) waitApplied(t *testing.T, rev int64) {
	t.Helper()
	in.p.WaitLine(startLimit, func(m map[string]any) bool {
		r, _ := m["revision"].(float64)
		return m["msg"] == "route table applied" && int64(r) == rev
	})
}

// port returns the port of the listener at addr.
func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// accessLine is one access-log line of the ingress.
type accessLine struct {
	Host, Method, Path, Query, Proto, Error, Lease string
	Status                                         int
	BytesIn, BytesOut                              int64
}

func (a accessLine) String() string {
	return fmt.Sprintf("%s %s%s proto=%s status=%d in=%d out=%d lease=%s error=%q",
		a.Method, a.Host, a.Path, a.Proto, a.Status, a.BytesIn, a.BytesOut, a.Lease, a.Error)
}

// isAccess tells the access log's lines from the others.
func isAccess(m map[string]any) bool { return m["logger"] == "access" && m["msg"] == "request" }

// access decodes an access-log line.
func access(m map[string]any) accessLine {
	s := func(k string) string { v, _ := m[k].(string); return v }
	n := func(k string) float64 { v, _ := m[k].(float64); return v }
	return accessLine{Host: s("host"), Method: s("method"), Path: s("path"), Query: s("query"), Proto: s("proto"),
		Error: s("error"), Lease: s("lease"), Status: int(n("status")), BytesIn: int64(n("bytesIn")), BytesOut: int64(n("bytesOut"))}
}

// accessLines returns the access-log lines so far whose path is path.
func (in *ingress) accessLines(path string) []accessLine {
	var out []accessLine
	for _, l := range strings.Split(in.p.Stderr(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && isAccess(m) && m["path"] == path {
			out = append(out, access(m))
		}
	}
	return out
}

// waitAccess waits for an access-log line for path that match accepts.
func (in *ingress) waitAccess(t *testing.T, limit time.Duration, path string, match func(accessLine) bool) accessLine {
	t.Helper()
	return access(in.p.WaitLine(limit, func(m map[string]any) bool {
		return isAccess(m) && m["path"] == path && match(access(m))
	}))
}
