package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/serve-zone/ingress/proxy/internal/clients"
	"github.com/serve-zone/ingress/proxy/internal/park"
	"github.com/serve-zone/ingress/proxy/internal/penalty"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// Sentinel errors of the package. Errors returned by New wrap ErrInvalidConfig.
var (
	ErrInvalidConfig = errors.New("proxy: invalid configuration")
	ErrNotListening  = errors.New("proxy: Listen has not bound the listeners")
	ErrClosed        = errors.New("proxy: server is shut down")
	// ErrNoCertificate fails a TLS handshake whose SNI names no route with a certificate.
	ErrNoCertificate = errors.New("proxy: no certificate for the requested server name")
)

// TableSource yields the current compiled route table; nil means none was applied yet.
// *routetable.Store satisfies it. Load is called once per request and must be cheap and
// safe for concurrent use.
type TableSource interface {
	Load() *routetable.Compiled
}

// Config configures a Server. Zero durations and sizes mean the documented defaults;
// negative durations are treated as zero (the default).
type Config struct {
	// HTTPAddr and HTTPSAddr are the listen addresses; "" disables that listener. At least
	// one must be set.
	HTTPAddr, HTTPSAddr string
	// Tables is required.
	Tables TableSource
	// Totals receives process-wide counters; nil means a private one.
	Totals *stats.Totals
	// Logger receives operational messages; nil means zap.NewNop().
	Logger *zap.Logger
	// TrustedProxies are client addresses whose X-Forwarded-* and Forwarded headers are
	// extended instead of replaced. Nil trusts nobody.
	TrustedProxies []netip.Prefix
	// DialTimeout bounds a dial to a target (0 -> 5s).
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for a target's response header (0 -> 60s).
	ResponseHeaderTimeout time.Duration
	// ReadHeaderTimeout bounds reading a client's request header, TLS handshake included
	// (0 -> 10s).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes idle client keep-alive connections (0 -> 120s).
	IdleTimeout time.Duration
	// TunnelIdleTimeout closes a tunnel (a WebSocket over HTTP/1.1, HTTP/2 or HTTP/3)
	// through which no byte passed, either way, for this long (0 -> 5m). It is longer than
	// the idle timeouts applications commonly live behind (nginx's proxy_read_timeout and
	// AWS ALB 60 s, Cloudflare 100 s), so whatever keeps a tunnel alive there does here.
	// One sweep checks every tunnel each TunnelIdleTimeout/8: a tunnel is closed at most an
	// eighth late, never early.
	TunnelIdleTimeout time.Duration
	// MaxHeaderBytes limits a client's request header (0 -> 64 KiB).
	MaxHeaderBytes int
	// ClientBodyTimeout bounds how long reading a request body may go without progress
	// (0 -> 30s): every window of this length must deliver at least 1 KiB of the body, or
	// the rest of it when less is left. A window starts when the previous one delivered
	// its 1 KiB (the first one at the first read of the body), and only time spent
	// waiting for the client counts, not time the target takes to accept what was read.
	// When a window runs out, the request fails with 408 if nothing was answered yet (the
	// response is cut otherwise), the target's request is cancelled and its connection
	// closed; it is not a backend failure. This stops an upload that sends a byte every
	// few seconds after one window, which a deadline per read would not. The window is
	// enforced with a read deadline re-armed lazily, so it may end up to an eighth of
	// its length late, never early.
	ClientBodyTimeout time.Duration
	// ClientSendTimeout bounds each write of response bytes to the client (0 -> 30s): a
	// write that does not complete within it (a client that stops reading, an HTTP/2 or
	// HTTP/3 stream whose flow-control window the client never opens) cuts the response
	// (the stream is reset, an HTTP/1.1 connection closed), closes the target's
	// connection and is recorded as a client disconnect (499), not a backend failure.
	// Long responses that keep moving are not affected, and neither is time spent
	// waiting for the target. HTTP/2 connections also get it as their write-progress
	// timeout (HTTP2Config.WriteByteTimeout). Like ClientBodyTimeout it may fire up to
	// an eighth of its length late. WebSocket tunnels are not subject to either.
	ClientSendTimeout time.Duration
	// HTTP2MaxStreamsPerConn is how many streams (requests) one HTTP/2 connection serves
	// (0 -> 1000, as nginx's keepalive_requests): the stream that reaches it goes with a
	// GOAWAY(NO_ERROR) naming it as the last, later ones are ignored, and the connection
	// closes once its streams are done. An honest client reconnects; a flood spread over
	// pre-opened connections loses them, and its new connections meet the accept-time
	// checks (the penalty) again.
	HTTP2MaxStreamsPerConn int
	// RequestBuffer is how much of a request body is read before a target is chosen (0 ->
	// 64 KiB; negative: nothing is). A body that ends within it is read whole and checked
	// first: a malformed one (a broken chunk, an HTTP/2 or HTTP/3 body shorter or longer
	// than its content-length, a reset) is answered 400 (or its stream reset, where its
	// protocol says so) and reaches no target, and a whole one may be sent again on a
	// stale pooled target connection when its method allows (upstream.Replayable). A
	// larger body goes out once that much was read, the rest as it comes. The wait is
	// ClientBodyTimeout's; the target's header timeout starts once the body went out.
	// Each request may hold this much (and up to 32 KiB more) while it waits, in pooled
	// buffers.
	RequestBuffer int64
	// AccessLog, when set, receives one Info line per request: host, method, path, query,
	// status, bytes in/out, duration, the client's address, the target's lease and
	// address (also when it failed), the protocol and, for a failed request, the error.
	AccessLog *zap.Logger
	// GetCertificate, when set, is asked for SNI names the table has no certificate for
	// (ACME), and first for a hello that offers nothing but NextProtos (an ACME
	// TLS-ALPN-01 validation). Returning (nil, nil) fails the handshake with the
	// unrecognized_name alert, an error with internal_error. It must be safe for
	// concurrent use.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// NextProtos are ALPN protocols offered after h2 and http/1.1 on the TLS listener
	// ("acme-tls/1" for ACME's TLS-ALPN-01 challenge). A connection that negotiates one
	// of them is closed once its handshake is done: no request is read from it.
	NextProtos []string
	// HTTPChallenge, when set, is asked first about every request on the plain listener
	// whose path starts with /.well-known/acme-challenge/, before routing and redirects;
	// it returns true when it answered the request (ACME's HTTP-01 challenge), false to
	// let the request be routed as any other. It must be safe for concurrent use.
	HTTPChallenge func(http.ResponseWriter, *http.Request) bool
	// HTTP3 also serves HTTP/3 (QUIC) on UDP at HTTPSAddr's host and port (the port the
	// TCP listener got when HTTPSAddr's port is 0), with the same routing and certificates,
	// and announces it with Alt-Svc on responses over TLS on TCP. It is ignored without
	// HTTPSAddr. false, the zero value, serves no HTTP/3 (contract §8's --http3 defaults
	// to true: the command line passes it).
	HTTP3 bool
	// PublicHTTPSPort is the port clients reach HTTPSAddr at when it differs from the bound
	// one (a container's published port, a NAT or load balancer in front): Alt-Svc
	// announces it for HTTP/3 and redirects to https name it. 0 means the bound port.
	PublicHTTPSPort int
	// ReleaseIdleMemory returns memory to the operating system after a wave of HTTP/1.1
	// connections went idle (parked, Linux only): once at least 1,024 connections have
	// parked since the last time and none for a second, a goroutine runs two collections
	// and runtime/debug.FreeOSMemory, at most once a minute. Without it the runtime keeps
	// the pages of the burst that opened the connections (their read buffers and grown
	// goroutine stacks, 10,000 connections: ~100 MiB) resident for many minutes, because
	// an idle server allocates too little to reach its next collection. It affects the
	// whole process (the collections are process-wide), so it is off by default; the
	// ingress binary turns it on. It costs nothing on the request path.
	ReleaseIdleMemory bool
	// MaxConnsPerClient bounds the connections one client address (an IPv6 address by
	// its /64) may have open at once, TCP and QUIC together (0 -> 512; negative: no
	// limit). One more is refused at accept, before any TLS or HTTP work (a TCP reset;
	// QUIC: CONNECTION_REFUSED at the handshake). Trusted proxies are exempt.
	MaxConnsPerClient int
	// MaxRequestsPerClient bounds the requests (HTTP/2 and HTTP/3 streams) one client
	// address may have in flight at once over all its connections (0 -> 512; negative:
	// no limit). One more gets REFUSED_STREAM on HTTP/2, 503 with Retry-After: 1 on
	// HTTP/1.1 and HTTP/3; no target sees it. Trusted proxies are exempt.
	MaxRequestsPerClient int
	// MaxTunnelsPerClient bounds the WebSocket tunnels one client address may have open
	// at once (0 -> 256; negative: no limit). One more is answered 503 with Retry-After:
	// 1 before any target is contacted. Trusted proxies are exempt.
	MaxTunnelsPerClient int
	// ProxyProtocolFrom are the load balancers whose TCP connections (plain and TLS)
	// must begin with a PROXY protocol header, version 1 or 2, read before any TLS or
	// HTTP byte (balancer.go): its source address is then the connection's client for
	// every per-client rule (the budgets and the penalty, forwarding fields, the access
	// log), also after a sleep. A LOCAL command (version 1: UNKNOWN), a balancer's
	// health check, is the balancer's own connection: served with its address, counted
	// in no budget, never penalised. A connection whose header is malformed or late is
	// closed and counted (stats.RefusalProxyProtocol). Connections from elsewhere are
	// served as without it: a PROXY header from them is not honoured. HTTP/3 is
	// unaffected. Nil: none.
	ProxyProtocolFrom []netip.Prefix
	// ProxyProtocolTimeout bounds the wait for that header from the accept (0 -> 5s).
	ProxyProtocolTimeout time.Duration
	// MaxRequests bounds the requests and WebSocket tunnels in flight over all clients
	// together, every protocol (0 -> derived from the machine's memory and descriptor
	// limit: bounds.go; negative: no limit). One more is refused as one over its
	// address's budget is: REFUSED_STREAM on HTTP/2, 503 with Retry-After: 1 elsewhere.
	MaxRequests int
	// RequestBufferTotal bounds the bytes of request bodies all requests together hold
	// before their targets are chosen (RequestBuffer each), counted in 32 KiB buffers
	// (0 -> a 128th of the machine's memory, at least 16 MiB: bounds.go;
	// negative: no limit). Past it a body is not held: it streams to its target as
	// one larger than RequestBuffer does.
	RequestBufferTotal int64

	// What the package's own tests choose (no flag or exported field sets them):
	// stdH2 serves h2 and h2c with net/http's HTTP/2 server instead of the own engine (the
	// oracle of the differential tests and fuzzers); h1Off hands every connection to
	// net/http at once (the fast path's differential tests, net/http's front-end's tests).
	stdH2, h1Off bool
}

