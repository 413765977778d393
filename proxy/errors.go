package proxy

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// This file is the one place that maps outcomes to client-visible statuses and backend
// failure kinds. Response bodies are fixed texts: they never name a target address.

// outcome classifies how a proxied request ended when no response from the target can be
// relayed.
type outcome uint8

const (
	outcomeConnect          outcome = iota // dial failed or timed out: 502, counted "connect"
	outcomeTimeout                         // no response header in time: 504, counted "request"
	outcomeRequest                         // reset or malformed response: 502, counted "request"
	outcomeHandshake                       // WebSocket upgrade broken or refused without response: 502, "handshake"
	outcomeClientGone                      // the client went away: nothing to answer, not a backend failure
	outcomeClientBody                      // reading the client's request body failed: 400, not a backend failure
	outcomeBodyTimeout                     // the request body stalled (Config.ClientBodyTimeout): 408, not a backend failure
	outcomeClientStalled                   // the client left or stopped taking its response (Config.ClientSendTimeout) mid-body: cut, recorded as 499, not a backend failure
	outcomeNoTable                         // no route table applied yet: 503 with Retry-After
	outcomeUnknownHost                     // Host matches no route: 404
	outcomeMethodNotAllowed                // CONNECT: this is not a forward proxy
	outcomeUnavailable                     // shutting down (no new tunnels): 503
	outcomeBadRequest                      // a malformed or ambiguous request head: 400, then the connection closes
	outcomeMisdirected                     // TLS: the connection's certificate does not cover the request's host: 421
	outcomeExpectation                     // an Expect other than 100-continue: 417 (RFC 9110 §10.1.1), as net/http answers it
	outcomeRequestBudget                   // the client's address has its budget of requests in flight (budgets.go): 503 with Retry-After: 1 (HTTP/2: REFUSED_STREAM)
	outcomeTunnelBudget                    // the client's address has its budget of open tunnels: 503 with Retry-After: 1
	outcomeDescriptors                     // dialling the target failed for want of a descriptor of our own (EMFILE, ENFILE): 503 with Retry-After: 1, not a backend failure
	numOutcomes
)

// status returns the HTTP status answered for o (0 for outcomes that answer nothing).
func (o outcome) status() int {
	switch o {
	case outcomeConnect, outcomeRequest, outcomeHandshake:
		return http.StatusBadGateway
	case outcomeTimeout:
		return http.StatusGatewayTimeout
	case outcomeClientBody, outcomeBadRequest:
		return http.StatusBadRequest
	case outcomeMisdirected:
		return http.StatusMisdirectedRequest
	case outcomeExpectation:
		return http.StatusExpectationFailed
	case outcomeBodyTimeout:
		return http.StatusRequestTimeout
	case outcomeNoTable, outcomeUnavailable, outcomeRequestBudget, outcomeTunnelBudget, outcomeDescriptors:
		return http.StatusServiceUnavailable
	case outcomeUnknownHost:
		return http.StatusNotFound
	case outcomeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	}
	return 0
}

// failure returns the backend failure kind o counts as, if any.
func (o outcome) failure() (stats.FailureKind, bool) {
	switch o {
	case outcomeConnect:
		return stats.FailureConnect, true
	case outcomeTimeout, outcomeRequest:
		return stats.FailureRequest, true
	case outcomeHandshake:
		return stats.FailureHandshake, true
	}
	return 0, false
}

// dialError marks an error of the shared transport's DialContext: the request was not
// sent, so it may go to another target whatever its method.
type dialError struct{ err error }

