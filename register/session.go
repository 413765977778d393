package register

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/serve-zone/ingress/env"
	"github.com/serve-zone/ingress/internal/redact"
	"github.com/serve-zone/ingress/relay"
)

// Tables is where the session applies route tables: routetable.Store satisfies it.
type Tables interface {
	// ApplyJSON decodes, validates and applies one IClusterIngressRouteTable. A table that
	// is not newer than the applied one is ignored (an error the session only logs at debug
	// level); an invalid one is refused, reported and remembered by its revision.
	ApplyJSON(raw json.RawMessage) error
	// Applied returns the applied revision, ok false when none is.
	Applied() (rev int64, ok bool)
	// WantsRevision reports whether a table of revision rev is worth a pull: newer than
	// the applied one and than every revision refused so far.
	WantsRevision(rev int64) bool
}

// Statistics answers getClusterTrafficStatistics: stats.Registry satisfies it. A
// *stats.QueryError is answered as request-invalid with its violations.
type Statistics interface {
	QueryRaw(request json.RawMessage) (json.RawMessage, error)
}

// Config is what a Session needs. Zero durations take the contract's values.
type Config struct {
	Env          env.Config
	Version      string   // the ingress's semantic version
	Capabilities []string // sorted, unique; nil states nothing
	Tables       Tables
	Stats        Statistics
	Relay        relay.Options // transport options (TLS roots, timeouts)
	Logger       *zap.Logger

	// RepullInterval is the periodic pull while registered; 0 means 5 minutes.
	RepullInterval time.Duration
	// Now and Wait are the clock; nil means the wall clock. Wait returns early with the
	// ctx's error.
	Now  func() time.Time
	Wait func(ctx context.Context, d time.Duration) error
	// Jitter returns a uniform float64 in [0,1); nil means math/rand/v2.
	Jitter func() float64
}

// Session is the state machine of one ingress's relationship with its relay. Run is
// called once; State and Collectors are safe for concurrent use.
type Session struct {
	cfg Config
	log *zap.Logger
	m   *metrics
	// scrub is the bearer's scrubber (env.Bearer.Scrubber) followed by redact.PrivateKeys.
	// No string the relay sent reaches a log line at info level or above, an error text or
	// a metric: they carry validated values (a refusal's reason, numbers) and the text's
	// fingerprint. The text itself is logged at debug level only, and scrubbed even there,
	// since a relay may echo the registration, or the private keys of the tables it sends,
	// in any of them. The relay peer gets it as relay.Options.Redact.
	scrub func(string) string

	state      atomic.Int32
	waitUntil  atomic.Int64 // unix nanos while state is StateWaiting
	notBefore  time.Time    // no registration before this (refusals); owned by Run
	failures   int          // consecutive "other" failures; owned by Run
	protoFails int          // consecutive protocol refusals; owned by Run

	hintMu  sync.Mutex
	hinted  int64 // highest hinted revision not yet pulled for, -1 for none
	pullReq chan struct{}
	// askReq carries RequestPull's requests (an operator's SIGHUP): a pull whatever the
	// revisions known.
	askReq chan struct{}
}

