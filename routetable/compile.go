package routetable

import (
	"crypto/tls"
	"strconv"
	"strings"

	"github.com/serve-zone/ingress/stats"
)

// compile builds the immutable lookup structure for a validated table. certs are the key
// pairs Validate parsed. prev is the table being served (nil at first): a target present
// in both (the same lease id, address and port) keeps its state, so pools, in-flight
// counts and health survive the swap, and a removed target's state is simply dropped,
// never touched (states.go: nothing beside the tables is kept to find them).
func compile(t *Table, certs map[string]*tls.Certificate, prev *Compiled, reg *stats.Registry) *Compiled {
	nWild := 0
	for i := range t.Routes {
		if strings.HasPrefix(t.Routes[i].Hostname, "*.") {
			nWild++
		}
	}
	c := &Compiled{
		Revision: t.Revision,
		Source:   t,
		exact:    make(map[string]*Entry, len(t.Routes)-nWild),
		wildcard: make(map[string]*Entry, nWild),
		certs:    certs,
	}
	// One allocation each for all entries and all backends keeps a 100k-route compile cheap.
	entries := make([]Entry, len(t.Routes))
	nTargets := 0
	for i := range t.Routes {
		nTargets += len(t.Routes[i].Targets)
	}
	backends := make([]Backend, nTargets)
	ptrs := make([]*Backend, nTargets)
	c.backends = backends
	var hosts []*stats.Host
	if reg != nil {
		names := make([]string, len(t.Routes))
		for i := range t.Routes {
			names[i] = t.Routes[i].Hostname
		}
		hosts = reg.Hosts(names)
	}
	bi := 0
	for i := range t.Routes {
		r := &t.Routes[i]
		e := &entries[i]
		e.Hostname = r.Hostname
		e.TLS = r.TLS
		if hosts != nil {
			e.Stats = hosts[i]
		}
		if r.TLS != nil && r.TLS.CertificateID != "" {
			e.Certificate = certs[r.TLS.CertificateID]
		}
		e.Backends = ptrs[bi : bi+len(r.Targets) : bi+len(r.Targets)]
		for j := range r.Targets {
			tg := &r.Targets[j]
			b := &backends[bi]
			b.LeaseID = tg.LeaseID
			b.Addr = hostPort(tg.Address, tg.Port)
			ptrs[bi] = b
			bi++
		}
		if parent, ok := strings.CutPrefix(r.Hostname, "*."); ok {
			c.wildcard[parent] = e
		} else {
			c.exact[r.Hostname] = e
		}
	}
	var old []Backend
	if prev != nil {
		old = prev.backends
	}
	assignStates(backends, old) // before c is published: the states are set once
	return c
}

// hostPort is net.JoinHostPort for a validated IPv4 address, with one allocation.
func hostPort(addr string, port int) string {
	var buf [21 + 6]byte
	b := append(buf[:0], addr...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(port), 10)
	return string(b)
}
