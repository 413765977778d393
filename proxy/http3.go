package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/serve-zone/ingress/stats"
)

// HTTP/3 (contract §8: --https-addr serves TLS on TCP and HTTP/3 on UDP at the same
// address). The http3.Server shares the routing handler with the TCP listeners; requests
// reach it without a *clientConn, so the handler accounts them by the HTTP/2 rule (decoded
// field names and values plus body bytes, accounting.go) under stats.ProtoHTTP3.
//
// Connections: ConnContext runs once per accepted QUIC connection (the early listener
// accepts it once the ClientHello is processed, before the handshake completes). It adds
// the connection to Totals.Conn(ProtoHTTP3) and starts one watcher goroutine that waits
// for the handshake, attributes the connection to the route its SNI names, and removes it
// from Totals.Conn when the connection's context ends. The watchers are owned by the
// Server: Serve waits for them, and once the HTTP/3 server is closed they close whatever
// connection is left. A connection whose SNI names no route (a certificate from
// Config.GetCertificate) is attributed at its first request that matches a route, as on TCP.

// maxHTTP3Streams bounds concurrent requests per QUIC connection, like
// HTTP2Config.MaxConcurrentStreams on TCP.
const maxHTTP3Streams = maxConcurrentStreams

// altSvcMaxAge is the ma= of the Alt-Svc header, in seconds.
const altSvcMaxAge = 86400

// bindAttempts bounds the retries when HTTPSAddr has port 0 and the UDP port the TCP
// listener got turns out to be taken.
const bindAttempts = 4

// h3Server is the Server's HTTP/3 part. srv is nil when HTTP/3 is off; every other field
// is then unused.
type h3Server struct {
	srv *http3.Server
	// pc is the UDP socket Listen bound (guarded by Server.mu). http3.Server never closes a
	// socket it was handed; closeListeners does.
	pc net.PacketConn
	// altSvc is the Alt-Svc value for responses over TLS on TCP; nil when HTTP/3 is off.
	// Listen writes it before Serve starts any listener and it is read-only afterwards,
	// so handlers (which only see our connections once Serve runs) read it without a lock.
	altSvc []string
	// conns counts the watcher goroutines (one per QUIC connection).
	conns sync.WaitGroup
	// stop is closed when the HTTP/3 server is closed: watchers close what is left.
	stop     chan struct{}
	stopOnce sync.Once
	// tlsConfig and quicConfig are the QUIC listener's (serveHTTP3). tr and ln are the
	// transport over pc (ours, for its VerifySourceAddress and ConnContext: quichs.go)
	// and its listener, set by serveHTTP3 and closed by shutdownHTTP3 and stopHTTP3
	// (guarded by Server.mu); stopped says stopHTTP3 ran.
	tlsConfig  *tls.Config
	quicConfig *quic.Config
	tr         *quic.Transport
	ln         *quic.EarlyListener
	stopped    bool
	// handshakes counts the QUIC handshakes in progress, maxHandshakes bounds them
	// (quichs.go).
	handshakes    atomic.Int64
	maxHandshakes int64
}

// h3Conn is one QUIC connection's attribution state, kept in its requests' context.
type h3Conn struct {
	conn            *quic.Conn
	sni             sync.Once // the SNI attribution, once the handshake is complete
	connAttribution           // counted once under a hostname
	// hs holds the connection's place in its client address's budgets (budgets.go),
	// taken at its first packet and given back when it ends (quichs.go); its hold is
	// zero for a trusted proxy's. nil for a connection that did not come through our
	// transport.
	hs *quicHandshake
}

type h3ConnKey struct{}

// newHTTP3Server builds the HTTP/3 server when Config.HTTP3 and HTTPSAddr ask for it.
func (s *Server) newHTTP3Server() {
	s.h3.stop = make(chan struct{})
	if !s.cfg.HTTP3 || s.cfg.HTTPSAddr == "" {
		return
	}
	// http3.Server sets NextProtos to h3 on its own clone (and chains its own ticket
	// data onto ours); QUIC implies TLS 1.3. Tickets resume only for their name, as on
	// TCP.
	tlsCfg := &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: s.getCertificateH3,
	}
	bindTicketsToName(tlsCfg)
	qc := &quic.Config{
		// The whole handshake is bounded by twice this, so by ReadHeaderTimeout, as on TCP.
		HandshakeIdleTimeout: s.cfg.ReadHeaderTimeout / 2,
		MaxIdleTimeout:       s.cfg.IdleTimeout,
		MaxIncomingStreams:   maxHTTP3Streams,
		// 0-RTT requests can be replayed and would reach targets before the handshake
		// has attributed the connection.
		Allow0RTT: false,
	}
	// Asked at a connection's first Initial packet, before any of its handshake's work:
	// a penalised address, or one that has its budget of connections, is refused there
	// (budgets.go). The config returned is this one (the http3.Server's clone differs
	// in nothing a connection uses).
	qc.GetConfigForClient = func(ci *quic.ClientInfo) (*quic.Config, error) {
		if err := s.refuseQUIC(ci.RemoteAddr); err != nil {
			return nil, err
		}
		return qc, nil
	}
	s.h3.tlsConfig, s.h3.quicConfig = tlsCfg, qc
	s.h3.maxHandshakes = defaultQUICHandshakes(machineMemory())
	s.h3.srv = &http3.Server{
		TLSConfig:      tlsCfg,
		QUICConfig:     qc,
		Handler:        s.handler,
		MaxHeaderBytes: s.cfg.MaxHeaderBytes,
		IdleTimeout:    s.cfg.IdleTimeout,
		ConnContext:    s.h3ConnContext,
	}
}

