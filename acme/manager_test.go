package acme

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/serve-zone/ingress/routetable"
)

// checkMetric fails unless every line ("name{label=\"value\"} number") appears among the
// manager's metrics.
func checkMetric(t *testing.T, m *Manager, lines ...string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			var labels []string
			for _, l := range mt.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			v := mt.GetGauge().GetValue() + mt.GetCounter().GetValue()
			got = append(got, fmt.Sprintf("%s %g", name, v))
		}
	}
	for _, l := range lines {
		if !slices.Contains(got, l) {
			t.Errorf("metrics lack %q:\n%s", l, strings.Join(got, "\n"))
		}
	}
}

// TestUnreachableCA: with the CA down, the ACME route's attempt fails, is logged once with
// its kind, counted and explained, while a plain route and a route with the table's own
// certificate keep serving; the ACME route answers TLS with unrecognized_name and plain
// HTTP as its redirectHttp says.
func TestUnreachableCA(t *testing.T) {
	t.Parallel()
	r := newRig(t, Options{CA: "https://127.0.0.1:" + deadPort(t) + "/dir", Agreed: true})
	const host = "down.acme.test"
	r.apply(route{host: host, acme: true}, route{host: "plain.acme.test"}, route{host: "table.acme.test", certID: "c"})
	r.start()
	e, _ := r.rec.wait(t, 0, "failed attempt", is("failed", host))
	if e.FailureKind != KindCAUnreachable {
		t.Errorf("failure kind %q (%v), want %s", e.FailureKind, e.Err, KindCAUnreachable)
	}
	r.mustGet("http://plain.acme.test/", nil, 200)
	r.mustGet("http://"+host+"/", nil, 200) // redirectHttp false
	if leaf, err := r.handshake("table.acme.test", nil); err != nil || leaf.DNSNames[0] != "table.acme.test" {
		t.Errorf("the table's certificate route: %v", err)
	}
	if _, err := r.handshake(host, nil); err == nil || !strings.Contains(err.Error(), "unrecognized name") {
		t.Errorf("handshake for the ACME route without a certificate: %v, want unrecognized_name", err)
	}
	lines := r.mgr.Explain()
	if len(lines) < 2 || lines[0] != "acme: 1 hostname(s), 0 with a valid certificate" ||
		!strings.Contains(lines[1], host+": no certificate yet") || !strings.Contains(lines[1], KindCAUnreachable) {
		t.Errorf("Explain = %q", lines)
	}
	checkMetric(t, r.mgr, `ingress_acme_failures_total{kind="ca_unreachable"} 1`, `ingress_acme_certificates{state="missing"} 1`)
	// One line per attempt, with the kind; certmagic's own repetitions stay at debug.
	if n := strings.Count(r.logs.String(), `"acme: certificate not obtained; certmagic retries with backoff"`); n != 1 {
		t.Errorf("%d failure lines for one attempt, want 1:\n%s", n, r.logs.String())
	}
}

// TestTermsNotAgreed: a CA whose directory names terms of service gets no account request
// until they are agreed to; the attempt fails with kind "terms".
func TestTermsNotAgreed(t *testing.T) {
	t.Parallel()
	var newAccount bool
	ca := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case "/dir":
			base := "https://" + req.Host
			_ = json.NewEncoder(w).Encode(map[string]any{
				"newNonce": base + "/nonce", "newAccount": base + "/account", "newOrder": base + "/order",
				"revokeCert": base + "/revoke", "keyChange": base + "/key",
				"meta": map[string]any{"termsOfService": base + "/terms"},
			})
		case "/account":
			newAccount = true
			http.Error(w, "no", http.StatusForbidden)
		default:
			w.Header().Set("Replay-Nonce", "nonce")
			w.WriteHeader(http.StatusOK)
		}
	}))
	t.Cleanup(ca.Close)
	roots := ca.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	r := newRig(t, Options{CA: ca.URL + "/dir", Roots: roots})
	r.apply(route{host: "terms.acme.test", acme: true})
	r.start()
	e, _ := r.rec.wait(t, 0, "failed attempt", is("failed", "terms.acme.test"))
	if e.FailureKind != KindTerms {
		t.Errorf("failure kind %q (%v), want %s", e.FailureKind, e.Err, KindTerms)
	}
	r.stop()
	if newAccount {
		t.Error("an account was requested although the terms were not agreed to")
	}
}

// TestOnlyManagedNamesAreRequested: certmagic's orders for a name that is not an ACME route
// are vetoed, handshakes for it get nothing from the manager, and its HTTP-01 path is left
// to the route.
func TestOnlyManagedNamesAreRequested(t *testing.T) {
	t.Parallel()
	r := newRig(t, Options{CA: "https://127.0.0.1:" + deadPort(t) + "/dir", Agreed: true})
	r.apply(route{host: "managed.acme.test", acme: true}, route{host: "other.acme.test"})
	r.start()
	r.rec.wait(t, 0, "managed", is("managed", "managed.acme.test"))
	ctx := context.Background()
	if err := r.mgr.onEvent(ctx, "cert_obtaining", map[string]any{"identifier": "other.acme.test"}); err == nil {
		t.Error("an order for a hostname that is not an ACME route was let through")
	}
	if err := r.mgr.onEvent(ctx, "cert_obtaining", map[string]any{"identifier": "evil.example"}); err == nil {
		t.Error("an order for a name outside the table was let through")
	}
	if err := r.mgr.onEvent(ctx, "cert_obtaining", map[string]any{"identifier": "managed.acme.test"}); err != nil {
		t.Errorf("the managed hostname's order was vetoed: %v", err)
	}
	if _, err := r.handshake("evil.example", nil); err == nil || !strings.Contains(err.Error(), "unrecognized name") {
		t.Errorf("handshake for an unknown name: %v, want unrecognized_name", err)
	}
	st, body, err := r.get("http://other.acme.test/.well-known/acme-challenge/abc", nil)
	if err != nil || st != 200 || body != "backend other.acme.test /.well-known/acme-challenge/abc" {
		t.Errorf("a challenge path on a plain route: %d %q %v, want the backend's answer", st, body, err)
	}
}

// TestNewRefusesBadOptions: the options New refuses.
func TestNewRefusesBadOptions(t *testing.T) {
	for name, o := range map[string]Options{
		"no dir":            {CA: "https://ca.test/dir"},
		"http CA":           {CA: "http://ca.test/dir", Dir: t.TempDir()},
		"not a URL":         {CA: "::", Dir: t.TempDir()},
		"unknown challenge": {Dir: t.TempDir(), Challenges: []string{"dns-01"}},
	} {
		if _, err := New(nopTables{}, o); err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
		}
	}
	if _, err := New(nopTables{}, Options{CA: "http://127.0.0.1:14000/dir", Dir: t.TempDir()}); err != nil {
		t.Errorf("http:// on loopback: %v", err)
	}
}

// deadPort returns a loopback port nothing listens on (it was free a moment ago).
func deadPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

type nopTables struct{}

func (nopTables) Load() *routetable.Compiled { return nil }