const (
	defaultDialTimeout           = 5 * time.Second
	defaultResponseHeaderTimeout = 60 * time.Second
	defaultReadHeaderTimeout     = 10 * time.Second
	defaultIdleTimeout           = 120 * time.Second
	defaultMaxHeaderBytes        = 64 << 10
	defaultClientBodyTimeout     = 30 * time.Second
	defaultClientSendTimeout     = 30 * time.Second
	defaultTunnelIdleTimeout     = 5 * time.Minute
	defaultRequestBuffer         = 64 << 10
	defaultProxyProtocolTimeout  = 5 * time.Second
	// maxConcurrentStreams bounds the requests one HTTP/2 or HTTP/3 connection may have
	// open at once (nginx's default), and with them the targets' connections it holds.
	maxConcurrentStreams = 128
)

// Server is the data plane. Create it with New, bind with Listen, run with Serve and stop
// with Shutdown. All methods are safe for concurrent use.
type Server struct {
	cfg       Config
	log       *zap.Logger
	totals    *stats.Totals
	tables    TableSource
	accessLog *zap.Logger
	trusted   []netip.Prefix

	// bodyBound is Config.RequestBuffer with its default applied; 0 holds no body
	// (holdBody, bodybuf.go).
	bodyBound int64
	// bounds are the bounds over all clients: requests in flight, held bodies
	// (bounds.go).
	bounds serverBounds
	// up holds the targets' connections, for every exchange (exchange.go).
	up        *targetPools
	tlsConfig *tls.Config
	handler   *handler

	httpSrv, httpsSrv *http.Server
	// hoHTTP and hoHTTPS feed httpSrv and httpsSrv the connections the fast HTTP/1.1
	// path hands off (h1serve.go); conns tracks the connections it serves itself.
	hoHTTP, hoHTTPS *handoffListener
	conns           connSet
	// parker holds idle HTTP/1.1 and HTTP/2 connections without a goroutine (h1idle.go),
	// plain HTTP/1.1 ones as sleepers (h1sleep_linux.go); nil where nothing parks. Serve
	// sets it before it accepts anything.
	parker *park.Parker
	// parkCrowd: with more goroutines than this, idle connections park after
	// h1ParkSoon (h1serve.go); tests lower it.
	parkCrowd int
	// ownH2 serves HTTP/2 with proxy/internal/h2 (unless a test chose net/http's, Config.stdH2);
	// h2 tracks those connections (h2serve.go).
	ownH2 bool
	h2    h2Set
	// h1Off hands every connection to net/http at once (Config.h1Off; tests only).
	h1Off bool
	h3    h3Server // HTTP/3 on UDP (http3.go)
	// hsCerts carries the certificate chosen in a TCP handshake from getCertificate to
	// the connection (keyed by the raw net.Conn; removed when the handshake ends).
	hsCerts sync.Map
	// hsLoggedAt and hsUnlogged rate-limit the TLS handshake failure lines (errors.go).
	hsLoggedAt, hsUnlogged atomic.Int64
	// fdLoggedAt and fdUnlogged rate-limit the lines about dials that found no
	// descriptor (errors.go).
	fdLoggedAt, fdUnlogged atomic.Int64
	// penalties are the client addresses refused at accept for abuse; the gates
	// rate-limit the lines about penalties and refusals (penalize.go).
	penalties                        *penalty.Table
	tarpit                           *tarpit
	abuseLoggedAt, abuseUnlogged     atomic.Int64
	refusedLoggedAt, refusedUnlogged atomic.Int64
	stapler                          *stapler // OCSP staples for the table's certificates (ocsp.go)
	// clients are the per-address budgets and each address's live connections
	// (budgets.go); budgetLoggedAt and budgetUnlogged rate-limit the refusal lines.
	clients                        *clients.Table
	budgetLoggedAt, budgetUnlogged atomic.Int64
	quicRefused                    atomic.Pointer[quicRefusal] // the last refused QUIC attempt (budgets.go)
	// balancers are Config.ProxyProtocolFrom, masked; ppLoggedAt and ppUnlogged
	// rate-limit the lines about refused PROXY headers (balancer.go).
	balancers              []netip.Prefix
	ppLoggedAt, ppUnlogged atomic.Int64

	mu              sync.Mutex
	httpLn, httpsLn net.Listener
	httpsPort       string // ":port" to append in redirects, "" for 443
	serving         bool
	shut            bool

	ready    atomic.Bool
	draining atomic.Bool
	tunnels  tunnelSet

	shutOnce sync.Once
	shutDone chan struct{} // closed when the first Shutdown returns
}