// New returns a session; nothing runs until Run.
func New(cfg Config) *Session {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.RepullInterval <= 0 {
		cfg.RepullInterval = 5 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Wait == nil {
		cfg.Wait = sleep
	}
	if cfg.Jitter == nil {
		cfg.Jitter = rand.Float64
	}
	if cfg.Relay.Logger == nil {
		cfg.Relay.Logger = cfg.Logger.Named("relay")
	}
	scrub := redact.Chain(cfg.Env.Bearer.Scrubber()) // the bearer, then any private key
	if redact := cfg.Relay.Redact; redact != nil {
		cfg.Relay.Redact = func(v string) string { return scrub(redact(v)) }
	} else {
		cfg.Relay.Redact = scrub
	}
	s := &Session{cfg: cfg, log: cfg.Logger, scrub: scrub, hinted: -1, pullReq: make(chan struct{}, 1), askReq: make(chan struct{}, 1)}
	s.m = newMetrics(s)
	return s
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run connects, registers and serves the session until ctx ends. It reconnects after every
// lost connection and returns ctx's error.
func (s *Session) Run(ctx context.Context) error {
	first := true
	for ctx.Err() == nil {
		if !first {
			s.m.reconnects.Inc()
		}
		first = false
		s.setState(StateConnecting)
		peer, err := relay.Dial(ctx, s.cfg.Env.RelayOrigin, s.cfg.Relay)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			s.log.Warn("relay connection failed", zap.String("origin", s.cfg.Env.RelayOrigin), s.relayError(err))
			s.backoffOther(ctx, "connect")
			continue
		}
		s.log.Info("relay connected", zap.String("origin", s.cfg.Env.RelayOrigin))
		if s.serveConnection(ctx, peer) && ctx.Err() == nil {
			// A relay that accepts and then drops at once must not be hammered: the
			// backoff was reset by the acceptance, so this wait is short (under 1 s).
			s.backoffOther(ctx, "connection lost")
		}
	}
	s.setState(StateStopped)
	return ctx.Err()
}

// serveConnection runs one connection: its reader, the registration attempts and, once
// accepted, the puller. It returns when the connection is lost or ctx ends, after every
// goroutine it started has returned. It reports whether the registration was accepted.
func (s *Session) serveConnection(ctx context.Context, peer *relay.Peer) bool {
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		_ = peer.Close()
		wg.Wait()
	}()
	peer.Handle(MethodRouteTableChange, s.handleHint)
	peer.Handle(MethodStatistics, s.handleStatistics)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cancel()
		if err := peer.Run(cctx); err != nil && cctx.Err() == nil {
			s.log.Warn("relay connection lost", s.relayError(err))
		}
	}()

	acc, ok := s.registerLoop(cctx, peer)
	if !ok {
		return false
	}
	s.setState(StateRegistered)
	relayRev := zap.String("relayRevision", "none yet")
	if acc.hasRevision {
		relayRev = zap.Int64("relayRevision", acc.revision)
	}
	s.log.Info("registered with the relay", relayRev, zap.Int64("protocolVersion", acc.useVersion))
	if acc.hasRevision {
		s.noteRevision(acc.revision)
	}
	s.pullLoop(cctx, peer)
	return true
}

// registerLoop registers on peer until accepted (true) or the connection or ctx ends.
func (s *Session) registerLoop(ctx context.Context, peer *relay.Peer) (accepted, bool) {
	for {
		if wait := s.notBefore.Sub(s.cfg.Now()); wait > 0 {
			s.setWaiting(s.notBefore)
			if s.cfg.Wait(ctx, wait) != nil {
				return accepted{}, false
			}
		}
		select {
		case <-peer.Done():
			return accepted{}, false
		default:
		}
		s.setState(StateRegistering)
		acc, err := s.register(ctx, peer)
		if err == nil {
			s.failures, s.protoFails = 0, 0
			return acc, true
		}
		if ctx.Err() != nil {
			return accepted{}, false
		}
		s.judge(ctx, err)
		if errors.Is(err, relay.ErrClosed) {
			return accepted{}, false
		}
	}
}

// judge sets the wait before the next registration after err.
func (s *Session) judge(ctx context.Context, err error) {
	var re *relay.RemoteError
	if errors.As(err, &re) {
		if r, ok := readRefusal(re.Data); ok {
			// r.Reason is one of RefusalReasons: the label and the line hold no relay text.
			wait := time.Duration(r.RetryAfterMs) * time.Millisecond
			wait += time.Duration(s.cfg.Jitter() * 0.1 * float64(wait))
			s.notBefore = s.cfg.Now().Add(wait)
			s.m.refusals.WithLabelValues(r.Reason).Inc()
			s.log.Warn("registration refused",
				zap.String("reason", r.Reason), zap.Int64("retryAfterMs", r.RetryAfterMs), zap.Duration("wait", wait))
			return
		}
		if offer, ok := readProtocolRefusal(re.Data); ok {
			wait := min(30*time.Second<<min(s.protoFails, 4), 5*time.Minute)
			s.protoFails++
			s.notBefore = s.cfg.Now().Add(wait)
			s.m.refusals.WithLabelValues("protocol-refused").Inc()
			// The offer's versions are numbers; its name is the relay's text, logged as it
			// is only when it is the protocol's own name.
			offer.Name = s.known("relayOffer", offer.Name, ProtocolName)
			s.log.Error("protocol refused by the relay",
				zap.Stringer("ownOffer", OwnOffer), zap.Stringer("relayOffer", offer), zap.Duration("wait", wait))
			return
		}
	}
	s.m.refusals.WithLabelValues("other").Inc()
	wait := s.otherWait()
	s.notBefore = s.cfg.Now().Add(wait)
	fields := []zap.Field{s.relayError(err), zap.Duration("wait", wait)}
	if re != nil {
		// An error answer that is no usable refusal: its code and reason say what the
		// relay meant when they are values the contract names; any other value is
		// "unknown" with its fingerprint.
		if code := re.Code(); code != "" {
			fields = append(fields, s.knownText("code", code, knownCodes...))
		}
		if reason, ok := remoteReason(re.Data); ok {
			fields = append(fields, s.knownText("reason", reason, RefusalReasons...))
		}
	}
	s.log.Warn("registration failed", fields...)
}

