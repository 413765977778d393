package relay

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// A server Peer answers in the byte shapes of the contract's examples.
func TestAnswersMatchContractExamples(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := Accept(w, r, fastOpts())
		if err != nil {
			return
		}
		p.Handle("pushClusterIngressRouteTableChanged", func(context.Context, json.RawMessage) (any, error) {
			return struct{}{}, nil
		})
		p.Handle("getClusterTrafficStatistics", func(context.Context, json.RawMessage) (any, error) {
			return nil, RequestInvalid([]string{
				"fromDayUtc must be an existing UTC calendar day",
				"limit must be an integer from 1 to 1000",
			})
		})
		p.Handle("getClusterIngressRouteTable", func(context.Context, json.RawMessage) (any, error) {
			return json.RawMessage(`{"table":null}`), nil
		})
		_ = p.Run(r.Context())
	}))
	defer srv.Close()
	c := rawClient(t, srv.URL)
	tests := []struct{ request, answer string }{
		{"route-table-changed.json", "route-table-changed-answer.json"},
		{"get-route-table-request.json", "get-route-table-none.json"},
		{"", "request-invalid.json"}, // its request: the answer with phase request and no error
	}
	for _, tc := range tests {
		t.Run(tc.answer, func(t *testing.T) {
			want := example(t, tc.answer)
			var req []byte
			if tc.request != "" {
				req = example(t, tc.request)
			} else {
				var m map[string]any
				_ = json.Unmarshal(want, &m)
				delete(m, "error")
				m["correlation"].(map[string]any)["phase"] = "request"
				req, _ = json.Marshal(m)
			}
			writeFrame(t, c, websocket.MessageText, string(req))
			jsonEqual(t, "answer", readFrame(t, c), want)
		})
	}
}