// New checks cfg, applies defaults and builds a Server; it binds nothing.
func New(cfg Config) (*Server, error) {
	var errs []error
	if cfg.Tables == nil {
		errs = append(errs, errors.New("the Tables source is required"))
	}
	if cfg.HTTPAddr == "" && cfg.HTTPSAddr == "" {
		errs = append(errs, errors.New("at least one of HTTPAddr and HTTPSAddr must be set"))
	}
	if cfg.MaxHeaderBytes < 0 {
		errs = append(errs, errors.New("MaxHeaderBytes must not be negative"))
	}
	if cfg.HTTP2MaxStreamsPerConn < 0 || cfg.HTTP2MaxStreamsPerConn > 1<<30 {
		errs = append(errs, errors.New("HTTP2MaxStreamsPerConn must be from 0 to 1<<30"))
	}
	for _, p := range cfg.ProxyProtocolFrom {
		if !p.IsValid() {
			errs = append(errs, errors.New("ProxyProtocolFrom holds an invalid prefix"))
			break
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(append([]error{ErrInvalidConfig}, errs...)...)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.DialTimeout, defaultDialTimeout)
	def(&cfg.ResponseHeaderTimeout, defaultResponseHeaderTimeout)
	def(&cfg.ReadHeaderTimeout, defaultReadHeaderTimeout)
	def(&cfg.IdleTimeout, defaultIdleTimeout)
	def(&cfg.ClientBodyTimeout, defaultClientBodyTimeout)
	def(&cfg.ClientSendTimeout, defaultClientSendTimeout)
	def(&cfg.TunnelIdleTimeout, defaultTunnelIdleTimeout)
	def(&cfg.ProxyProtocolTimeout, defaultProxyProtocolTimeout)
	if cfg.MaxHeaderBytes == 0 {
		cfg.MaxHeaderBytes = defaultMaxHeaderBytes
	}
	s := &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		totals:    cfg.Totals,
		tables:    cfg.Tables,
		accessLog: cfg.AccessLog,
		trusted:   cfg.TrustedProxies,
		balancers: maskedPrefixes(cfg.ProxyProtocolFrom),
		ownH2:     !cfg.stdH2,
		h1Off:     cfg.h1Off,
		bodyBound: max(cfg.RequestBuffer, 0),
		parkCrowd: h1ParkCrowd,
	}
	s.bounds.init(cfg)
	if cfg.RequestBuffer == 0 {
		s.bodyBound = defaultRequestBuffer
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if s.totals == nil {
		s.totals = new(stats.Totals)
	}
	s.tunnels.m = make(map[*tunnel]struct{})
	s.penalties = newPenaltyTable()
	s.clients = newClientTable(cfg)
	s.tarpit = newTarpit()
	s.shutDone = make(chan struct{})
	s.up = newTargetPools(cfg)
	s.stapler = newStapler(cfg.Tables, s.log.Named("ocsp"))
	s.tlsConfig = s.newTLSConfig()
	s.handler = &handler{s: s}
	if cfg.HTTPAddr != "" {
		s.httpSrv = s.newHTTPServer()
	}
	if cfg.HTTPSAddr != "" {
		s.httpsSrv = s.newHTTPServer()
	}
	s.newHTTP3Server()
	return s, nil
}

func (s *Server) newHTTPServer() *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	// Both listeners hand net/http connections that are not *tls.Conn (the TLS listener
	// terminates TLS itself so that it can count plaintext bytes), so HTTP/2 is served
	// through the prior-knowledge path on both: over TLS the client negotiated "h2" by
	// ALPN and then sends the same preface.
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		ConnState:         s.connState,
		ConnContext:       connContext,
		ErrorLog:          mustStdLogAt(s.log.Named("http"), zapcore.DebugLevel),
		Protocols:         &p,
		// What one connection may hold is bounded: 128 streams, each with a target
		// connection at most, and 4 MiB of request body received but not yet forwarded
		// for all its streams together (1 MiB per stream, enough window for fast
		// uploads; the buffers fill only with what the client sends, and a stalled body
		// fails after ClientBodyTimeout). A stream whose client stops taking data is
		// reset after ClientSendTimeout (forward.go), a connection whose socket stops
		// taking data is closed after it (WriteByteTimeout).
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          maxConcurrentStreams,
			MaxReceiveBufferPerConnection: 4<<20 - 1,
			MaxReceiveBufferPerStream:     1 << 20,
			SendPingTimeout:               30 * time.Second,
			PingTimeout:                   15 * time.Second,
			WriteByteTimeout:              s.cfg.ClientSendTimeout,
		},
	}
}

