package proxy

import (
	"crypto/tls"
	"strings"
)

// newTLSConfig returns the listener's TLS configuration: TLS 1.2 or newer, ALPN h2 and
// http/1.1 (then Config.NextProtos), session tickets on (the default), certificates chosen
// per handshake from the table current at that moment. A connection keeps the certificate
// it was handshaken with across later table swaps.
func (s *Server) newTLSConfig() *tls.Config {
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		CipherSuites:   tls12Suites,
		NextProtos:     append([]string{"h2", "http/1.1"}, s.cfg.NextProtos...),
		GetCertificate: s.getCertificate,
	}
	bindTicketsToName(cfg)
	return cfg
}

// bindTicketsToName makes cfg's session tickets (TLS 1.2 and 1.3) resume only for the
// server name they were issued for. A resumed handshake presents no certificate, so a
// ticket issued for one name would otherwise open a connection for another name whose
// certificate the client never saw. The name travels in the ticket, encrypted with it.
func bindTicketsToName(cfg *tls.Config) {
	cfg.WrapSession = func(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		ss.Extra = append(ss.Extra, ticketName(cs.ServerName))
		return cfg.EncryptTicket(cs, ss)
	}
	cfg.UnwrapSession = func(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
		ss, err := cfg.DecryptTicket(identity, cs)
		if err != nil || ss == nil {
			return ss, err
		}
		want := ticketName(cs.ServerName)
		for _, x := range ss.Extra {
			if string(x) == string(want) {
				return ss, nil
			}
		}
		return nil, nil // another name: a full handshake instead
	}
}

// ticketName is the server name as kept in a session ticket.
func ticketName(sni string) []byte {
	return []byte("sni:" + strings.ToLower(strings.TrimSuffix(sni, ".")))
}

// extraProto reports whether p is one of Config.NextProtos (a connection that negotiated
// it is closed after its handshake).
func (s *Server) extraProto(p string) bool {
	for _, x := range s.cfg.NextProtos {
		if p == x {
			return true
		}
	}
	return false
}

// onlyExtraProtos reports whether a hello offers ALPN protocols and all of them are
// Config.NextProtos: such a hello (an ACME TLS-ALPN-01 validation) is Config.GetCertificate's
// alone, whatever certificate the table has for the name.
func (s *Server) onlyExtraProtos(hello *tls.ClientHelloInfo) bool {
	if len(s.cfg.NextProtos) == 0 || len(hello.SupportedProtos) == 0 {
		return false
	}
	for _, p := range hello.SupportedProtos {
		if !s.extraProto(p) {
			return false
		}
	}
	return true
}

// tls12Suites are the TLS 1.2 suites offered: forward-secret key exchange and AEAD
// ciphers only (Go's defaults add CBC with SHA-1). TLS 1.3's suites are not configurable
// and all AEAD.
var tls12Suites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// certCovers reports whether cert, the certificate a TLS connection was handshaken with
// for SNI name sni, may answer for host (a Host or :authority value, port allowed): the
// same name as the SNI, or one the leaf certificate names (coalescing within one
// certificate, as browsers do with HTTP/2). Otherwise the request is answered 421.
func certCovers(cert *tls.Certificate, sni, host string) bool {
	host = hostOnly(host)
	host = strings.TrimSuffix(host, ".")
	if strings.EqualFold(host, strings.TrimSuffix(sni, ".")) {
		return true
	}
	if cert == nil || cert.Leaf == nil || host == "" {
		return false
	}
	return cert.Leaf.VerifyHostname(host) == nil
}

// hostOnly strips the port from a Host value ("a:1", "[::1]:1", "[::1]").
func hostOnly(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.IndexByte(host[i:], ']') < 0 {
		host = host[:i]
	}
	if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	return host
}

// getCertificate picks the table's certificate for the SNI name (exact route before
// wildcard), then asks Config.GetCertificate. No SNI or an unknown name fails the
// handshake with the unrecognized_name alert (crypto/tls sends it when GetCertificate
// returns neither a certificate nor an error and no static one is configured; an error
// would send internal_error); the failure is counted once by the connection.
func (s *Server) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	cert, err := s.pickCertificate(hello)
	if err == ErrNoCertificate {
		return nil, nil
	}
	if cert != nil && hello.Conn != nil {
		// Kept until the connection picks it up (clientConn.handshake), so that its
		// requests are checked against it for as long as it lives, whatever tables
		// come later.
		s.hsCerts.Store(hello.Conn, cert)
	}
	return cert, err
}

// pickCertificate is getCertificate's choice, for TCP and QUIC alike.
func (s *Server) pickCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if s.cfg.GetCertificate != nil && s.onlyExtraProtos(hello) {
		return s.cfg.GetCertificate(hello)
	}
	if hello.ServerName != "" {
		if cert := s.tables.Load().GetCertificate(hello.ServerName); cert != nil {
			return s.stapler.staple(cert), nil
		}
	}
	if s.cfg.GetCertificate != nil {
		cert, err := s.cfg.GetCertificate(hello)
		if err != nil || cert != nil {
			return cert, err
		}
	}
	return nil, ErrNoCertificate
}