// getCertificateH3 is getCertificate for QUIC handshakes. A refused name is counted as a
// TLS handshake failure here: such a connection is never accepted, so no watcher sees it.
func (s *Server) getCertificateH3(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	cert, err := s.pickCertificate(hello)
	if err != nil {
		s.totals.TLSHandshakeFailure()
	}
	if err == ErrNoCertificate {
		return nil, nil // the unrecognized_name alert (see getCertificate)
	}
	return cert, err
}

// listenHTTPS binds the TLS listener on TCP and, with HTTP/3 on, a UDP socket on the same
// host and port (the port the TCP listener got when HTTPSAddr's port is 0; if that port
// is taken on UDP, both are bound again, a few times).
func (s *Server) listenHTTPS() (net.Listener, net.PacketConn, error) {
	addr := s.cfg.HTTPSAddr
	if s.h3.srv == nil {
		ln, err := net.Listen("tcp", addr)
		return ln, nil, err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, err
	}
	anyPort := port == "0" || port == ""
	for attempt := 1; ; attempt++ {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, nil, err
		}
		_, got, _ := net.SplitHostPort(ln.Addr().String())
		pc, err := net.ListenPacket("udp", net.JoinHostPort(host, got))
		if err == nil {
			return ln, pc, nil
		}
		_ = ln.Close()
		if !anyPort || attempt == bindAttempts {
			return nil, nil, fmt.Errorf("proxy: HTTP/3 on UDP: %w", err)
		}
	}
}

// setHTTP3Conn records the bound UDP socket and precomputes the Alt-Svc value. Called by
// Listen with s.mu held.
func (s *Server) setHTTP3Conn(pc net.PacketConn) {
	if pc == nil {
		return
	}
	s.h3.pc = pc
	port := 0
	if ua, ok := pc.LocalAddr().(*net.UDPAddr); ok {
		port = ua.Port
	}
	if s.cfg.PublicHTTPSPort > 0 {
		port = s.cfg.PublicHTTPSPort
	}
	s.h3.altSvc = []string{`h3=":` + strconv.Itoa(port) + `"; ma=` + strconv.Itoa(altSvcMaxAge)}
}

// HTTP3Addr returns the UDP address HTTP/3 is served on, or nil when HTTP/3 is off or
// Listen has not bound it yet.
func (s *Server) HTTP3Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h3.pc == nil {
		return nil
	}
	return s.h3.pc.LocalAddr()
}

// serveHTTP3 serves HTTP/3 on pc until the HTTP/3 server is shut down or closed (then it
// returns nil) or the socket fails. The QUIC transport is ours, not http3's: its
// VerifySourceAddress asks for a Retry and its ConnContext takes a connection's budget
// place at its first packet (quichs.go).
func (s *Server) serveHTTP3(pc net.PacketConn) error {
	tr := &quic.Transport{Conn: pc, VerifySourceAddress: s.retryQUIC, ConnContext: s.startQUIC}
	ln, err := tr.ListenEarly(http3.ConfigureTLSConfig(s.h3.tlsConfig), s.h3.quicConfig)
	if err != nil {
		_ = tr.Close()
		return fmt.Errorf("proxy: HTTP/3 listener: %w", err)
	}
	s.mu.Lock()
	stopped := s.h3.stopped
	if !stopped {
		s.h3.tr, s.h3.ln = tr, ln
	}
	s.mu.Unlock()
	if stopped {
		_ = ln.Close()
		_ = tr.Close()
		return nil
	}
	err = s.h3.srv.ServeListener(ln)
	if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, quic.ErrServerClosed) {
		return nil
	}
	return err
}

// shutdownHTTP3 stops new QUIC connections (handshakes in flight are refused), sends
// GOAWAY on every QUIC connection and waits until their requests have finished or ctx is
// done (then it closes them).
func (s *Server) shutdownHTTP3(ctx context.Context) {
	if s.h3.srv == nil {
		return
	}
	s.mu.Lock()
	ln := s.h3.ln
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	_ = s.h3.srv.Shutdown(ctx)
}

