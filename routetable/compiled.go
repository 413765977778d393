package routetable

import (
	"crypto/tls"
	"sync/atomic"

	"github.com/serve-zone/ingress/stats"
)

// Compiled is an immutable, validated route table ready for lookups. It is shared by every
// request that loaded it and must never be modified after compilation; all its methods are
// safe for concurrent use and allocate nothing.
type Compiled struct {
	Revision int64
	// Source is the validated table it was compiled from (read-only; used for persistence).
	Source *Table
	// Warnings are what validation reported without refusing (expired leaves).
	Warnings []string
	// ExpiredCertificates counts certificates whose leaf is outside its validity window.
	ExpiredCertificates int

	exact    map[string]*Entry // hostname -> route
	wildcard map[string]*Entry // parent domain ("example.test" for "*.example.test") -> route
	certs    map[string]*tls.Certificate
	backends []Backend // every route's, in route order: the next compile's states
}

// Entry is one compiled route.
type Entry struct {
	// Hostname is the route's hostname as the table names it (the stats key).
	Hostname string
	// Backends are the route's targets, in table order. Their state objects are shared with
	// earlier and later compiled tables that contain the same target, so pools, in-flight
	// counts and health survive swaps.
	Backends []*Backend
	// TLS is nil for a plain-HTTP-only route.
	TLS *RouteTLS
	// Certificate is the parsed certificate named by TLS.CertificateID, nil otherwise
	// (and for ACME routes, whose certificates the ACME manager holds).
	Certificate *tls.Certificate
	// Stats receives the route's traffic; it lives as long as the stats registry.
	Stats *stats.Host
}

// TargetState is the mutable, shared state of one target (lease id, address and port). It
// outlives any single compiled table. The data plane owns the policy; this package only
// keeps the state alive across swaps. All fields are safe for concurrent use.
type TargetState struct {
	// InFlight is the number of requests (and WebSockets) currently on the target.
	InFlight atomic.Int64
	// DownUntil is the UnixNano time before which the target is considered down after a
	// connect failure; zero means up.
	DownUntil atomic.Int64
	// Failures counts consecutive connect failures; it drives the backoff and is reset by
	// a successful connection.
	Failures atomic.Int32
	// LoggedAt (UnixNano) and Unlogged rate-limit the data plane's failure log lines for
	// the target: when the last one was written, and how many failures were not logged
	// since.
	LoggedAt atomic.Int64
	Unlogged atomic.Int64
}

// Backend is a compiled target: its identity plus its shared state.
type Backend struct {
	LeaseID string
	// Addr is "address:port", ready to dial.
	Addr  string
	State *TargetState
}

// Lookup returns the route for host, or nil. host may be a raw Host header, :authority
// or SNI value: it is normalised with NormalizeHost first (exact before wildcard).
func (c *Compiled) Lookup(host string) *Entry {
	if c == nil {
		return nil
	}
	var buf [maxHostnameLen]byte
	b, ok := normalizeInto(buf[:0], host)
	if !ok {
		return nil
	}
	if e := c.exact[string(b)]; e != nil {
		return e
	}
	// A wildcard matches exactly one more leftmost label, and only a label that could be
	// a DNS label: "*.example.test" answers "a.example.test", never ".example.test".
	for i, ch := range b {
		if ch == '.' {
			if i == 0 || i > 63 {
				return nil
			}
			return c.wildcard[string(b[i+1:])]
		}
		if !isLabelByte(ch) {
			return nil
		}
	}
	return nil
}

// isLabelByte accepts the bytes of a lowercase DNS label, plus '_' which real-world
// service names use in Host headers.
func isLabelByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// GetCertificate returns the certificate for an SNI name (exact route before wildcard),
// or nil when no TLS route with a table certificate covers it.
func (c *Compiled) GetCertificate(serverName string) *tls.Certificate {
	e := c.Lookup(serverName)
	if e == nil {
		return nil
	}
	return e.Certificate
}

// Len returns the number of routes.
func (c *Compiled) Len() int {
	if c == nil {
		return 0
	}
	return len(c.exact) + len(c.wildcard)
}

// CertificateByID returns the parsed certificate with that id, or nil.
func (c *Compiled) CertificateByID(id string) *tls.Certificate {
	if c == nil {
		return nil
	}
	return c.certs[id]
}
