package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
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
