package acme

import (
	"crypto/tls"
	"net/http"

	"github.com/serve-zone/ingress/routetable"
)

// GetCertificate is the TLS listener's hook (proxy.Config.GetCertificate): for a hello that
// offers only acme-tls/1 and names a managed hostname, certmagic's TLS-ALPN-01 answer; for
// a managed hostname, its certificate; otherwise, and for a managed hostname whose
// certificate is not obtained yet, (nil, nil), which fails the handshake with the
// unrecognized_name alert.
func (m *Manager) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name, ok := routetable.NormalizeHost(hello.ServerName)
	e := m.eng.Load()
	if !ok || e == nil || !m.managed(name) {
		return nil, nil
	}
	if isChallengeHello(hello) {
		return e.cfg.GetCertificate(hello) // the challenge certificate, or an error
	}
	cert, err := e.cfg.GetCertificate(hello)
	if err != nil || cert == nil || len(cert.Certificate) == 0 {
		return nil, nil // not obtained yet
	}
	return cert, nil
}

// isChallengeHello reports a TLS-ALPN-01 validation: a hello offering acme-tls/1 alone.
func isChallengeHello(hello *tls.ClientHelloInfo) bool {
	return len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == ALPNProto
}

// HandleHTTPChallenge is the plain listener's hook (proxy.Config.HTTPChallenge): it answers
// an HTTP-01 validation for a managed hostname with its key authorization and reports
// whether it did. Requests it does not recognise (no order under way for that token) are
// left to the route, so a target's own /.well-known/acme-challenge/ keeps working.
func (m *Manager) HandleHTTPChallenge(w http.ResponseWriter, r *http.Request) bool {
	name, ok := routetable.NormalizeHost(r.Host)
	if !ok || !m.managed(name) {
		return false
	}
	e := m.eng.Load()
	if e == nil {
		return false
	}
	return e.issuer.HandleHTTPChallenge(w, r)
}
