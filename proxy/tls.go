package proxy

import (
	"crypto/tls"
)

// newTLSConfig returns the listener's TLS configuration: TLS 1.2 or newer, ALPN h2 and
// http/1.1, session tickets on (the default), certificates chosen per handshake from the
// table current at that moment. A connection keeps the certificate it was handshaken with
// across later table swaps.
func (s *Server) newTLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: s.getCertificate,
	}
}

// getCertificate picks the table's certificate for the SNI name (exact route before
// wildcard), then asks Config.GetCertificate. No SNI or an unknown name fails the
// handshake with an alert; the failure is counted once by the connection.
func (s *Server) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
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
