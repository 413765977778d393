package acme

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/pebbletest"
)

// Tests against Pebble, a real ACME server (internal/pebbletest): each starts its own,
// pointed at the rig's listeners, and waits for the Manager's events, never for time.

// startWithPebble binds a rig, starts Pebble at its ports and runs the Manager against it.
func startWithPebble(t *testing.T, validity time.Duration, opts Options) (*rig, *pebbletest.Pebble) {
	t.Helper()
	pebbletest.Binary(t) // skip (or fail in CI) before binding anything
	r := newRigPebble(t, opts)
	p := pebbletest.Start(t, pebbletest.Options{HTTPPort: r.httpPort(), TLSPort: r.httpsPort(), Validity: validity})
	r.mgr.opts.CA = p.Directory
	r.mgr.opts.Roots = p.ListenerRoots
	r.start()
	return r, p
}

// newRigPebble is newRig for a CA that is only known once the rig's ports are: the CA
// and its roots are set before Run by startWithPebble.
func newRigPebble(t *testing.T, opts Options) *rig {
	opts.Agreed = true
	opts.CA = "https://localhost:1/dir" // replaced before Run
	return newRig(t, opts)
}

// TestPebbleHTTP01 obtains a certificate over HTTP-01 only (the plain listener answers the
// validation before its route's redirect), and an HTTPS request to the hostname is served
// with it, verified against Pebble's root.
func TestPebbleHTTP01(t *testing.T) {
	t.Parallel()
	r, p := startWithPebble(t, 0, Options{Challenges: []string{HTTP01}})
	const host = "h1.acme.test"
	r.apply(route{host: host, acme: true, redirect: true}, route{host: "plain.acme.test"})
	r.rec.wait(t, 0, "certificate obtained", is("obtained", host))
	roots := p.IssuingRoots(t)
	leaf := r.waitServed(host, roots, nil)
	if err := leaf.VerifyHostname(host); err != nil {
		t.Fatal(err)
	}
	if body := r.mustGet("https://"+host+"/hello", roots, 200); body != "backend "+host+" /hello" {
		t.Errorf("HTTPS body %q", body)
	}
	r.mustGet("http://"+host+"/hello", nil, 308) // the route's redirect, unchanged
	checkChallenges(t, r, "http-01", "tls-alpn-01")
	checkMetric(t, r.mgr, `ingress_acme_certificates{state="valid"} 1`, `ingress_acme_obtained_total{kind="new"} 1`)
}

// TestPebbleTLSALPN01 obtains a certificate over TLS-ALPN-01 only (the TLS listener offers
// acme-tls/1 and answers the validation hello), while a plain route keeps serving.
func TestPebbleTLSALPN01(t *testing.T) {
	t.Parallel()
	r, p := startWithPebble(t, 0, Options{Challenges: []string{TLSALPN01}})
	const host = "alpn.acme.test"
	r.apply(route{host: host, acme: true}, route{host: "plain.acme.test"})
	r.rec.wait(t, 0, "certificate obtained", is("obtained", host))
	roots := p.IssuingRoots(t)
	r.waitServed(host, roots, nil)
	r.mustGet("https://"+host+"/x", roots, 200)
	r.mustGet("http://"+host+"/x", nil, 200) // redirectHttp false: plain HTTP served too
	r.mustGet("http://plain.acme.test/x", nil, 200)
	checkChallenges(t, r, "tls-alpn-01", "http-01")
}