// Listen binds the configured listeners, so that bind errors surface before Serve.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shut {
		return ErrClosed
	}
	if s.httpLn != nil || s.httpsLn != nil {
		return nil
	}
	var httpLn, httpsLn net.Listener
	var udp net.PacketConn
	var err error
	if s.cfg.HTTPAddr != "" {
		if httpLn, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
			return err
		}
	}
	if s.cfg.HTTPSAddr != "" {
		if httpsLn, udp, err = s.listenHTTPS(); err != nil {
			if httpLn != nil {
				httpLn.Close()
			}
			return err
		}
		if ap, perr := netip.ParseAddrPort(httpsLn.Addr().String()); perr == nil && ap.Port() != 443 {
			s.httpsPort = ":" + strconv.Itoa(int(ap.Port()))
		}
		if p := s.cfg.PublicHTTPSPort; p > 0 {
			s.httpsPort = ""
			if p != 443 {
				s.httpsPort = ":" + strconv.Itoa(p)
			}
		}
	}
	if httpLn != nil {
		s.httpLn = &plainListener{Listener: httpLn, s: s}
		s.hoHTTP = newHandoffListener(httpLn.Addr())
	}
	if httpsLn != nil {
		s.httpsLn = &tlsListener{Listener: httpsLn, s: s}
		s.hoHTTPS = newHandoffListener(httpsLn.Addr())
	}
	s.setHTTP3Conn(udp)
	return nil
}

