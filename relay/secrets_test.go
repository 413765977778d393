package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/serve-zone/ingress/internal/redact"
)

// The bearer rides in registration requests and in their echoes; it must reach no log line
// and no error text, whatever happens to the frame.
func TestBearerNeverLogged(t *testing.T) {
	const bearer = "s3cr3t-BEARER-value-0x7e"
	core, logs := observer.New(zapcore.DebugLevel)
	o := fastOpts()
	o.Logger = zap.New(core)
	frame := bytes.ReplaceAll(example(t, "register-request.json"), []byte("<the bearer>"), []byte(bearer))
	var reg Envelope
	if err := json.Unmarshal(frame, &reg); err != nil {
		t.Fatal(err)
	}
	pr := newPair(t, o, o, func(p *Peer) {
		p.Handle("registerClusterIngress", func(_ context.Context, req json.RawMessage) (any, error) {
			if !bytes.Contains(req, []byte(bearer)) {
				return nil, fmt.Errorf("bearer missing")
			}
			return nil, fmt.Errorf("failed for bearer %s", bearer) // a careless handler
		})
	}, nil)
	var callErrs []string
	for _, method := range []string{"registerClusterIngress", "unknownMethod"} {
		_, err := pr.client.Call(context.Background(), method, reg.Request)
		callErrs = append(callErrs, fmt.Sprint(err))
	}
	// Broken frames holding the bearer, straight onto the server peer's socket.
	c := rawClient(t, servePeer(t, o, nil))
	for _, s := range []string{
		`{"bearer":"` + bearer + `"`,
		`{"method":"registerClusterIngress","request":{"bearer":"` + bearer + `"},"correlation":{"id":"x","phase":"nope"}}`,
		`{"method":"registerClusterIngress","request":{"bearer":"` + bearer + `"},"correlation":{"id":"y","phase":"response"}}`,
		`{"method":7,"request":{"bearer":"` + bearer + `"},"correlation":{"id":"z","phase":"request"}}`,
	} {
		writeFrame(t, c, websocket.MessageText, s)
	}
	writeFrame(t, c, websocket.MessageBinary, bearer)
	readFrame(t, c) // the request-invalid answer to "z": all frames before it were read
	for _, e := range callErrs {
		if strings.Contains(e, bearer) {
			t.Fatalf("call error leaks the bearer: %s", e)
		}
	}
	if logs.Len() == 0 {
		t.Fatal("nothing logged: the test would prove nothing")
	}
	for _, entry := range logs.All() {
		line := entry.Message + fmt.Sprint(entry.ContextMap())
		if strings.Contains(line, bearer) {
			t.Fatalf("log line leaks the bearer: %s", line)
		}
	}
}

// No string the other side chose reaches a log line at info level or above, nor an error
// text: a relay that echoes the bearer in an error text, a method name, a correlation id or
// a close reason gets the string's fingerprint logged in its place; the string itself is
// logged at debug level only, passed through Options.Redact.
func TestPeerTextIsFingerprinted(t *testing.T) {
	const secret = "s3cr3t-echoed-BEARER"
	const marker = "[redacted]"
	core, logs := observer.New(zapcore.DebugLevel)
	o := fastOpts()
	o.Logger = zap.New(core)
	o.Redact = func(s string) string { return strings.ReplaceAll(s, secret, marker) }
	relayDone := make(chan error, 1)
	called := make(chan struct{}) // the Call returned: the close may come now
	url := rawServer(t, func(ctx context.Context, c *websocket.Conn) {
		relayDone <- func() error {
			send := func(env Envelope) error {
				b, err := env.Encode()
				if err == nil {
					err = c.Write(ctx, websocket.MessageText, b)
				}
				return err
			}
			_, b, err := c.Read(ctx)
			if err != nil {
				return err
			}
			req, err := DecodeEnvelope(b)
			if err != nil {
				return err
			}
			// The call is answered with an error text echoing the bearer; then come an
			// answer nobody waits for and a request for a method nobody serves, both
			// echoing it in their method and correlation id.
			for _, env := range []Envelope{
				{Method: req.Method, Request: req.Request, Correlation: Correlation{ID: req.Correlation.ID, Phase: PhaseResponse},
					Error: &ErrorBody{Text: "bearer " + secret + " refused"}},
				{Method: secret, Response: json.RawMessage(`{}`), Correlation: Correlation{ID: "answer-" + secret, Phase: PhaseResponse}},
				{Method: "m-" + secret, Request: json.RawMessage(`{}`), Correlation: Correlation{ID: "request-" + secret, Phase: PhaseRequest}},
			} {
				if err := send(env); err != nil {
					return err
				}
			}
			if _, _, err := c.Read(ctx); err != nil { // the no-method answer: every frame was read
				return err
			}
			select {
			case <-called:
			case <-ctx.Done():
				return ctx.Err()
			}
			_ = c.Close(websocket.StatusPolicyViolation, "bearer "+secret+" refused")
			return nil
		}()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := Dial(ctx, url, o)
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- p.Run(context.Background()) }()
	_, err = p.Call(ctx, "registerClusterIngress", map[string]string{"bearer": secret})
	close(called)
	var re *RemoteError
	if !errors.As(err, &re) || re.Text != "bearer "+marker+" refused" || strings.Contains(err.Error(), "bearer ") ||
		!strings.Contains(err.Error(), redact.Fingerprint("bearer "+secret+" refused")) {
		t.Fatalf("Call = %v, want a RemoteError whose Text holds the marker and whose Error only the text's fingerprint", err)
	}
	if err := <-relayDone; err != nil {
		t.Fatalf("relay side: %v", err)
	}
	waitErr(t, runDone) // "relay peer closed" is logged before Run returns

	fp := redact.Fingerprint
	want := map[string]map[string]string{
		"relay answer dropped: unknown correlation id": {"method": fp(secret), "correlationId": fp("answer-" + secret)},
		"relay request for an unknown method":          {"method": fp("m-" + secret), "correlationId": fp("request-" + secret)},
		"relay peer closed":                            {"error": "the peer closed the socket with status 1008"},
	}
	for msg, fields := range want {
		entries := logs.FilterMessage(msg).All()
		if len(entries) == 0 {
			t.Errorf("%q not logged", msg)
			continue
		}
		m := entries[0].ContextMap()
		for key, w := range fields {
			if got := fmt.Sprint(m[key]); !strings.Contains(got, w) {
				t.Errorf("%q logged %s = %q, want it to hold %q", msg, key, got, w)
			}
		}
	}
	// At debug level, each string is logged once more, scrubbed, under its fingerprint.
	debugTexts := map[string]string{}
	for _, e := range logs.FilterMessage("relay-sent text").All() {
		m := e.ContextMap()
		debugTexts[fmt.Sprint(m["fingerprint"])] = fmt.Sprint(m["text"])
	}
	for _, v := range []string{"answer-" + secret, "m-" + secret, "request-" + secret} {
		if got, w := debugTexts[fp(v)], strings.ReplaceAll(v, secret, marker); got != w {
			t.Errorf("debug text for %s = %q, want %q", fp(v), got, w)
		}
	}
	for _, entry := range logs.All() {
		line := entry.Message + fmt.Sprint(entry.ContextMap())
		if strings.Contains(line, secret) {
			t.Errorf("log line leaks the bearer: %s", line)
		}
		if entry.Level > zapcore.DebugLevel && strings.Contains(line, marker) {
			t.Errorf("a line above debug holds the relay's text: %s", line)
		}
	}
}