// TestPebbleRenewalJoinAndLeave: with certificates that live seconds, a managed hostname is
// renewed again and again and the new certificate served; a hostname added to the table
// while running gets its certificate while the others keep serving; one removed is no
// longer served, and no order is ever placed for it again while its neighbour renews.
func TestPebbleRenewalJoinAndLeave(t *testing.T) {
	t.Parallel()
	r, p := startWithPebble(t, 12*time.Second, Options{RenewCheckInterval: time.Second, TableCheckInterval: 100 * time.Millisecond})
	const keep, leave, join = "keep.acme.test", "leave.acme.test", "join.acme.test"
	r.apply(route{host: keep, acme: true}, route{host: leave, acme: true})
	r.rec.wait(t, 0, "keep obtained", is("obtained", keep))
	r.rec.wait(t, 0, "leave obtained", is("obtained", leave))
	roots := p.IssuingRoots(t)
	first := r.waitServed(keep, roots, nil)
	r.waitServed(leave, roots, nil)

	// Renewal: an order for keep marked as a renewal succeeds, and a newer certificate
	// is served.
	r.rec.wait(t, 0, "keep renewed", func(e event) bool { return e.Kind == "obtained" && e.Hostname == keep && e.Renewal })
	renewed := r.waitServed(keep, roots, func(l *x509.Certificate) bool { return l.SerialNumber.Cmp(first.SerialNumber) != 0 })
	if !renewed.NotAfter.After(first.NotAfter) {
		t.Errorf("the renewed certificate ends %s, not after the first's %s", renewed.NotAfter, first.NotAfter)
	}

	// Join and leave in one table swap.
	mark := r.rec.mark()
	r.apply(route{host: keep, acme: true}, route{host: join, acme: true})
	_, afterLeave := r.rec.wait(t, mark, "leave unmanaged", is("unmanaged", leave))
	r.rec.wait(t, mark, "join obtained", is("obtained", join))
	r.waitServed(join, roots, nil)
	r.mustGet("https://"+keep+"/", roots, 200)
	if _, err := r.handshake(leave, nil); err == nil || !strings.Contains(err.Error(), "unrecognized name") {
		t.Errorf("handshake for the removed hostname: %v, want the unrecognized_name alert", err)
	}

	// keep renews twice more: maintenance ran for well over one lifetime of leave's
	// certificate, which would have been renewed by then were it still managed.
	from := afterLeave
	for i := 0; i < 2; i++ {
		_, from = r.rec.wait(t, from, "keep renewed again", func(e event) bool { return e.Kind == "obtained" && e.Hostname == keep && e.Renewal })
	}
	// (A renewal already under way when it left may still finish; none may start.)
	for _, e := range r.rec.since(afterLeave) {
		if e.Hostname == leave && e.Kind == "obtaining" {
			t.Errorf("after it left the table, an order for %s was placed: %+v", leave, e)
		}
	}
	checkMetric(t, r.mgr, `ingress_acme_certificates{state="valid"} 2`)
}

// TestPebbleRestartServesStored: a second ingress on the same storage directory serves the
// stored certificate while the CA is down: nothing had to be asked of it.
func TestPebbleRestartServesStored(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r, p := startWithPebble(t, time.Hour, Options{Dir: dir})
	const host = "restart.acme.test"
	r.apply(route{host: host, acme: true})
	r.rec.wait(t, 0, "certificate obtained", is("obtained", host))
	roots := p.IssuingRoots(t)
	before := r.waitServed(host, roots, nil)
	r.stop()
	p.Stop() // the CA is gone

	r2 := newRigPebble(t, Options{Dir: dir})
	r2.mgr.opts.CA, r2.mgr.opts.Roots = p.Directory, p.ListenerRoots
	r2.apply(route{host: host, acme: true})
	r2.start()
	r2.rec.wait(t, 0, "stored certificate loaded", is("loaded", host))
	after := r2.waitServed(host, roots, nil)
	if after.SerialNumber.Cmp(before.SerialNumber) != 0 {
		t.Errorf("after the restart serial %s is served, want the stored %s", after.SerialNumber, before.SerialNumber)
	}
	r2.mustGet("https://"+host+"/", roots, 200)
	for _, e := range r2.rec.since(0) {
		if e.Kind == "obtaining" && !e.Renewal {
			t.Errorf("the restarted ingress ordered a new certificate: %+v", e)
		}
	}
}

// checkChallenges asserts from the ingress's log that the CA's validations were answered
// with the challenge type used, and that the disabled one was neither tried nor answered.
func checkChallenges(t *testing.T, r *rig, used, disabled string) {
	t.Helper()
	served := map[string]int{}
	tried := map[string]int{}
	for _, line := range strings.Split(r.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		switch m["msg"] {
		case "served key authentication", "served key authentication certificate":
			served[fmt.Sprint(m["challenge"])]++
		case "trying to solve challenge":
			tried[fmt.Sprint(m["challenge_type"])]++
		}
	}
	if served[used] == 0 || tried[used] == 0 {
		t.Errorf("no %s validation was answered (tried %v, served %v)", used, tried, served)
	}
	if served[disabled] > 0 || tried[disabled] > 0 {
		t.Errorf("%s was used although it is disabled (tried %v, served %v)", disabled, tried, served)
	}
}
