package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/serve-zone/ingress/internal/redact"
)

var errCallDeadline = errors.New("call deadline")

// Call sends request (any JSON-encodable value; a json.RawMessage is sent as it is, nil as
// {}) to the peer's method and returns the raw `response` body. An `error` answer is
// returned as a *RemoteError. A `retry` answer is honoured: after waitForMs the same request
// goes out again under a new correlation id. Each attempt waits at most CallTimeout for its
// answer (the retry wait is not counted) and the call as a whole, waits included, at most
// CallDeadline: both give an error wrapping ErrTimeout. A closed peer gives ErrClosed and
// an unusable answer ErrMalformed; when ctx ends, the error wraps ctx's error. Error texts
// never contain the request nor any text the peer chose (a RemoteError's Error names its
// text by its fingerprint), and a RemoteError's Text has passed through Options.Redact.
func (p *Peer) Call(ctx context.Context, method string, request any) (json.RawMessage, error) {
	body, err := encodeBody(request)
	if err != nil {
		return nil, fmt.Errorf("relay: call %s: encode request: %w", method, err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, p.opts.CallDeadline, errCallDeadline)
	defer cancel()
	for {
		ans, err := p.attempt(ctx, method, body)
		if err != nil {
			return nil, fmt.Errorf("relay: call %s: %w", method, err)
		}
		env := ans.env
		if ans.err != nil {
			return nil, fmt.Errorf("relay: call %s: %w", method, ans.err)
		}
		if env.Error != nil {
			return nil, &RemoteError{Text: p.opts.Redact(env.Error.Text), Data: env.Error.Data,
				fingerprint: redact.Fingerprint(env.Error.Text)}
		}
		if env.Retry != nil {
			wait := retryWait(env.Retry.WaitForMs)
			if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
				return nil, fmt.Errorf("relay: call %s: %w: retry wait %s passes the deadline", method, ErrTimeout, wait)
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				continue
			case <-p.done:
				t.Stop()
				return nil, fmt.Errorf("relay: call %s: %w", method, ErrClosed)
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("relay: call %s: %w", method, ctxError(ctx))
			}
		}
		return env.Response, nil
	}
}

// retryWait converts waitForMs (already judged finite and non-negative) to a duration,
// capped so the conversion cannot overflow.
func retryWait(ms float64) time.Duration {
	if ms > float64(math.MaxInt64/int64(time.Millisecond)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms * float64(time.Millisecond))
}

func ctxError(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), errCallDeadline) {
		return ErrTimeout
	}
	return ctx.Err()
}

// attempt sends one request under a fresh correlation id and waits for its answer.
func (p *Peer) attempt(ctx context.Context, method string, body json.RawMessage) (answer, error) {
	id := p.newID()
	ch := make(chan answer, 1)
	p.pendingMu.Lock()
	p.pending[id] = ch
	p.pendingMu.Unlock()
	defer func() {
		p.pendingMu.Lock()
		delete(p.pending, id)
		p.pendingMu.Unlock()
	}()
	select {
	case <-p.done:
		return answer{}, ErrClosed
	default:
	}
	t := time.NewTimer(p.opts.CallTimeout)
	defer t.Stop()
	env := Envelope{Method: method, Request: body, Correlation: Correlation{ID: id, Phase: PhaseRequest}}
	if err := p.write(&env); err != nil {
		return answer{}, err
	}
	select {
	case a := <-ch:
		return a, nil
	case <-t.C:
		return answer{}, fmt.Errorf("%w: no answer within %s", ErrTimeout, p.opts.CallTimeout)
	case <-p.done:
		return answer{}, ErrClosed
	case <-ctx.Done():
		return answer{}, ctxError(ctx)
	}
}