func TestFrameEncodingShape(t *testing.T) {
	env := Envelope{
		Method:      "registerClusterIngress",
		Request:     json.RawMessage(`{"a":1}`),
		Correlation: Correlation{ID: "c-1", Phase: PhaseResponse},
		Error:       &ErrorBody{Text: "t<&>"},
	}
	b, err := env.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"method":"registerClusterIngress","request":{"a":1},"response":null,"correlation":{"id":"c-1","phase":"response"},"error":{"text":"t<&>","data":{}}}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	env = Envelope{Method: "m", Correlation: Correlation{ID: "x", Phase: PhaseResponse}, Retry: &Retry{WaitForMs: 250, Reason: "busy"}}
	b, _ = env.Encode()
	want = `{"method":"m","request":null,"response":null,"correlation":{"id":"x","phase":"response"},"retry":{"waitForMs":250,"reason":"busy"}}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}

// Frames a Peer cannot use never stop it: requests with a usable id are answered with
// request invalid, the rest are dropped.
func TestMalformedFramesDoNotStopThePeer(t *testing.T) {
	frames := make(chan [2]string, 1) // what the raw side got back for the probe frames
	url := rawServer(t, func(ctx context.Context, c *websocket.Conn) {
		send := func(typ websocket.MessageType, s string) { _ = c.Write(ctx, typ, []byte(s)) }
		send(websocket.MessageText, `not json {`)
		send(websocket.MessageText, `[1,2,3]`)
		send(websocket.MessageText, `"a string"`)
		send(websocket.MessageText, `{"method":"x"}`)
		send(websocket.MessageText, `{"method":"x","request":{},"response":null,"correlation":{"id":"q1","phase":"sideways"}}`)
		send(websocket.MessageText, `{"method":"x","request":{},"response":{},"correlation":{"id":"unknown-id","phase":"response"}}`)
		send(websocket.MessageText, `{"method":"x","request":{},"response":null,"correlation":{"phase":"request"}}`)
		send(websocket.MessageBinary, `{"method":"hello","request":{},"response":null,"correlation":{"id":"bin","phase":"request"}}`)
		// A request with a usable id but a broken envelope: answered "request invalid".
		send(websocket.MessageText, `{"method":42,"response":null,"correlation":{"id":"bad-1","phase":"request"},"localData":{}}`)
		// A good request with extra envelope keys: answered normally.
		send(websocket.MessageText, `{"method":"hello","request":{"n":1},"response":null,"correlation":{"id":"good-1","phase":"request"},"localData":{"x":1},"serverData":null}`)
		var got [2]string
		for i := range 2 {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			got[i] = string(b)
		}
		frames <- got
		// Then answer the Peer's own calls: first with neither response nor error, then properly.
		for i := 0; ; i++ {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			env, _ := DecodeEnvelope(b)
			env.Correlation.Phase = PhaseResponse
			if i > 0 {
				env.Response = json.RawMessage(`{"ok":true}`)
			}
			out, _ := env.Encode()
			if i == 0 {
				out = []byte(`{"method":"` + env.Method + `","request":{},"correlation":{"id":"` + env.Correlation.ID + `","phase":"response"}}`)
			}
			send(websocket.MessageText, string(out))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := Dial(ctx, url, fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	p.Handle("hello", func(_ context.Context, req json.RawMessage) (any, error) { return json.RawMessage(req), nil })
	runErr := make(chan error, 1)
	go func() { runErr <- p.Run(context.Background()) }()
	defer func() { p.Close(); <-runErr }()

	var got [2]string
	select {
	case got = <-frames:
	case <-ctx.Done():
		t.Fatal("no answers")
	}
	// Answers are written by their own goroutines: order them by correlation id.
	if strings.Contains(got[0], "good-1") {
		got[0], got[1] = got[1], got[0]
	}
	jsonEqual(t, "answer to the broken request", got[0],
		`{"method":"","request":null,"response":null,"correlation":{"id":"bad-1","phase":"response"},`+
			`"error":{"text":"request invalid","data":{"code":"request-invalid","errors":["method must be a string","request is missing"]}}}`)
	jsonEqual(t, "answer to the good request", got[1],
		`{"method":"hello","request":{"n":1},"response":{"n":1},"correlation":{"id":"good-1","phase":"response"}}`)

	if _, err := p.Call(ctx, "m", nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("answer with neither response nor error: err = %v, want ErrMalformed", err)
	}
	raw, err := p.Call(ctx, "m", nil)
	if err != nil {
		t.Fatalf("call after malformed frames: %v", err)
	}
	jsonEqual(t, "response", raw, `{"ok":true}`)
	select {
	case <-p.Done():
		t.Fatal("peer closed by malformed frames")
	default:
	}
}

func TestDecodeEnvelope(t *testing.T) {
	tests := []struct {
		name    string
		frame   string
		wantErr string // substring; "" means valid
	}{
		{"request", `{"method":"m","request":{},"response":null,"correlation":{"id":"a","phase":"request"}}`, ""},
		{"answer with response", `{"method":"m","request":{},"response":{},"correlation":{"id":"a","phase":"response"}}`, ""},
		{"answer with error, no data", `{"method":"m","request":{},"response":null,"correlation":{"id":"a","phase":"response"},"error":{"text":"t"}}`, ""},
		{"answer with retry", `{"method":"m","request":{},"response":null,"correlation":{"id":"a","phase":"response"},"retry":{"waitForMs":10.5,"reason":"r"}}`, ""},
		{"answer with neither", `{"method":"m","request":{},"response":null,"correlation":{"id":"a","phase":"response"}}`, "an answer must carry response or error"},
		{"answer without response key", `{"method":"m","correlation":{"id":"a","phase":"response"}}`, "an answer must carry response or error"},
		{"error text not a string", `{"method":"m","response":null,"correlation":{"id":"a","phase":"response"},"error":{"text":1}}`, "error.text must be a string"},
		{"error not an object", `{"method":"m","response":null,"correlation":{"id":"a","phase":"response"},"error":"x"}`, "error must be an object"},
		{"negative retry", `{"method":"m","response":null,"correlation":{"id":"a","phase":"response"},"retry":{"waitForMs":-1,"reason":"r"}}`, "retry.waitForMs must be a non-negative number"},
		{"no method", `{"request":{},"correlation":{"id":"a","phase":"request"}}`, "method is missing"},
		{"no correlation", `{"method":"m","request":{}}`, "correlation is missing"},
		{"empty id", `{"method":"m","request":{},"correlation":{"id":"","phase":"request"}}`, "correlation.id must not be empty"},
		{"unknown phase", `{"method":"m","request":{},"correlation":{"id":"a","phase":"p"}}`, `correlation.phase must be "request" or "response"`},
		{"not an object", `[]`, "the message must be a JSON object"},
		{"not JSON", `{`, "the message must be a JSON object"},
		{"null", `null`, "the message must be a JSON object"},
		{"repeated key", `{"method":"m","request":{},"method":"n","correlation":{"id":"a","phase":"request"}}`, "method is repeated"},
		{"repeated nested key", `{"method":"m","request":{},"correlation":{"id":"a","phase":"request","id":"b"}}`, "correlation.id is repeated"},
		{"repeated key in a body", `{"method":"m","request":{"revision":1,"revision":2},"correlation":{"id":"a","phase":"request"}}`, "request.revision is repeated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, err := DecodeEnvelope([]byte(tc.frame))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if env.Error != nil && string(env.Error.Data) != "{}" {
					t.Fatalf("absent error.data read as %s, want {}", env.Error.Data)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func FuzzDecodeEnvelope(f *testing.F) {
	for _, name := range []string{
		"get-route-table-none.json", "get-route-table-request.json", "get-route-table-response.json",
		"register-accepted.json", "register-protocol-refused.json", "register-refused.json",
		"register-request.json", "request-invalid.json", "route-table-changed-answer.json",
		"route-table-changed.json", "route-table.json", "traffic-statistics-request.json",
		"traffic-statistics-response.json",
	} {
		f.Add(example(f, name))
	}
	f.Add([]byte(`{"method":"m","request":{},"response":null,"correlation":{"id":"a","phase":"response"},"retry":{"waitForMs":1e400,"reason":"r"}}`))
	f.Add([]byte(`{"method":"m","correlation":{"id":"a","phase":"response"},"error":{"text":"t","data":null}}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		env, err := DecodeEnvelope(frame)
		if err != nil {
			return
		}
		if env.Correlation.ID == "" {
			t.Fatal("valid envelope without a correlation id")
		}
		switch env.Correlation.Phase {
		case PhaseRequest:
		case PhaseResponse:
			if env.Response == nil && env.Error == nil && env.Retry == nil {
				t.Fatal("valid answer with neither response, error nor retry")
			}
		default:
			t.Fatalf("valid envelope with phase %q", env.Correlation.Phase)
		}
		// What decodes re-encodes to something that decodes to the same envelope.
		out, err := env.Encode()
		if err != nil {
			return // a body that is JSON but not re-encodable (e.g. huge numbers in data) is the peer's problem
		}
		again, err := DecodeEnvelope(out)
		if err != nil {
			t.Fatalf("re-encoded envelope does not decode: %v", err)
		}
		if again.Method != env.Method || again.Correlation != env.Correlation ||
			(again.Error == nil) != (env.Error == nil) || (again.Retry == nil) != (env.Retry == nil) {
			t.Fatal("re-encoded envelope differs")
		}
	})
}
