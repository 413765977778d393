package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/serve-zone/ingress/internal/rawnet"
	"github.com/serve-zone/ingress/proxy/internal/clients"
	"github.com/serve-zone/ingress/proxy/internal/h2"
	"github.com/serve-zone/ingress/stats"
)

// plainListener wraps accepted connections in a *clientConn.
type plainListener struct {
	net.Listener
	s *Server
}

// Accept skips connections from penalised client addresses (penalize.go: they are
// held in the tarpit) and those over their address's connection budget (budgets.go:
// reset). A trusted balancer's connection (fromLB) is judged by its PROXY header's
// client instead, on its own goroutine (balancer.go).
func (l *plainListener) Accept() (net.Conn, error) {
	for {
		c, fromLB, err := l.s.acceptUnpenalized(l.Listener)
		if err != nil {
			return nil, err
		}
		cc := &clientConn{Conn: rawnet.Wrap(c), s: l.s, fromLB: fromLB}
		newLife(cc)
		if fromLB || l.s.admitConn(cc, c, remoteAddr(c)) {
			return cc, nil
		}
	}
}

// acceptUnpenalized accepts l's next connection whose client address is not penalised
// (penalize.go: the others are held in the tarpit). fromLB: it comes from a trusted
// balancer (Config.ProxyProtocolFrom), whose address is not the client's: nothing was
// checked yet.
func (s *Server) acceptUnpenalized(l net.Listener) (c net.Conn, fromLB bool, err error) {
	for {
		c, err := l.Accept()
		if err != nil {
			return c, false, err
		}
		if s.fromBalancer(c) {
			return c, true, nil
		}
		if !s.refusePenalized(c) {
			return c, false, nil
		}
	}
}

// tlsListener terminates TLS itself (lazily, on the connection's own goroutine at its first
// Read) and hands net/http a *clientConn around the *tls.Conn, so that the byte counters
// see plaintext: contract §5 counts HTTP bytes, not TLS records.
type tlsListener struct {
	net.Listener
	s *Server
}

// Accept skips connections from penalised client addresses before their handshake
// (penalize.go: they are held in the tarpit), and those over their address's
// connection budget (budgets.go: reset); a trusted balancer's connection is judged
// after its PROXY header, which comes before the handshake (balancer.go).
func (l *tlsListener) Accept() (net.Conn, error) {
	for {
		c, fromLB, err := l.s.acceptUnpenalized(l.Listener)
		if err != nil {
			return nil, err
		}
		tc := tls.Server(rawnet.Wrap(c), l.s.tlsConfig)
		cc := &clientConn{Conn: tc, tc: tc, s: l.s, fromLB: fromLB}
		newLife(cc)
		if fromLB || l.s.admitConn(cc, c, remoteAddr(c)) {
			return cc, nil
		}
	}
}

// clientConn is one client connection with its byte counters and the per-connection state
// the handler needs. The counters are atomics because net/http reads from a background
// goroutine while a handler runs. The acct* fields and lastHost belong to the HTTP/1.1
// serving goroutine (requests on one HTTP/1.1 connection never overlap); HTTP/2
// connections never touch them.
type clientConn struct {
	net.Conn
	s  *Server
	tc *tls.Conn // nil for plain connections

	readN, writeN   atomic.Int64
	handshook       atomic.Bool
	hsErr           error         // set before handshook, read after
	proto           atomic.Uint32 // stats.Proto the connection is counted under in Totals.Conn
	connAttribution               // counted once under a hostname
	hijacked        atomic.Bool
	// hold is the connection's place in its client address's budgets (budgets.go),
	// given back by Close; zero for a trusted proxy's and a balancer's own.
	hold clients.Hold
	// fromLB: accepted from a trusted balancer (Config.ProxyProtocolFrom), whose PROXY
	// header comes first (takeProxyHeader); via is whom it named, set before anything
	// else reads the connection (nil: the socket's peer is the client). balancer.go.
	fromLB bool
	via    *balanced
	// h2 is the own HTTP/2 engine's connection while it serves this one (serveH2),
	// for End.
	h2 atomic.Pointer[h2.Conn]
	// life is the connection's state word, shared with its other forms (life.go).
	life *connLife

	// sni and cert are the TLS connection's server name and the certificate it was
	// handshaken with (set by handshake, read after it): a request for a host cert does
	// not cover is answered 421 (covers).
	sni  string
	cert *tls.Certificate

	acctRead, acctWrite int64       // positions already attributed to a request
	lastHost            *stats.Host // hostname of the last request; nil for unknown hosts

	// pending holds bytes the fast path read but did not consume before it handed the
	// connection to net/http (h1serve.go); Read returns them first, and drops the slice
	// once it is read. They were counted when they were read.
	pending []byte
}

type connKey struct{}

func connContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*clientConn); ok {
		return context.WithValue(ctx, connKey{}, cc)
	}
	return ctx
}

// connOf returns the request's client connection, or nil when it came from elsewhere
// (Handler used directly, or the HTTP/3 server).
func connOf(r *http.Request) *clientConn {
	cc, _ := r.Context().Value(connKey{}).(*clientConn)
	return cc
}

