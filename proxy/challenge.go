package proxy

import (
	"bytes"
	"net/http"
	"strings"
)

// ACME challenges on the listeners the ingress owns (Config.HTTPChallenge, NextProtos and
// GetCertificate). The proxy knows nothing of ACME beyond these hooks: the caller (the
// acme package, wired by cmd/ingress) decides what to answer.
//
// HTTP-01: a plain-HTTP request whose path starts with acmeChallengePrefix leaves the fast
// path for net/http (h1serve.go), where route asks Config.HTTPChallenge before anything
// else, redirects included. TLS-ALPN-01: a hello that offers only Config.NextProtos is
// answered by Config.GetCertificate (tls.go) and its connection closed after the
// handshake (h1serve.go).

// acmeChallengePrefix is where RFC 8555 §8.3 puts HTTP-01 key authorizations.
const acmeChallengePrefix = "/.well-known/acme-challenge/"

// isACMEChallenge reports whether an origin-form request target asks for an HTTP-01 key
// authorization.
func isACMEChallenge(target []byte) bool {
	return bytes.HasPrefix(target, []byte(acmeChallengePrefix))
}

// serveHTTPChallenge lets Config.HTTPChallenge answer r when it is a plain-HTTP request
// for an ACME HTTP-01 key authorization; it reports whether it did.
func (s *Server) serveHTTPChallenge(w http.ResponseWriter, r *http.Request, p *pipe) bool {
	if p.secure || s.cfg.HTTPChallenge == nil || !strings.HasPrefix(r.URL.Path, acmeChallengePrefix) {
		return false
	}
	if !s.cfg.HTTPChallenge(w, r) {
		return false
	}
	p.status = http.StatusOK
	return true
}
