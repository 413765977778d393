package routetable

import (
	"crypto/tls"
	"strconv"
	"strings"

	"github.com/serve-zone/ingress/stats"
)

// compile builds the immutable lookup structure for a validated table. certs are the key
// pairs Validate parsed. states holds the target states of the previous table, keyed by
// targetID; compile reuses them and returns the map for the next swap, so a target
// present in both tables keeps its state (and a removed target's state is simply dropped,
// never touched).
func compile(t *Table, certs map[string]*tls.Certificate, states map[targetID]*TargetState, reg *stats.Registry) (*Compiled, map[targetID]*TargetState) {
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
	next := make(map[targetID]*TargetState, nTargets)
	bi := 0
	for i := range t.Routes {
		r := &t.Routes[i]
		e := &entries[i]
		e.Hostname = r.Hostname
		e.TLS = r.TLS
		if reg != nil {
			e.Stats = reg.Host(r.Hostname)
		}
		if r.TLS != nil && r.TLS.CertificateID != "" {
			e.Certificate = certs[r.TLS.CertificateID]
		}
		e.Backends = ptrs[bi : bi+len(r.Targets) : bi+len(r.Targets)]
		for j := range r.Targets {
			tg := &r.Targets[j]
			k := targetID{tg.LeaseID, tg.Address, tg.Port}
			st := next[k]
			if st == nil {
				st = states[k]
			}
			if st == nil {
				st = new(TargetState)
			}
			next[k] = st
			b := &backends[bi]
			b.LeaseID = tg.LeaseID
			b.Addr = hostPort(tg.Address, tg.Port)
			b.State = st
			ptrs[bi] = b
			bi++
		}
		if parent, ok := strings.CutPrefix(r.Hostname, "*."); ok {
			c.wildcard[parent] = e
		} else {
			c.exact[r.Hostname] = e
		}
	}
	return c, next
}

// hostPort is net.JoinHostPort for a validated IPv4 address, with one allocation.
func hostPort(addr string, port int) string {
	var buf [21 + 6]byte
	b := append(buf[:0], addr...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(port), 10)
	return string(b)
}
