package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/serve-zone/ingress/internal/testwait"
)

func echo(side string) HandlerFunc {
	return func(_ context.Context, req json.RawMessage) (any, error) {
		var in struct{ N int }
		if err := json.Unmarshal(req, &in); err != nil {
			return nil, RequestInvalid([]string{"the value must be an object"})
		}
		return map[string]any{"n": in.N, "side": side}, nil
	}
}

func TestCallBothWaysConcurrently(t *testing.T) {
	pr := newPair(t, fastOpts(), fastOpts(),
		func(p *Peer) { p.Handle("echo", echo("server")) },
		func(p *Peer) { p.Handle("echo", echo("client")) })
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		for _, c := range []struct {
			from *Peer
			want string
		}{{pr.client, "server"}, {pr.server, "client"}} {
			wg.Go(func() {
				raw, err := c.from.Call(context.Background(), "echo", map[string]int{"n": i})
				if err != nil {
					errs <- err
					return
				}
				var out struct {
					N    int
					Side string
				}
				if err := json.Unmarshal(raw, &out); err != nil || out.N != i || out.Side != c.want {
					errs <- fmt.Errorf("call %d answered %s", i, raw)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestHandlerAnswers(t *testing.T) {
	refusal := json.RawMessage(`{"code":"cluster-ingress-registration-refused","reason":"conflict","retryAfterMs":1000}`)
	pr := newPair(t, fastOpts(), fastOpts(), func(p *Peer) {
		p.Handle("remote", func(context.Context, json.RawMessage) (any, error) {
			return nil, &RemoteError{Text: "cluster ingress registration refused", Data: refusal}
		})
		p.Handle("remoteNoData", func(context.Context, json.RawMessage) (any, error) {
			return nil, &RemoteError{Text: "plain"}
		})
		p.Handle("wrapped", func(context.Context, json.RawMessage) (any, error) {
			return nil, fmt.Errorf("context: %w", RequestInvalid([]string{"a must be b"}))
		})
		p.Handle("internal", func(context.Context, json.RawMessage) (any, error) {
			return nil, errors.New("secret detail at /etc/key")
		})
		p.Handle("panics", func(context.Context, json.RawMessage) (any, error) { panic("secret detail") })
		p.Handle("nilResponse", func(context.Context, json.RawMessage) (any, error) { return nil, nil })
		p.Handle("unencodable", func(context.Context, json.RawMessage) (any, error) { return func() {}, nil })
		p.Handle("noMethod", func(context.Context, json.RawMessage) (any, error) { return nil, ErrNoMethod })
	}, nil)
	tests := []struct {
		method   string
		wantText string
		wantData string
		wantResp string
	}{
		{"remote", "cluster ingress registration refused", string(refusal), ""},
		{"remoteNoData", "plain", `{}`, ""},
		{"wrapped", "request invalid", `{"code":"request-invalid","errors":["a must be b"]}`, ""},
		{"internal", "internal error", `{}`, ""},
		{"panics", "internal error", `{}`, ""},
		{"unencodable", "internal error", `{}`, ""},
		{"nilResponse", "", "", `{}`},
		{"noMethod", noMethodText, `{}`, ""},
		{"unknownMethod", "There is no available method for this call on the server side", `{}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.method, func(t *testing.T) {
			raw, err := pr.client.Call(context.Background(), tc.method, map[string]any{})
			if tc.wantResp != "" {
				if err != nil {
					t.Fatalf("Call: %v", err)
				}
				jsonEqual(t, "response", raw, tc.wantResp)
				return
			}
			var re *RemoteError
			if !errors.As(err, &re) {
				t.Fatalf("Call error = %v, want *RemoteError", err)
			}
			if re.Text != tc.wantText {
				t.Fatalf("text = %q, want %q", re.Text, tc.wantText)
			}
			jsonEqual(t, "data", re.Data, tc.wantData)
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("error leaks handler detail: %v", err)
			}
			if tc.wantText == noMethodText && !errors.Is(err, ErrNoMethod) {
				t.Fatalf("errors.Is(err, ErrNoMethod) = false")
			}
		})
	}
	var re *RemoteError
	_, err := pr.client.Call(context.Background(), "remote", nil)
	if !errors.As(err, &re) || re.Code() != "cluster-ingress-registration-refused" {
		t.Fatalf("Code() of %v is not the refusal code", err)
	}
}

func TestRetryResendsWithNewCorrelationAfterWait(t *testing.T) {
	const wait = 80 * time.Millisecond
	type seen struct {
		at time.Time
	}
	var mu sync.Mutex
	var calls []seen
	co := fastOpts()
	co.CallTimeout = 40 * time.Millisecond // shorter than the wait: the wait must not count
	var ids []string
	var idsMu sync.Mutex
	so := fastOpts()
	so.OnRequest = func(env Envelope) { // record correlation ids as the server reads them
		idsMu.Lock()
		ids = append(ids, env.Correlation.ID)
		idsMu.Unlock()
	}
	pr := newPair(t, so, co, func(p *Peer) {
		p.Handle("flaky", func(_ context.Context, req json.RawMessage) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, seen{time.Now()})
			if len(calls) == 1 {
				return nil, RetryLater(wait, "not-ready")
			}
			return json.RawMessage(req), nil
		})
	}, nil)
	raw, err := pr.client.Call(context.Background(), "flaky", map[string]int{"x": 1})
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	jsonEqual(t, "response", raw, `{"x":1}`)
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 {
		t.Fatalf("handler ran %d times, want 2", len(calls))
	}
	if gap := calls[1].at.Sub(calls[0].at); gap < wait {
		t.Fatalf("resent after %s, want at least %s", gap, wait)
	}
	idsMu.Lock()
	defer idsMu.Unlock()
	if len(ids) != 2 || ids[0] == ids[1] {
		t.Fatalf("correlation ids %v: want two different ids", ids)
	}
}

func TestPerAttemptTimeout(t *testing.T) {
	co := fastOpts()
	co.CallTimeout = 50 * time.Millisecond
	release := make(chan struct{})
	pr := newPair(t, fastOpts(), co, func(p *Peer) {
		p.Handle("slow", func(ctx context.Context, _ json.RawMessage) (any, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		})
	}, nil)
	defer close(release)
	start := time.Now()
	_, err := pr.client.Call(context.Background(), "slow", nil)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("timed out after %s", d)
	}
	// The peer still works after a timed-out call.
	pr.server.Handle("fast", func(context.Context, json.RawMessage) (any, error) { return nil, nil })
	if _, err := pr.client.Call(context.Background(), "fast", nil); err != nil {
		t.Fatalf("Call after timeout: %v", err)
	}
}

func TestOverallDeadlineIncludesRetryWaits(t *testing.T) {
	co := fastOpts()
	co.CallDeadline = 250 * time.Millisecond
	var n atomic.Int32
	pr := newPair(t, fastOpts(), co, func(p *Peer) {
		p.Handle("never", func(context.Context, json.RawMessage) (any, error) {
			n.Add(1)
			return nil, RetryLater(40*time.Millisecond, "busy")
		})
	}, nil)
	start := time.Now()
	_, err := pr.client.Call(context.Background(), "never", nil)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("gave up after %s", d)
	}
	if n.Load() < 2 {
		t.Fatalf("only %d attempts before the deadline", n.Load())
	}
	// A retry wait that cannot end before the deadline fails at once.
	pr.server.Handle("later", func(context.Context, json.RawMessage) (any, error) {
		return nil, RetryLater(time.Hour, "much later")
	})
	start = time.Now()
	if _, err := pr.client.Call(context.Background(), "later", nil); !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("waited %s for a hopeless retry", d)
	}
}

func TestCallerContextAndClose(t *testing.T) {
	entered := make(chan struct{}, 2)
	pr := newPair(t, fastOpts(), fastOpts(), func(p *Peer) {
		p.Handle("block", func(ctx context.Context, _ json.RawMessage) (any, error) {
			entered <- struct{}{}
			<-ctx.Done()
			return nil, nil
		})
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := pr.client.Call(ctx, "block", nil); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want the caller's deadline", err)
	}
	<-entered // the first call reached the server
	errc := make(chan error, 1)
	go func() {
		_, err := pr.client.Call(context.Background(), "block", nil)
		errc <- err
	}()
	select { // the second call is pending at the server when the client closes
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the second call never reached the server")
	}
	pr.client.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("pending call err = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pending call not failed by Close")
	}
	if _, err := pr.client.Call(context.Background(), "block", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v, want ErrClosed", err)
	}
	if err := waitErr(t, pr.clientErr); !errors.Is(err, ErrClosed) {
		t.Fatalf("client Run = %v, want ErrClosed", err)
	}
	// The server notices the closing handshake.
	select {
	case <-pr.server.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server peer did not notice the close")
	}
}

func TestRunStopsWithContext(t *testing.T) {
	url := rawServer(t, func(ctx context.Context, c *websocket.Conn) {
		_, _, _ = c.Read(ctx) // answers the closing handshake
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := Dial(ctx, url, fastOpts())
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.Run(runCtx) }()
	testwait.Until(t, 5*time.Second, "Run to start", p.running.Load) // stop a running peer
	stop()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop with its context")
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed after Run returned")
	}
	if err := p.Run(context.Background()); err == nil {
		t.Fatal("second Run returned nil")
	}
}

func TestBusyHandlersAnswerRetryNotDeadlock(t *testing.T) {
	release := make(chan struct{})
	var running atomic.Int32
	so := fastOpts()
	core, logs := observer.New(zapcore.DebugLevel)
	so.Logger = zap.New(core)
	pr := newPair(t, so, fastOpts(), func(p *Peer) {
		p.Handle("hold", func(ctx context.Context, _ json.RawMessage) (any, error) {
			running.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		})
	}, nil)
	const n = MaxConcurrentHandlers + 6
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			if _, err := pr.client.Call(context.Background(), "hold", nil); err != nil {
				errs <- err
			}
		})
	}
	// Every call beyond the bound is answered "retry" (and logged so) instead of run. A
	// handler's slot is taken before its goroutine counts itself, so the wait is for
	// both: the retries asked and the handlers counted.
	testwait.Until(t, 5*time.Second, "the calls beyond the bound to be asked to retry", func() bool {
		return logs.FilterMessage("relay handlers busy; asking for a retry").Len() >= n-MaxConcurrentHandlers &&
			running.Load() >= MaxConcurrentHandlers
	})
	if got := running.Load(); got != MaxConcurrentHandlers {
		t.Fatalf("%d handlers running, want the bound %d", got, MaxConcurrentHandlers)
	}
	// The reader is not stuck: a call the other way still gets its answer.
	pr.client.Handle("hello", func(context.Context, json.RawMessage) (any, error) { return nil, nil })
	if _, err := pr.server.Call(context.Background(), "hello", nil); err != nil {
		t.Fatalf("call while handlers are busy: %v", err)
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := running.Load(); got != n {
		t.Fatalf("handler ran %d times, want %d", got, n)
	}
}