// Addrs returns the bound addresses (nil for a disabled or not yet bound listener).
func (s *Server) Addrs() (httpAddr, httpsAddr net.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.httpLn != nil {
		httpAddr = s.httpLn.Addr()
	}
	if s.httpsLn != nil {
		httpsAddr = s.httpsLn.Addr()
	}
	return httpAddr, httpsAddr
}

// Ready reports whether the listeners are serving and no shutdown has begun.
func (s *Server) Ready() bool { return s.ready.Load() }

// Serve serves on the bound listeners until Shutdown (then it returns nil once Shutdown
// has finished) or until a listener fails (then it closes everything and returns that
// error). Cancelling ctx closes everything at once, without draining. Every goroutine it
// starts has ended when it returns.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	if s.shut {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.httpLn == nil && s.httpsLn == nil {
		s.mu.Unlock()
		return ErrNotListening
	}
	if s.serving {
		s.mu.Unlock()
		return errors.New("proxy: Serve called twice")
	}
	s.serving = true
	type pair struct {
		srv *http.Server
		ln  net.Listener
		ho  *handoffListener
	}
	var pairs []pair
	if s.httpLn != nil {
		pairs = append(pairs, pair{s.httpSrv, s.httpLn, s.hoHTTP})
	}
	if s.httpsLn != nil {
		pairs = append(pairs, pair{s.httpsSrv, s.httpsLn, s.hoHTTPS})
	}
	udp := s.h3.pc
	tlsOn := s.httpsLn != nil
	if park.CanPark && (s.httpLn != nil || s.httpsLn != nil) && s.cfg.IdleTimeout > h1ParkAfter {
		pk, err := s.newParker()
		if err != nil {
			s.log.Warn("idle connections will not park", zap.Error(err))
		} else {
			s.parker = pk
			s.conns.wg.Go(pk.Run)
		}
	}
	s.mu.Unlock()

	errc := make(chan error, len(pairs)+1)
	var wg sync.WaitGroup
	for _, p := range pairs {
		// Connections start on the fast HTTP/1.1 path (acceptLoop); net/http serves
		// those it hands off.
		wg.Go(func() {
			if err := s.acceptLoop(p.ln, p.ho); err != nil {
				errc <- err
				s.closeNow() // one listener failing stops the other
			}
		})
		wg.Go(func() {
			if err := serveHandoffs(p.srv, p.ho); err != nil {
				errc <- err
				s.closeNow()
			}
		})
	}
	if udp != nil {
		wg.Go(func() {
			if err := s.serveHTTP3(udp); err != nil {
				errc <- err
				s.closeNow()
			}
		})
	}
	// The stapler and the idle upstream connections' janitor live as long as the
	// listeners do.
	stapleCtx, stopStapler := context.WithCancel(ctx)
	stapled := make(chan struct{})
	go func() {
		defer close(stapled)
		if tlsOn {
			s.stapler.run(stapleCtx)
		}
	}()
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		s.up.Janitor(stapleCtx, time.Now)
	}()
	// The tarpit holds refused connections of penalised clients (penalize.go).
	untarpitted := make(chan struct{})
	go func() {
		defer close(untarpitted)
		s.tarpit.run(stapleCtx)
	}()
	// Idle tunnels are closed until the last tunnel ended (below).
	sweepCtx, stopSweep := context.WithCancel(ctx)
	sweptIdle := make(chan struct{})
	go func() {
		defer close(sweptIdle)
		s.tunnels.sweepIdle(sweepCtx, s.cfg.TunnelIdleTimeout, s.totals.TunnelClosedIdle)
	}()
	s.ready.Store(!s.draining.Load())
	stop := context.AfterFunc(ctx, s.closeNow)
	wg.Wait()
	stop()
	stopStapler()
	<-stapled
	<-swept
	<-untarpitted
	s.ready.Store(false)
	if ctx.Err() != nil {
		s.closeNow()
	}
	s.mu.Lock()
	shut := s.shut
	s.mu.Unlock()
	if shut && ctx.Err() == nil {
		<-s.shutDone // Serve owns the drain: return only when it is over
	}
	// Hijacked connections (WebSockets) outlive http.Server.Serve; their handler
	// goroutines are ours to wait for, and so are the fast path's connections, the
	// parker and the QUIC connection watchers. Nothing parks any more (the server
	// drained or closed everything), so the parker stops.
	if s.parker != nil {
		s.parker.Stop()
	}
	s.conns.wg.Wait()
	s.tunnels.wg.Wait()
	stopSweep()
	<-sweptIdle
	s.h3.conns.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// Shutdown stops accepting, asks open connections to finish (Connection: close for
