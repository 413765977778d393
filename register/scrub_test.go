package register

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/serve-zone/ingress/env"
	"github.com/serve-zone/ingress/internal/redact"
	"github.com/serve-zone/ingress/relay"
	"github.com/serve-zone/ingress/routetable"
)

// A relay may echo the registration, and with it the bearer, anywhere: in an error text, a
// refusal reason, an offer, an unexpected key, a close reason, a method name or a
// correlation id, and in any encoding. These tests run a session against a relay that does
// each, and check that the line reporting it is still logged, with validated values and the
// text's fingerprint where the relay's text was, that no line above debug level holds any
// of the relay's text (not even scrubbed), and that no log line, field or error text sent
// back holds the bearer in any form.

const (
	echoFrag1 = "s3cr3t"
	echoFrag2 = "BEARER-value-0x7e"
	// echoSecret holds characters that JSON and Go quoting escape (and JSON's HTML
	// escaping), so an echo in an escaped form differs from the raw one.
	echoSecret = echoFrag1 + `"<&>\` + echoFrag2
	marker     = "[redacted]"
)

// leaks reports whether s holds the bearer in a form a reader could recover: raw,
// escaped or quoted (each keeps the plain fragments) or in base64.
func leaks(s string) bool {
	b64 := base64.RawStdEncoding.EncodeToString([]byte(echoSecret))
	return strings.Contains(s, echoFrag1) || strings.Contains(s, echoFrag2) ||
		strings.Contains(s, b64[:len(b64)-2]) // the last characters also hold the bytes after it
}

// notifyCore signals changed after every entry it writes, so a test can wait for a log
// line instead of sleeping.
type notifyCore struct {
	zapcore.Core
	changed chan struct{}
}

func (c notifyCore) With(f []zapcore.Field) zapcore.Core {
	return notifyCore{c.Core.With(f), c.changed}
}

func (c notifyCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c notifyCore) Write(e zapcore.Entry, f []zapcore.Field) error {
	err := c.Core.Write(e, f)
	select {
	case c.changed <- struct{}{}:
	default: // a signal is pending already
	}
	return err
}

type logWatch struct {
	logs    *observer.ObservedLogs
	changed chan struct{}
}

func newLogWatch() (*zap.Logger, *logWatch) {
	core, logs := observer.New(zapcore.DebugLevel)
	w := &logWatch{logs: logs, changed: make(chan struct{}, 1)}
	return zap.New(notifyCore{core, w.changed}), w
}

// waitFor returns the first entry logged with message msg, waiting until there is one.
func (w *logWatch) waitFor(t *testing.T, msg string) observer.LoggedEntry {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		if got := w.logs.FilterMessage(msg).All(); len(got) > 0 {
			return got[0]
		}
		select {
		case <-w.changed:
		case <-timeout.C:
			var seen []string
			for _, e := range w.logs.All() {
				seen = append(seen, e.Message)
			}
			t.Fatalf("%q not logged within 10 s; logged: %q", msg, seen)
		}
	}
}

// relayConn is one connection of the echoing relay, spoken with coder/websocket directly
// so that the relay can send anything. Its methods report false once the socket failed.
type relayConn struct {
	ctx context.Context
	c   *websocket.Conn
	n   int // 1 for the session's first connection
}

// read returns the next decodable envelope.
func (r *relayConn) read() (relay.Envelope, bool) {
	for {
		_, b, err := r.c.Read(r.ctx)
		if err != nil {
			return relay.Envelope{}, false
		}
		var env relay.Envelope
		if json.Unmarshal(b, &env) == nil {
			return env, true
		}
	}
}

// request returns the next request for method, skipping everything else.
func (r *relayConn) request(method string) (relay.Envelope, bool) {
	for {
		env, ok := r.read()
		if !ok || env.Correlation.Phase == relay.PhaseRequest && env.Method == method {
			return env, ok
		}
	}
}

func (r *relayConn) send(env relay.Envelope) bool {
	b, err := env.Encode()
	return err == nil && r.c.Write(r.ctx, websocket.MessageText, b) == nil
}

// answer answers req with response or, when e is not nil, with the error e.
func (r *relayConn) answer(req relay.Envelope, response string, e *relay.ErrorBody) bool {
	out := relay.Envelope{Method: req.Method, Request: req.Request, Error: e,
		Correlation: relay.Correlation{ID: req.Correlation.ID, Phase: relay.PhaseResponse}}
	if e == nil {
		out.Response = json.RawMessage(response)
	}
	return r.send(out)
}

// accept accepts the registration req naming revision ("null" or a number).
func (r *relayConn) accept(req relay.Envelope, revision string) bool {
	return r.answer(req, `{"accepted":true,"revision":`+revision+
		`,"protocol":{"name":"serve.zone/cluster-ingress","minVersion":1,"maxVersion":1}}`, nil)
}

// jsonString is s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// echoSession runs a session whose bearer is echoSecret against a relay that, on the
// session's first connection, reads the registration and hands it to first with the bearer
// as the relay decoded it; every other frame, and every later connection, it reads and
// ignores. When the test ends the session stops and no log line may hold the bearer.
func echoSession(t *testing.T, first func(r *relayConn, reg relay.Envelope, bearer string)) *logWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var handlers sync.WaitGroup
	var mu sync.Mutex
	conns := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c, err := websocket.Accept(w, req, nil)
		if err != nil {
			return
		}
		handlers.Add(1)
		defer handlers.Done()
		defer c.CloseNow()
		mu.Lock()
		conns++
		r := &relayConn{ctx: ctx, c: c, n: conns}
		mu.Unlock()
		if r.n == 1 {
			reg, ok := r.request(MethodRegister)
			var body struct {
				Bearer string `json:"bearer"`
			}
			if !ok || json.Unmarshal(reg.Request, &body) != nil {
				return
			}
			first(r, reg, body.Bearer)
		}
		for {
			if _, ok := r.read(); !ok {
				return
			}
		}
	}))
	t.Cleanup(func() {
		cancel()
		handlers.Wait()
		srv.Close()
	})

	log, w := newLogWatch()
	session := New(Config{
		Env:     env.Config{Bearer: env.NewBearer(echoSecret), RelayOrigin: srv.URL, NodeID: "node-1"},
		Version: "1.2.3",
		Tables:  routetable.NewStore(routetable.StoreOptions{Logger: log.Named("routetable")}),
		Logger:  log,
		Jitter:  func() float64 { return 0 },
	})
	t.Cleanup(func() {
		for _, e := range w.logs.All() {
			line := e.LoggerName + " " + e.Message + " " + fmt.Sprint(e.ContextMap())
			if leaks(line) {
				t.Errorf("a log line holds the bearer: %s", line)
			}
			if e.Level > zapcore.DebugLevel && (strings.Contains(line, marker) || strings.Contains(line, "[withheld")) {
				t.Errorf("a line above debug level holds the relay's text, scrubbed: %s", line)
			}
		}
	})
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- session.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("session did not stop within 10 s")
		}
	})
	return w
}

func TestRelayEchoesOfTheBearerAreFingerprinted(t *testing.T) {
	fp := redact.Fingerprint
	type want struct{ msg, key, contains string }
	const acceptedProtocol = `"protocol":{"name":"serve.zone/cluster-ingress","minVersion":1,"maxVersion":1}`
	cases := []struct {
		name  string
		relay func(r *relayConn, reg relay.Envelope, bearer string)
		want  []want
	}{{
		name: "refusal reason",
		relay: func(r *relayConn, reg relay.Envelope, b string) {
			r.answer(reg, "", &relay.ErrorBody{Text: "cluster ingress registration refused", Data: json.RawMessage(
				`{"code":"cluster-ingress-registration-refused","reason":` + jsonString("bearer-refused: "+b) + `,"retryAfterMs":1000}`)})
		},
		want: []want{{"registration failed", "reason", "unknown (" + fp(`bearer-refused: `+echoSecret) + ")"}},
	}, {
		name: "error text",
		relay: func(r *relayConn, reg relay.Envelope, b string) {
			r.answer(reg, "", &relay.ErrorBody{Text: "bearer " + b + " is not known"})
		},
		want: []want{{"registration failed", "error", "relay: remote error (text of " + fp("bearer "+echoSecret+" is not known") + ")"}},
	}, {
		name: "error text quoting the registration body",
		relay: func(r *relayConn, reg relay.Envelope, _ string) {
			r.answer(reg, "", &relay.ErrorBody{Text: string(reg.Request)}) // the bearer JSON-escaped
		},
		want: []want{{"registration failed", "error", "relay: remote error (text of "}},
	}, {
		name: "error text with the bearer in base64",
		relay: func(r *relayConn, reg relay.Envelope, b string) {
			r.answer(reg, "", &relay.ErrorBody{Text: "token " + base64.StdEncoding.EncodeToString([]byte(b))})
		},
		want: []want{{"registration failed", "error", "relay: remote error (text of 46 bytes"}},
	}, {
		name: "protocol refusal offer",
		relay: func(r *relayConn, reg relay.Envelope, b string) {
			r.answer(reg, "", &relay.ErrorBody{Text: "protocol refused", Data: json.RawMessage(
				`{"code":"protocol-refused","offer":{"name":` + jsonString(b) + `,"minVersion":2,"maxVersion":3}}`)})
		},
		want: []want{{"protocol refused by the relay", "relayOffer", "unknown (" + fp(echoSecret) + ") 2..3"}},
	}, {
		name: "unexpected key in the acceptance",
		relay: func(r *relayConn, reg relay.Envelope, b string) {
			r.answer(reg, `{"accepted":true,"revision":null,`+acceptedProtocol+`,`+jsonString(b)+`:true}`, nil)
		},
		want: []want{{"registration failed", "error", "the relay's acceptance breaks the contract ("}},
	}, {
		name: "close reason",
		relay: func(r *relayConn, _ relay.Envelope, b string) {
			_ = r.c.Close(websocket.StatusPolicyViolation, "bearer "+b+" refused")
		},
		want: []want{{"relay peer closed", "error", "the peer closed the socket with status 1008"}},
	}, {
		name: "method and correlation id",
		relay: func(r *relayConn, reg relay.Envelope, b string) {
			_ = r.accept(reg, "null") &&
				r.send(relay.Envelope{Method: b, Response: json.RawMessage(`{}`),
					Correlation: relay.Correlation{ID: b, Phase: relay.PhaseResponse}}) &&
				r.send(relay.Envelope{Method: "echo-" + b, Request: json.RawMessage(`{}`),
					Correlation: relay.Correlation{ID: "echo-" + b, Phase: relay.PhaseRequest}})
		},
		want: []want{
			{"relay answer dropped: unknown correlation id", "correlationId", fp(echoSecret)},
			{"relay answer dropped: unknown correlation id", "method", fp(echoSecret)},
			{"relay request for an unknown method", "method", fp("echo-" + echoSecret)},
			{"relay request for an unknown method", "correlationId", fp("echo-" + echoSecret)},
		},
	}, {
		name: "route table pull error text",
		relay: func(r *relayConn, reg relay.Envelope, b string) {
			if !r.accept(reg, "1") {
				return
			}
			if pull, ok := r.request(MethodGetRouteTable); ok {
				r.answer(pull, "", &relay.ErrorBody{Text: "no table for " + b})
			}
		},
		want: []want{{"route table pull failed", "error", "relay: remote error (text of " + fp("no table for "+echoSecret) + ")"}},
	}, {
		name: "unexpected key in the route table answer",
		relay: func(r *relayConn, reg relay.Envelope, b string) {
			if !r.accept(reg, "1") {
				return
			}
			if pull, ok := r.request(MethodGetRouteTable); ok {
				r.answer(pull, `{"table":null,`+jsonString(b)+`:1}`, nil)
			}
		},
		want: []want{{"route table answer malformed", "error", "the relay's route table answer breaks the contract ("}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := echoSession(t, tc.relay)
			for _, wt := range tc.want {
				e := w.waitFor(t, wt.msg)
				got := fmt.Sprint(e.ContextMap()[wt.key])
				if !strings.Contains(got, wt.contains) || leaks(got) {
					t.Errorf("%q logged %s = %q, want it to hold %q and not the bearer", wt.msg, wt.key, got, wt.contains)
				}
			}
		})
	}
}

// TestHintProblemsSentBackAreScrubbed: the violations the session answers a malformed hint
// with name the relay's keys; one echoing the bearer is named with the marker, so the
// relay's own logs of our answer hold no bearer either.
func TestHintProblemsSentBackAreScrubbed(t *testing.T) {
	answered := make(chan *relay.ErrorBody, 1)
	echoSession(t, func(r *relayConn, reg relay.Envelope, b string) {
		hint := relay.Envelope{Method: MethodRouteTableChange,
			Request:     json.RawMessage(`{"revision":1,` + jsonString(b) + `:1}`),
			Correlation: relay.Correlation{ID: "hint-1", Phase: relay.PhaseRequest}}
		if !r.accept(reg, "null") || !r.send(hint) {
			return
		}
		for {
			env, ok := r.read()
			if !ok {
				return
			}
			if env.Correlation.ID == "hint-1" && env.Correlation.Phase == relay.PhaseResponse {
				answered <- env.Error
				return
			}
		}
	})
	var e *relay.ErrorBody
	select {
	case e = <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the hint was not answered within 10 s")
	}
	if e == nil || e.Text != "request invalid" {
		t.Fatalf("hint answered %+v, want request invalid", e)
	}
	if data := string(e.Data); !strings.Contains(data, "request."+marker+" is not allowed") || leaks(data) {
		t.Fatalf("hint answered with %s, want the unexpected key named by the marker", data)
	}
}