func (e *dialError) Error() string { return "dial target: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// classifyUpstream maps an error of the exchange with a target: a dial failure (our own
// want of descriptors apart: no fault of the target's), a timeout awaiting the answer,
// or any other failure of the request (the fast path's client-gone check included).
func classifyUpstream(err error) outcome {
	if err == errClientGone {
		return outcomeClientGone
	}
	var de *dialError
	if errors.As(err, &de) {
		if errors.Is(de.err, syscall.EMFILE) || errors.Is(de.err, syscall.ENFILE) {
			return outcomeDescriptors
		}
		return outcomeConnect
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return outcomeTimeout
	}
	return outcomeRequest
}

// failed records o's backend failure on target b of route e, once on the route and once
// in the totals, and says why in the log: one warn line with the hostname, the target's
// lease and address, the failure kind and err's text. Lines are rate-limited per target
// (failureLogEvery): a dead target cannot flood the log, and the next line written says
// how many failures went unlogged in between. Outcomes that are not backend failures
// are neither counted nor logged here.
func (s *Server) failed(o outcome, e *routetable.Entry, b *routetable.Backend, err error) {
	k, ok := o.failure()
	if !ok {
		return
	}
	e.Stats.BackendFailure(k)
	s.totals.BackendFailure(k)
	if b == nil || !s.log.Core().Enabled(zapcore.WarnLevel) {
		return
	}
	if ok, unlogged := allowLog(&b.State.LoggedAt, &b.State.Unlogged, failureLogEvery); ok {
		s.log.Warn("backend failure",
			zap.String("host", e.Hostname),
			zap.String("lease", b.LeaseID),
			zap.String("target", b.Addr),
			zap.String("kind", k.String()),
			zap.String("error", errText(err, o)),
			zap.Int64("unlogged", unlogged))
	}
}

// shortOfDescriptors counts and logs (rate-limited, with the cause) a request that could
// not be sent because the ingress had no descriptor for its target's connection: the
// operator's limit (--max-conns-per-client, the process's RLIMIT_NOFILE) is what to
// look at, not the target, which is neither marked down nor charged a failure.
func (s *Server) shortOfDescriptors(e *routetable.Entry, b *routetable.Backend, err error) {
	s.totals.Refusal(stats.RefusalDescriptors)
	if ok, unlogged := allowLog(&s.fdLoggedAt, &s.fdUnlogged, failureLogEvery); ok {
		s.log.Error("out of file descriptors: a request could not be sent to its target",
			zap.String("host", e.Hostname),
			zap.String("target", b.Addr),
			zap.String("error", err.Error()),
			zap.Int64("unlogged", unlogged))
	}
}

// failureLogEvery is the least time between two failure lines about one target, and
// between two TLS handshake failure lines.
const failureLogEvery = 5 * time.Second

// allowLog reports whether a line may be written now under the gate (at, unlogged): at
// most one per every. A refused line is counted; an allowed one takes the count.
func allowLog(at, unlogged *atomic.Int64, every time.Duration) (bool, int64) {
	now := time.Now().UnixNano()
	last := at.Load()
	if now-last < int64(every) || !at.CompareAndSwap(last, now) {
		unlogged.Add(1)
		return false, 0
	}
	return true, unlogged.Swap(0)
}

// errText is err's text for a log line or the access log, or what o stands for when
// there is no error value.
func errText(err error, o outcome) string {
	if err != nil {
		return err.Error()
	}
	switch o {
	case outcomeHandshake:
		return "target refused the WebSocket upgrade"
	case outcomeTimeout:
		return "timeout"
	}
	return "failed"
}

// handshakeFailed logs a failed TLS handshake at debug level (clients and scanners cause
// them, not operators), rate-limited server-wide like backend failures.
func (s *Server) handshakeFailed(remote net.Addr, sni string, err error) {
	if !s.log.Core().Enabled(zapcore.DebugLevel) {
		return
	}
	if err == nil {
		err = errors.New("connection ended during the handshake")
	}
	if ok, unlogged := allowLog(&s.hsLoggedAt, &s.hsUnlogged, failureLogEvery); ok {
		s.log.Debug("TLS handshake failed",
			zap.String("client", remote.String()),
			zap.String("sni", sni),
			zap.String("error", err.Error()),
			zap.Int64("unlogged", unlogged))
	}
}

// fixedAnswer is the whole of a fixed response, decided here once for every
// front-end: the list-field front-ends write them with writeFixed (relay.go), the fast
// path appends them to its buffer (tcpConn.answer), each adding only what its connection
// needs (Date, Alt-Svc, Connection).
type fixedAnswer struct {
	code   int
	fields []fixedField
	body   []byte
}

// fixedField is one field of a fixed answer; val is a one-element slice, ready for an
// http.Header without allocating.
type fixedField struct {
	name  string
	lower string // the name as HTTP/2 and HTTP/3 write it
	val   []string
}

// fixedAnswers holds the answer of every outcome that has one.
var fixedAnswers = func() (t [numOutcomes]*fixedAnswer) {
	for o := range t {
		code := outcome(o).status()
		if code == 0 {
			continue
		}
		text := strconv.Itoa(code) + " " + http.StatusText(code) + "\n"
		field := func(name, val string) fixedField {
			return fixedField{name: name, lower: strings.ToLower(name), val: []string{val}}
		}
		fa := &fixedAnswer{code: code, body: []byte(text), fields: []fixedField{
			field("Content-Type", "text/plain; charset=utf-8"),
			field("X-Content-Type-Options", "nosniff"),
			field("Content-Length", strconv.Itoa(len(text))),
		}}
		switch outcome(o) {
		case outcomeNoTable, outcomeUnavailable:
			fa.fields = append(fa.fields, field("Retry-After", "5"))
		case outcomeRequestBudget, outcomeTunnelBudget, outcomeDescriptors:
			// The client's own requests or tunnels end soon, descriptors are given back
			// all the time: try again in a second.
			fa.fields = append(fa.fields, field("Retry-After", "1"))
		case outcomeMethodNotAllowed:
			fa.fields = append(fa.fields, field("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE"))
		}
		t[o] = fa
	}
	return t
}()

// appendLocation appends the target of the redirect to HTTPS (RedirectHTTP): the same
// host without its port, the public HTTPS port (httpsPort, ":port" or empty), the same
// path and query.
func appendLocation[T string | []byte](b []byte, host T, httpsPort string, target T) []byte {
	if i := lastColon(host); i >= 0 {
		host = host[:i]
	}
	b = append(b, "https://"...)
	b = append(b, host...)
	b = append(b, httpsPort...)
	return append(b, target...)
}

// lastColon is the index of the colon before a port in a Host value, or -1 (an IPv6
// literal's colons are inside brackets).
func lastColon[T string | []byte](host T) int {
	for i := len(host) - 1; i >= 0; i-- {
		switch host[i] {
		case ':':
			return i
		case ']':
			return -1
		}
	}
	return -1
}
