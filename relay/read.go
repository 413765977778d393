package relay

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/serve-zone/ingress/internal/redact"
)

// answer is what a pending Call receives: the answer envelope, or why it was malformed.
type answer struct {
	env Envelope
	err error
}

// readLoop reads frames until the socket fails. No frame stops it: what cannot be used is
// answered (a request with a usable correlation id) or dropped with a log line.
func (p *Peer) readLoop() error {
	for {
		typ, frame, err := p.conn.Read(p.life)
		if err != nil {
			if errors.Is(err, websocket.ErrMessageTooBig) {
				p.log.Warn("relay message over the size limit; closing (1009)",
					zap.Int64("maxMessageBytes", p.opts.MaxMessageBytes))
			}
			return opaqueSocketError("read", err)
		}
		p.touch()
		if typ != websocket.MessageText {
			p.log.Warn("relay binary message ignored", zap.Int("bytes", len(frame)))
			continue
		}
		p.dispatch(frame)
	}
}

func (p *Peer) dispatch(frame []byte) {
	env, verr := decodeEnvelope(frame)
	switch env.Correlation.Phase {
	case PhaseResponse:
		p.deliver(env, verr.Err())
	case PhaseRequest:
		if verr.Len() > 0 {
			if env.Correlation.ID == "" {
				p.log.Warn("relay request dropped: unusable envelope", p.peerViolations(verr.List()))
				return
			}
			p.log.Warn("relay request invalid", p.methodField(env.Method),
				p.peerString("correlationId", env.Correlation.ID), p.peerViolations(verr.List()))
			p.answerAsync(env, nil, RequestInvalid(verr.List()))
			return
		}
		if h := p.opts.OnRequest; h != nil {
			h(env)
		}
		p.serve(env)
	default:
		p.log.Warn("relay message dropped: not an envelope", p.peerViolations(verr.List()))
	}
}

// deliver hands an answer to its pending Call.
func (p *Peer) deliver(env Envelope, malformed error) {
	p.pendingMu.Lock()
	ch, ok := p.pending[env.Correlation.ID]
	if ok {
		delete(p.pending, env.Correlation.ID)
	}
	p.pendingMu.Unlock()
	if !ok {
		p.log.Warn("relay answer dropped: unknown correlation id", p.methodField(env.Method),
			p.peerString("correlationId", env.Correlation.ID))
		return
	}
	if malformed != nil {
		p.log.Warn("relay answer malformed", p.methodField(env.Method),
			p.peerString("correlationId", env.Correlation.ID), p.peerError(malformed))
		// The violations name the peer's keys: the error says how many, not which.
		malformed = fmt.Errorf("%w: %w", ErrMalformed, redact.Opaque("the answer breaks the envelope's rules", malformed))
	}
	ch <- answer{env: env, err: malformed} // buffered 1 and removed from pending: never blocks
}

// serve runs the method's handler in a goroutine slot; with none free it answers with a
// retry envelope rather than stall the reader.
func (p *Peer) serve(env Envelope) {
	fn := p.handler(env.Method)
	if fn == nil {
		p.log.Info("relay request for an unknown method", p.methodField(env.Method),
			p.peerString("correlationId", env.Correlation.ID))
		p.answerAsync(env, nil, ErrNoMethod)
		return
	}
	select {
	case p.sem <- struct{}{}:
	default:
		p.log.Warn("relay handlers busy; asking for a retry", p.methodField(env.Method))
		p.answerAsync(env, nil, RetryLater(busyRetryWait, "busy"))
		return
	}
	p.handlerWG.Go(func() {
		defer func() { <-p.sem }()
		resp, err := p.runHandler(fn, env)
		p.answer(env, resp, err)
	})
}

// answerAsync answers from a handler goroutine so the reader never waits on a write.
func (p *Peer) answerAsync(env Envelope, resp any, err error) {
	p.handlerWG.Go(func() { p.answer(env, resp, err) })
}

func (p *Peer) runHandler(fn HandlerFunc, env Envelope) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			// The panic value may hold request data: log only that it happened.
			p.log.Error("relay handler panicked", p.methodField(env.Method),
				p.peerString("correlationId", env.Correlation.ID))
			resp, err = nil, errors.New("handler panicked")
		}
	}()
	return fn(p.life, env.Request)
}

// answer writes the answer to env: echoing method, request and correlation id.
func (p *Peer) answer(req Envelope, resp any, herr error) {
	out := Envelope{
		Method:      req.Method,
		Request:     req.Request,
		Correlation: Correlation{ID: req.Correlation.ID, Phase: PhaseResponse},
	}
	var remote *RemoteError
	var retry *RetryError
	switch {
	case herr == nil:
		body, err := encodeBody(resp)
		if err != nil {
			p.log.Error("relay handler response not encodable", p.methodField(req.Method),
				zap.String("errorType", fmt.Sprintf("%T", err)))
			out.Error = &ErrorBody{Text: internalErrorText}
		} else {
			out.Response = body
		}
	case errors.As(herr, &remote):
		out.Error = &ErrorBody{Text: remote.Text, Data: remote.data()}
	case errors.As(herr, &retry):
		out.Retry = &Retry{WaitForMs: float64(retry.Wait) / float64(time.Millisecond), Reason: retry.Reason}
	default:
		p.log.Warn("relay handler failed; answered internal error", p.methodField(req.Method),
			p.peerString("correlationId", req.Correlation.ID), zap.String("errorType", fmt.Sprintf("%T", herr)))
		out.Error = &ErrorBody{Text: internalErrorText}
	}
	if err := p.write(&out); err != nil && !errors.Is(err, ErrClosed) {
		p.log.Warn("relay answer not sent", p.methodField(req.Method), p.peerError(err))
	}
}

// encodeBody turns a request or response value into a raw body: a json.RawMessage is used
// as it is (after a validity check), nil is {}.
func encodeBody(v any) (json.RawMessage, error) {
	switch b := v.(type) {
	case nil:
		return json.RawMessage(`{}`), nil
	case json.RawMessage:
		if len(b) == 0 {
			return json.RawMessage(`{}`), nil
		}
		if !json.Valid(b) {
			return nil, errors.New("relay: raw body is not valid JSON")
		}
		return b, nil
	default:
		return json.Marshal(v)
	}
}
