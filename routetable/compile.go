package routetable

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/serve-zone/ingress/stats"
)

// compile builds the immutable lookup structure for a validated table. states holds the
// target states of the previous table, keyed by targetKey; compile reuses them and returns
// the map for the next swap, so a target present in both tables keeps its state.
func compile(t *Table, states map[string]*TargetState, reg *stats.Registry) (*Compiled, map[string]*TargetState, error) {
	c := &Compiled{
		Revision: t.Revision,
		Source:   t,
		exact:    make(map[string]*Entry, len(t.Routes)),
		wildcard: make(map[string]*Entry),
		certs:    make(map[string]*tls.Certificate, len(t.Certificates)),
	}
	for i := range t.Certificates {
		cert := &t.Certificates[i]
		kp, err := tls.X509KeyPair([]byte(cert.CertificatePEM), []byte(cert.PrivateKeyPEM))
		if err != nil {
			// Validate has already judged the pair; reaching this is a bug, and the error
			// text of X509KeyPair never contains key material.
			return nil, nil, fmt.Errorf("certificates[%d]: %w", i, err)
		}
		c.certs[cert.ID] = &kp
	}
	next := make(map[string]*TargetState, len(states))
	for i := range t.Routes {
		r := &t.Routes[i]
		e := &Entry{Hostname: r.Hostname, TLS: r.TLS, Backends: make([]*Backend, len(r.Targets))}
		if reg != nil {
			e.Stats = reg.Host(r.Hostname)
		}
		if r.TLS != nil && r.TLS.CertificateID != "" {
			e.Certificate = c.certs[r.TLS.CertificateID]
		}
		for j, tg := range r.Targets {
			k := targetKey(tg)
			st := next[k]
			if st == nil {
				st = states[k]
			}
			if st == nil {
				st = new(TargetState)
			}
			next[k] = st
			e.Backends[j] = &Backend{
				LeaseID: tg.LeaseID,
				Addr:    net.JoinHostPort(tg.Address, strconv.Itoa(tg.Port)),
				State:   st,
			}
		}
		if parent, ok := strings.CutPrefix(r.Hostname, "*."); ok {
			c.wildcard[parent] = e
		} else {
			c.exact[r.Hostname] = e
		}
	}
	return c, next, nil
}
