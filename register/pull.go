package register

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/serve-zone/ingress/internal/redact"
	"github.com/serve-zone/ingress/relay"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// noteRevision records that the relay holds revision rev and asks for a pull when it is
// newer than the applied table and was not refused. Requests coalesce: however many
// arrive while a pull is in flight, at most one more pull follows.
func (s *Session) noteRevision(rev int64) {
	if !s.wants(rev) {
		return
	}
	s.hintMu.Lock()
	if rev > s.hinted {
		s.hinted = rev
	}
	s.hintMu.Unlock()
	select {
	case s.pullReq <- struct{}{}:
	default: // a pull is already pending: this one rides along
	}
}

func (s *Session) wants(rev int64) bool { return s.cfg.Tables.WantsRevision(rev) }

// RequestPull asks for one pull of the newest route table now, whatever revisions the
// session knows of (the ingress calls it on SIGHUP). It never blocks: requests made
// while one is pending coalesce, and one made while the session is not registered is
// served right after the next acceptance. The answer is applied under the usual rules
// (a table that is not newer is ignored).
func (s *Session) RequestPull() {
	select {
	case s.askReq <- struct{}{}:
	default:
	}
}

// handleHint answers pushClusterIngressRouteTableChanged at once. A hint that arrives
// before the registration is accepted is remembered: the pull request waits in pullReq
// until the puller runs.
func (s *Session) handleHint(_ context.Context, req json.RawMessage) (any, error) {
	rev, problems := decodeHint(req)
	if len(problems) > 0 {
		return nil, relay.RequestInvalid(s.scrubAll(problems)) // they name the relay's keys
	}
	s.m.hints.Inc()
	s.log.Debug("route table hint", zap.Int64("revision", rev))
	s.noteRevision(rev)
	return struct{}{}, nil
}

// pullLoop pulls on request (hints, and an acceptance naming a newer revision) and every RepullInterval, until ctx
// ends or the connection is lost. The periodic pull also covers hints that were lost.
func (s *Session) pullLoop(ctx context.Context, peer *relay.Peer) {
	tick := make(chan struct{}, 1)
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	go func() {
		defer close(done)
		for s.cfg.Wait(tctx, s.cfg.RepullInterval) == nil {
			select {
			case tick <- struct{}{}:
			default:
			}
		}
	}()

	// A pull that failed while a newer revision is known (a hint, an acceptance) is tried
	// again after pullRetryMin, doubling up to pullRetryMax, rather than waiting for the
	// next hint or the periodic pull: a relay that was slow or broken serves the newest
	// table soon after it answers again.
	var retry <-chan time.Time
	var retryWait time.Duration
	for {
		ok, pulled := true, false
		select {
		case <-ctx.Done():
			return
		case <-peer.Done():
			return
		case <-s.pullReq:
			// Hints that arrived during the last pull may name what it already applied.
			if s.wants(s.highestHint()) {
				ok, pulled = s.pull(ctx, peer, "newer revision"), true
			}
		case <-retry:
			retry = nil
			if s.wants(s.highestHint()) {
				ok, pulled = s.pull(ctx, peer, "retry after a failed pull"), true
			}
		case <-tick:
			ok, pulled = s.pull(ctx, peer, "periodic"), true
		case <-s.askReq:
			ok, pulled = s.pull(ctx, peer, "requested"), true
		}
		switch {
		case !pulled:
		case ok:
			retryWait, retry = 0, nil
		case retry == nil && s.wants(s.highestHint()) && ctx.Err() == nil:
			retryWait = min(max(2*retryWait, pullRetryMin), pullRetryMax)
			retry = time.After(retryWait)
		}
	}
}

// The waits before a failed pull is tried again.
const (
	pullRetryMin = time.Second
	pullRetryMax = 30 * time.Second
)

func (s *Session) highestHint() int64 {
	s.hintMu.Lock()
	defer s.hintMu.Unlock()
	return s.hinted
}

// pull asks for the newest table and applies it when it is newer. It reports false when
// the relay gave no usable answer (the call failed or the answer was malformed).
func (s *Session) pull(ctx context.Context, peer *relay.Peer, why string) bool {
	// Drain a pending request: this pull serves it.
	select {
	case <-s.pullReq:
	default:
	}
	var known *int64
	if rev, ok := s.cfg.Tables.Applied(); ok {
		known = &rev
	}
	s.m.pulls.Inc()
	raw, err := peer.Call(ctx, MethodGetRouteTable, struct {
		KnownRevision *int64 `json:"knownRevision"`
	}{known})
	if err != nil {
		if ctx.Err() == nil {
			s.m.pullFailures.Inc()
			s.log.Warn("route table pull failed", zap.String("reason", why), s.relayError(err))
		}
		return false
	}
	table, err := decodeTableAnswer(raw)
	if err != nil {
		err = redact.Opaque("the relay's route table answer breaks the contract", err)
		s.m.pullFailures.Inc()
		s.log.Warn("route table answer malformed", s.relayError(err))
		return false
	}
	if table == nil {
		s.log.Debug("the relay holds no route table yet", zap.String("reason", why))
		return true
	}
	err = s.cfg.Tables.ApplyJSON(table)
	switch {
	case err == nil:
		rev, _ := s.cfg.Tables.Applied()
		s.log.Info("route table applied", zap.Int64("revision", rev), zap.String("reason", why))
	case errors.Is(err, routetable.ErrStale):
		s.log.Debug("route table not newer; ignored", zap.String("reason", why))
	case errors.Is(err, routetable.ErrAlreadyRefused):
		// Reported when it was first refused; a re-pull that returns it again is discarded.
		s.log.Debug("route table refused before; discarded", zap.String("reason", why))
	default:
		// The store has logged every violation and remembered the revision.
		s.log.Warn("route table refused", zap.String("reason", why))
	}
	return true
}

// handleStatistics answers getClusterTrafficStatistics from the counters.
func (s *Session) handleStatistics(_ context.Context, req json.RawMessage) (any, error) {
	if s.cfg.Stats == nil {
		return nil, relay.ErrNoMethod
	}
	out, err := s.cfg.Stats.QueryRaw(req)
	if err != nil {
		var qe *stats.QueryError
		if errors.As(err, &qe) {
			return nil, relay.RequestInvalid(s.scrubAll(qe.Violations))
		}
		return nil, err
	}
	return out, nil
}
