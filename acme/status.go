package acme

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"
)

// HostStatus is where one ACME hostname stands.
type HostStatus struct {
	Hostname string
	// NotBefore and NotAfter bound the certificate being served; zero without one.
	NotBefore, NotAfter time.Time
	// RenewAt is when the certificate enters its renewal window by its lifetime (the
	// CA's renewal information may move it earlier); zero without one.
	RenewAt time.Time
	// Obtaining is true while an order is under way.
	Obtaining bool
	// Failures counts the failed attempts since the last success; LastError, LastKind and
	// LastFailure describe the latest one.
	Failures    int
	LastError   string
	LastKind    string
	LastFailure time.Time
	// Wildcard marks a route no certificate can be requested for (DNS-01 only).
	Wildcard bool
}

// HasCertificate reports whether a certificate is being served for the hostname.
func (h HostStatus) HasCertificate() bool { return !h.NotAfter.IsZero() }

// Status returns every ACME hostname of the table, sorted.
func (m *Manager) Status() []HostStatus {
	m.mu.Lock()
	out := make([]HostStatus, 0, len(m.hosts)+len(m.wildcard))
	for _, h := range m.hosts {
		out = append(out, HostStatus{
			Hostname: h.name, Obtaining: h.obtaining, Failures: h.attempts,
			LastError: h.lastErr, LastKind: h.lastKind, LastFailure: h.lastAt,
		})
	}
	for _, w := range m.wildcard {
		out = append(out, HostStatus{Hostname: w, Wildcard: true})
	}
	m.mu.Unlock()
	ratio := m.opts.RenewalWindowRatio
	if ratio <= 0 {
		ratio = certmagic.DefaultRenewalWindowRatio
	}
	e := m.eng.Load()
	for i := range out {
		if out[i].Wildcard || e == nil {
			continue
		}
		if c, ok := e.cached(out[i].Hostname); ok {
			out[i].NotBefore, out[i].NotAfter = c.Leaf.NotBefore, c.Leaf.NotAfter
			life := c.Leaf.NotAfter.Sub(c.Leaf.NotBefore)
			out[i].RenewAt = c.Leaf.NotAfter.Add(-time.Duration(float64(life) * ratio))
		}
	}
	slices.SortFunc(out, func(a, b HostStatus) int { return strings.Compare(a.Hostname, b.Hostname) })
	return out
}

// cached returns the certificate certmagic serves for name, if it has one.
func (e *engine) cached(name string) (certmagic.Certificate, bool) {
	var best certmagic.Certificate
	for _, c := range e.cache.AllMatchingCertificates(name) {
		if c.Leaf == nil {
			continue
		}
		if best.Leaf == nil || c.Leaf.NotAfter.After(best.Leaf.NotAfter) {
			best = c
		}
	}
	return best, best.Leaf != nil
}

// Explain describes in lines what an operator should know about the ACME routes: one
// summary line, then one line per hostname that has no valid certificate or whose last
// attempt failed. Nil when the table has no ACME route.
func (m *Manager) Explain() []string {
	st := m.Status()
	if len(st) == 0 {
		return nil
	}
	now := time.Now()
	var lines []string
	valid := 0
	for _, h := range st {
		switch {
		case h.Wildcard:
			lines = append(lines, fmt.Sprintf("acme: %s: no certificate is requested: only the DNS-01 challenge proves a wildcard, and the ingress does not answer it", h.Hostname))
			continue
		case !h.HasCertificate():
			line := fmt.Sprintf("acme: %s: no certificate yet (TLS handshakes fail with unrecognized_name)", h.Hostname)
			if h.Failures > 0 {
				line += fmt.Sprintf("; %d failed attempt(s), the last at %s: %s: %s",
					h.Failures, h.LastFailure.UTC().Format(time.RFC3339), h.LastKind, h.LastError)
			} else if h.Obtaining {
				line += "; being obtained"
			} else {
				line += "; waiting to be obtained"
			}
			lines = append(lines, line)
			continue
		case now.After(h.NotAfter):
			lines = append(lines, fmt.Sprintf("acme: %s: the certificate expired at %s and is served anyway",
				h.Hostname, h.NotAfter.UTC().Format(time.RFC3339)))
		default:
			valid++
		}
		if h.Failures > 0 {
			lines = append(lines, fmt.Sprintf("acme: %s: renewal failing (%d attempt(s), the last at %s: %s: %s); the certificate is valid until %s",
				h.Hostname, h.Failures, h.LastFailure.UTC().Format(time.RFC3339), h.LastKind, h.LastError,
				h.NotAfter.UTC().Format(time.RFC3339)))
		}
	}
	head := fmt.Sprintf("acme: %d hostname(s), %d with a valid certificate", len(st), valid)
	out := []string{head}
	if l := m.storeLine(now); l != "" {
		out = append(out, l)
	}
	return append(out, lines...)
}

// storeLine says that the shared store does not answer, or "".
func (m *Manager) storeLine(now time.Time) string {
	if m.health == nil {
		return ""
	}
	down, since, cause, missed := m.health.state()
	if !down {
		return ""
	}
	return fmt.Sprintf("acme: degraded: the certificate store %s does not answer since %s (%s ago, %d failed operations): %s; the certificates held are served, orders and renewals wait for it",
		m.health.endpoint, since.UTC().Format(time.RFC3339), now.Sub(since).Round(time.Second), missed, cause)
}