// knownCodes are the error codes of contract §2 and §4 a relay's error answer may carry.
var knownCodes = []string{"cluster-ingress-registration-refused", "protocol-refused", "request-invalid"}

// relayError is the "error" log field for an error from the relay peer (Dial, Run, Call)
// or from judging the relay's answer. Their texts hold no text the relay chose (relay's
// errors and the session's decoding errors name it by its fingerprint, see
// redact.OpaqueError); what they leave out goes to a debug line, scrubbed.
func (s *Session) relayError(err error) zap.Field {
	var re *relay.RemoteError
	if raw, ok := redact.Raw(err); ok {
		s.debugText("error", raw)
	} else if errors.As(err, &re) {
		s.debugScrubbed("error", re.Fingerprint(), re.Text) // Text is scrubbed already
	}
	return zap.String("error", err.Error())
}

// knownText is the log field for a string the relay chose that should be one of known:
// the string when it is, else "unknown (<fingerprint>)" (the string, scrubbed, goes to a
// debug line).
func (s *Session) knownText(key, v string, known ...string) zap.Field {
	return zap.String(key, s.known(key, v, known...))
}

// known returns v when it is one of known, else "unknown (<fingerprint>)", logging v
// (scrubbed) at debug level under the key.
func (s *Session) known(key, v string, known ...string) string {
	if slices.Contains(known, v) {
		return v
	}
	return "unknown (" + s.debugText(key, v) + ")"
}

// debugText logs v, a text the relay chose, at debug level only and scrubbed, and returns
// its fingerprint, which the lines at higher levels carry in its place.
func (s *Session) debugText(key, v string) string {
	fp := redact.Fingerprint(v)
	if s.log.Core().Enabled(zapcore.DebugLevel) {
		s.debugScrubbed(key, fp, s.scrub(v))
	}
	return fp
}

// debugScrubbed logs text, a scrubbed text the relay chose, at debug level under its
// fingerprint fp.
func (s *Session) debugScrubbed(key, fp, text string) {
	if ce := s.log.Check(zapcore.DebugLevel, "relay-sent text"); ce != nil {
		ce.Write(zap.String("field", key), zap.String("fingerprint", fp), zap.String("text", text))
	}
}

// scrubAll scrubs each of list (violations that may quote the relay's request) into a new
// slice: they go back to the relay, not into a log line.
func (s *Session) scrubAll(list []string) []string {
	out := make([]string, len(list))
	for i, v := range list {
		out[i] = s.scrub(v)
	}
	return out
}

// otherWait is the full-jitter exponential backoff: uniform in [0, min(60 s, 1 s·2^n)].
func (s *Session) otherWait() time.Duration {
	ceiling := min(time.Second<<min(s.failures, 6), time.Minute)
	s.failures++
	return time.Duration(s.cfg.Jitter() * float64(ceiling))
}

// backoffOther waits after a failure outside a registration (a failed dial).
func (s *Session) backoffOther(ctx context.Context, what string) {
	wait := s.otherWait()
	until := s.cfg.Now().Add(wait)
	if until.After(s.notBefore) {
		s.notBefore = until
	}
	s.setWaiting(until)
	s.log.Debug("backing off", zap.String("after", what), zap.Duration("wait", wait))
	_ = s.cfg.Wait(ctx, wait)
}

func (s *Session) register(ctx context.Context, peer *relay.Peer) (accepted, error) {
	body := registration{
		Bearer:       s.cfg.Env.Bearer.Reveal(),
		Version:      s.cfg.Version,
		NodeID:       s.cfg.Env.NodeID,
		Capabilities: s.cfg.Capabilities,
		Protocol:     OwnOffer,
	}
	s.m.registrations.Inc()
	raw, err := peer.Call(ctx, MethodRegister, body)
	if err != nil {
		return accepted{}, err
	}
	acc, err := decodeAccepted(raw)
	// The violations name the relay's keys: the error counts them by fingerprint.
	return acc, redact.Opaque("the relay's acceptance breaks the contract", err)
}