func (c *clientConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		if len(c.pending) == 0 {
			c.pending = nil
		}
		return n, nil
	}
	if c.tc != nil && !c.handshook.Load() {
		if err := c.handshake(); err != nil {
			return 0, err
		}
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.readN.Add(int64(n))
	}
	return n, err
}

func (c *clientConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.writeN.Add(int64(n))
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		// The client stopped reading (ClientSendTimeout): whoever closes the
		// connection next resets it, instead of leaving the kernel to trickle out
		// what is still queued for minutes.
		c.resetOnClose()
	}
	return n, err
}

// CloseWrite half-closes the connection (used by net/http after some errors and by
// WebSocket tunnels).
func (c *clientConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// handshake runs the TLS handshake under the deadline net/http set for reading the first
// request header. It counts a failure once and, on success, attributes the connection to
// its SNI route and records the ALPN protocol.
func (c *clientConn) handshake() error {
	if c.hsErr != nil {
		return c.hsErr
	}
	err := c.tc.Handshake()
	if v, ok := c.s.hsCerts.LoadAndDelete(c.tc.NetConn()); ok {
		c.cert = v.(*tls.Certificate)
	}
	if err != nil {
		c.s.totals.TLSHandshakeFailure()
		c.s.handshakeFailed(c.RemoteAddr(), c.tc.ConnectionState().ServerName, err)
		// A *net.OpError with Op "read" makes net/http close quietly instead of trying to
		// write a 400 response through a broken TLS connection.
		c.hsErr = &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
		return c.hsErr
	}
	st := c.tc.ConnectionState()
	c.sni = st.ServerName
	if c.cert == nil && st.DidResume {
		// A resumed session presents no certificate, so getCertificate was not asked:
		// the ticket was issued for this name (bindTicketsToName), and the table's
		// certificate for it stands in for the one shown then.
		c.cert = c.s.tables.Load().GetCertificate(c.sni)
	}
	if st.NegotiatedProtocol == "h2" {
		c.setProto(stats.ProtoHTTP2)
	}
	if t := c.s.tables.Load(); t != nil && !c.s.extraProto(st.NegotiatedProtocol) {
		if e := t.Lookup(st.ServerName); e != nil {
			c.attribute(e.Stats)
		}
	}
	c.handshook.Store(true)
	return nil
}

// setProto moves the connection to protocol p in Totals.Conn.
func (c *clientConn) setProto(p stats.Proto) {
	if old := stats.Proto(c.proto.Swap(uint32(p))); old != p {
		c.s.totals.Conn(old, -1)
		c.s.totals.Conn(p, 1)
	}
}

func (c *clientConn) isTLS() bool { return c.tc != nil }

// tlsIn is how many bytes crypto/tls has taken from the socket (records, not plaintext);
// false for a plain connection or when the socket does not count them (rawnet.TCPConn
// does, on Linux). Only the connection's reader may ask.
func (c *clientConn) tlsIn() (int64, bool) {
	if c.tc == nil {
		return 0, false
	}
	r, ok := c.tc.NetConn().(interface{ BytesRead() int64 })
	if !ok {
		return 0, false
	}
	return r.BytesRead(), true
}

// resetOnClose makes Close reset the TCP connection (SO_LINGER 0), dropping whatever is
// still queued for a client that stopped reading.
func (c *clientConn) resetOnClose() {
	nc := c.Conn
	if c.tc != nil {
		nc = c.tc.NetConn()
	}
	if tc, ok := nc.(interface{ SetLinger(int) error }); ok { // *net.TCPConn, *rawnet.TCPConn
		_ = tc.SetLinger(0)
	}
}

// covers reports whether this connection may serve host: always on plain connections,
// on TLS ones when its certificate covers host (certCovers).
func (c *clientConn) covers(host string) bool {
	return c.tc == nil || certCovers(c.cert, c.sni, host)
}

// connState keeps Totals.Conn and flushes the bytes of a closing HTTP/1.1 connection that
// no request has claimed yet (the tail of the last response) to its last hostname.
func (s *Server) connState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*clientConn)
	if !ok {
		return
	}
	switch st {
	case http.StateNew:
		s.totals.Conn(stats.Proto(c.proto.Load()), 1)
	case http.StateClosed:
		p := stats.Proto(c.proto.Load())
		s.totals.Conn(p, -1)
		if p == stats.ProtoHTTP1 && !c.hijacked.Load() {
			c.flushTail(s, true)
		}
	}
}

// flushTail attributes bytes not yet claimed by a request to the last hostname (and to
// the totals when they can take bytes alone). withReads also flushes read bytes: only at
// close, because bytes read between requests belong to the next request.
func (c *clientConn) flushTail(s *Server, withReads bool) {
	wr := c.writeN.Load()
	out := wr - c.acctWrite
	c.acctWrite = wr
	var in int64
	if withReads {
		rd := c.readN.Load()
		in = rd - c.acctRead
		c.acctRead = rd
	}
	if in <= 0 && out <= 0 {
		return
	}
	c.lastHost.Bytes(in, out)
	s.totals.Bytes(stats.ProtoHTTP1, in, out)
}
