package relay

import (
	"crypto/tls"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// Defaults from contract §2.
const (
	DefaultPingInterval    = 20 * time.Second
	DefaultIdleTimeout     = 45 * time.Second
	DefaultCallTimeout     = 30 * time.Second
	DefaultCallDeadline    = 2 * time.Minute
	DefaultMaxMessageBytes = 64 << 20
	// MaxConcurrentHandlers bounds the handler goroutines of one Peer. A request arriving
	// while all are busy is answered with a retry envelope (busyRetryWait) instead of
	// stalling the reader, which would also stall pongs and the answers to our own calls.
	MaxConcurrentHandlers = 64
	busyRetryWait         = 250 * time.Millisecond
	// closeGrace bounds the closing handshake; a peer that does not answer the close frame
	// in time gets its socket closed under it.
	closeGrace = 2 * time.Second
)

// Options configure a Peer. The zero value is the contract's settings; a zero or negative
// duration or size means its default.
type Options struct {
	PingInterval time.Duration // 0 -> 20s
	IdleTimeout  time.Duration // 0 -> 45s: no pong or message for this long closes the socket
	CallTimeout  time.Duration // 0 -> 30s per attempt; also bounds one frame's write
	CallDeadline time.Duration // 0 -> 2min in all, retry waits included
	// MaxMessageBytes bounds one incoming message (0 -> 64 MiB). A larger message makes
	// coder/websocket close the socket with status 1009 (message too big): Run returns and
	// the session reconnects. Nothing larger is ever buffered.
	MaxMessageBytes int64
	TLSConfig       *tls.Config // Dial only, for wss: RootCAs etc.; nil means system roots
	HTTPHeader      http.Header // Dial only: extra handshake headers
	Logger          *zap.Logger // nil means zap.NewNop()
	// OnRequest, if set, sees every well-formed incoming request (the envelope as decoded,
	// its body raw) before it is dispatched, in the reader goroutine: it must not block and
	// must not keep or log the body (it may hold the bearer). relaysim records calls with it.
	OnRequest func(Envelope)
	// Redact, if set, is applied to every string the other side chose before this package
	// writes it into a debug line (lines above debug level carry only its fingerprint) and
	// to the Text of a RemoteError that Call returns: the ingress passes its bearer
	// scrubber (env.Bearer.Scrubber). RemoteError.Data stays raw for its caller to decode.
	// Errors returned by Dial, Run and Call hold no text the peer chose: what they leave
	// out is reachable with redact.Raw, for a debug line through the same function. nil
	// leaves strings as they are.
	Redact func(string) string
}

func (o Options) withDefaults() Options {
	if o.PingInterval <= 0 {
		o.PingInterval = DefaultPingInterval
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.CallDeadline <= 0 {
		o.CallDeadline = DefaultCallDeadline
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Redact == nil {
		o.Redact = func(s string) string { return s }
	}
	return o
}