// HTTP/1.1 after the current response, GOAWAY for HTTP/2 and HTTP/3), waits for in-flight requests
// and WebSocket tunnels until ctx is done, then closes whatever is left and returns
// ctx.Err(). It may be called without Serve, and more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	defer s.shutOnce.Do(func() { close(s.shutDone) })
	s.mu.Lock()
	s.shut = true
	s.mu.Unlock()
	s.draining.Store(true)
	s.ready.Store(false)
	s.tunnels.refuseNew()
	s.closeTCPListeners() // no new connections; the fast path's loops end
	s.h2.shutdown()       // GOAWAY on the own HTTP/2 server's connections
	var wg sync.WaitGroup
	for _, srv := range []*http.Server{s.httpSrv, s.httpsSrv} {
		if srv != nil {
			wg.Go(func() { _ = srv.Shutdown(ctx) })
		}
	}
	wg.Go(func() { s.shutdownH1(ctx) })
	wg.Go(func() { s.shutdownHTTP3(ctx) })
	wg.Wait()
	s.closeListeners()
	if err := s.tunnels.wait(ctx); err != nil || ctx.Err() != nil {
		s.closeNow()
		return ctx.Err()
	}
	s.up.CloseIdle()
	return nil
}

// closeNow closes listeners, every client connection and every tunnel at once.
func (s *Server) closeNow() {
	s.draining.Store(true)
	s.ready.Store(false)
	for _, srv := range []*http.Server{s.httpSrv, s.httpsSrv} {
		if srv != nil {
			_ = srv.Close()
		}
	}
	s.closeHTTP3()
	s.closeListeners()
	s.conns.closeAll()
	s.endSleepers()
	s.tunnels.closeAll()
	s.up.CloseIdle()
}

func (s *Server) closeListeners() {
	s.closeTCPListeners()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopHTTP3()
}

func (s *Server) closeTCPListeners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ln := range []net.Listener{s.httpLn, s.httpsLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// shutdownH1 drains the fast path's connections: idle ones close now, busy ones after
// their response (which says Connection: close); when ctx ends first, all close.
func (s *Server) shutdownH1(ctx context.Context) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for s.closeIdleH1() > 0 {
		select {
		case <-ctx.Done():
			s.conns.closeAll()
			s.endSleepers()
			return
		case <-t.C:
		}
	}
}

// closeIdleH1 closes the fast path's idle connections, sleeping ones too
// (h1sleep_linux.go), and reports how many of its connections are left.
func (s *Server) closeIdleH1() int {
	n := s.conns.closeIdle()
	s.endSleepers()
	return n
}

// mustStdLogAt adapts l to the *log.Logger net/http wants, at level lvl: the server's own
// complaints (TLS handshake errors, bad requests) are client noise, not operator news.
func mustStdLogAt(l *zap.Logger, lvl zapcore.Level) *log.Logger {
	std, err := zap.NewStdLogAt(l, lvl)
	if err != nil {
		return zap.NewStdLog(l)
	}
	return std
}