// closeHTTP3 closes every QUIC connection at once and waits for their handlers.
func (s *Server) closeHTTP3() {
	if s.h3.srv != nil {
		_ = s.h3.srv.Close()
	}
}

// stopHTTP3 closes the QUIC listener and transport (every connection left with them)
// and the UDP socket, and releases the watchers. Called with s.mu held, after the HTTP/3
// server was shut down or closed (or never served).
func (s *Server) stopHTTP3() {
	s.h3.stopped = true
	s.h3.stopOnce.Do(func() { close(s.h3.stop) })
	if s.h3.ln != nil {
		_ = s.h3.ln.Close()
	}
	if s.h3.tr != nil {
		_ = s.h3.tr.Close()
	}
	if s.h3.pc != nil {
		_ = s.h3.pc.Close()
	}
}

// h3ConnContext is the http3.Server's ConnContext: it counts the connection and starts its
// watcher.
func (s *Server) h3ConnContext(ctx context.Context, c *quic.Conn) context.Context {
	hc := &h3Conn{conn: c}
	if hs, _ := c.Context().Value(quicHandshakeKey{}).(*quicHandshake); hs != nil {
		hc.hs = hs
		hs.accepted(c)
	}
	s.totals.Conn(stats.ProtoHTTP3, 1)
	s.h3.conns.Add(1)
	go s.watchHTTP3(hc)
	return context.WithValue(ctx, h3ConnKey{}, hc)
}

// watchHTTP3 attributes the connection at its handshake, takes its place in its
// address's budget then (budgets.go), and uncounts it and gives the place back when it
// ends.
// A connection that ends before its handshake completed is a TLS handshake failure.
func (s *Server) watchHTTP3(hc *h3Conn) {
	defer s.h3.conns.Done()
	defer s.totals.Conn(stats.ProtoHTTP3, -1)
	defer s.releaseQUIC(hc)
	c := hc.conn
	select {
	case <-c.HandshakeComplete():
		s.admitQUIC(hc)
		s.attributeSNI(hc)
		s.parker.NoteHandshake() // its garbage counts into the next memory release
	case <-c.Context().Done():
		select {
		case <-c.HandshakeComplete():
			s.attributeSNI(hc)
		default:
			s.totals.TLSHandshakeFailure()
			s.handshakeFailed(c.RemoteAddr(), c.ConnectionState().TLS.ServerName, context.Cause(c.Context()))
		}
		return
	case <-s.h3.stop:
		_ = c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
		return
	}
	select {
	case <-c.Context().Done():
	case <-s.h3.stop:
		_ = c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
	}
}

// attributeSNI counts the connection for the route its SNI names, once. Callers wait for
// it (sync.Once), so a first request never races the handshake's attribution.
func (s *Server) attributeSNI(hc *h3Conn) {
	hc.sni.Do(func() {
		name := hc.conn.ConnectionState().TLS.ServerName
		if t := s.tables.Load(); t != nil {
			if e := t.Lookup(name); e != nil {
				hc.attribute(e.Stats)
			}
		}
	})
}

// reqSide is a request that reached the handler without one of our TCP connections (HTTP/3,
// or Handler used directly): what decide learns of its client (request.covers,
// request.attribute).
type reqSide struct {
	s *Server
	r *http.Request
}

// covers: for HTTP/3 the certificate the current table has for the connection's server
// name stands in for the handshake's; a request without TLS is covered.
func (c reqSide) covers(host string) bool {
	if c.r.TLS == nil {
		return true
	}
	sni := c.r.TLS.ServerName
	return certCovers(c.s.tables.Load().GetCertificate(sni), sni, host)
}

// attribute counts the request's QUIC connection for h when neither its SNI nor an
// earlier request has attributed it. Requests only arrive after the handshake (0-RTT is
// off), so the SNI attribution is done first if the watcher has not done it yet.
func (c reqSide) attribute(h *stats.Host) {
	hc, _ := c.r.Context().Value(h3ConnKey{}).(*h3Conn)
	if hc == nil || hc.counted.Load() {
		return
	}
	c.s.attributeSNI(hc)
	hc.attribute(h)
}

// h3TooMuchData reports quic-go's failure of an HTTP/3 body read past its
// content-length (its http3 package, v0.65: an unexported error, which also resets the
// stream with H3_MESSAGE_ERROR and so cancels the request's context). Known by its text;
// TestHeldBodyH3LongNeverReachesTarget fails should a new version say it otherwise.
func h3TooMuchData(err error) bool {
	return err != nil && err.Error() == "peer sent too much data"
}
