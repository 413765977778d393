package relaysim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/relay"
)

// example reads a contract example; its placeholder bearer (which holds a space, so no
// valid bearer) is replaced by a valid one.
func example(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.ReplaceAll(b, []byte("<the bearer>"), []byte("the-bearer"))
}

func jsonEqual(t *testing.T, what string, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: got is not JSON: %v", what, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: want is not JSON: %v", what, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\n got %s\nwant %s", what, got, want)
	}
}

func start(t *testing.T) (*Server, string) {
	t.Helper()
	s := New(Options{})
	origin, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(origin, "http://127.0.0.1:") {
		t.Fatalf("origin %q", origin)
	}
	t.Cleanup(func() { s.Close() })
	return s, origin
}

// rawIngress dials with coder/websocket directly so tests see the relay's exact frames.
type rawIngress struct {
	t *testing.T
	c *websocket.Conn
}

func dialRaw(t *testing.T, origin string) *rawIngress {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, origin+relay.Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(-1)
	t.Cleanup(func() { c.CloseNow() })
	return &rawIngress{t, c}
}

// roundTrip sends frame and returns the answer.
func (r *rawIngress) roundTrip(frame []byte) []byte {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.c.Write(ctx, websocket.MessageText, frame); err != nil {
		r.t.Fatal(err)
	}
	_, b, err := r.c.Read(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

// regFrame is register-request.json with its body changed by edit.
func regFrame(t *testing.T, edit func(body map[string]any)) []byte {
	t.Helper()
	var env map[string]any
	if err := json.Unmarshal(example(t, "register-request.json"), &env); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(env["request"].(map[string]any))
	}
	b, _ := json.Marshal(env)
	return b
}

func TestRegistrationAnswersMatchExamples(t *testing.T) {
	s, origin := start(t)
	in := dialRaw(t, origin)
	req := example(t, "register-request.json")

	s.RefuseRegistrations(ReasonAssignmentNotRunning, 15000, 1)
	jsonEqual(t, "refused", in.roundTrip(req), example(t, "register-refused.json"))

	s.RefuseProtocol(Offer{Name: ProtocolName, MinVersion: 2, MaxVersion: 3}, 1)
	jsonEqual(t, "protocol refused", in.roundTrip(req), example(t, "register-protocol-refused.json"))

	s.SetTable(example(t, "route-table.json"), 7)
	jsonEqual(t, "accepted", in.roundTrip(req), example(t, "register-accepted.json"))

	s.SetTableNull()
	want := bytes.Replace(example(t, "register-accepted.json"), []byte(`"revision": 7`), []byte(`"revision": null`), 1)
	jsonEqual(t, "accepted without a table", in.roundTrip(req), want)
}

func TestRegistrationJudgement(t *testing.T) {
	s, origin := start(t)
	in := dialRaw(t, origin)
	invalid := func(reason string, ms int) []byte {
		b, _ := json.Marshal(map[string]any{"code": "cluster-ingress-registration-refused", "reason": reason, "retryAfterMs": ms})
		return b
	}
	protoRefused := []byte(`{"code":"protocol-refused","offer":{"name":"serve.zone/cluster-ingress","minVersion":1,"maxVersion":1}}`)
	tests := []struct {
		name     string
		edit     func(map[string]any)
		wantData []byte // nil: accepted
	}{
		{"as in the example", nil, nil},
		{"no capabilities", func(b map[string]any) { delete(b, "capabilities") }, nil},
		{"pre-release version", func(b map[string]any) { b["version"] = "1.2.3-rc.1" }, nil},
		{"offer 1..5", func(b map[string]any) { b["protocol"].(map[string]any)["maxVersion"] = 5 }, nil},
		{"missing bearer", func(b map[string]any) { delete(b, "bearer") }, invalid(ReasonRegistrationInvalid, 1000)},
		{"empty bearer", func(b map[string]any) { b["bearer"] = "" }, invalid(ReasonRegistrationInvalid, 1000)},
		{"bearer with a space", func(b map[string]any) { b["bearer"] = "a b" }, invalid(ReasonRegistrationInvalid, 1000)},
		{"extra key", func(b map[string]any) { b["extra"] = 1 }, invalid(ReasonRegistrationInvalid, 1000)},
		{"bad version", func(b map[string]any) { b["version"] = "v1.0" }, invalid(ReasonRegistrationInvalid, 1000)},
		{"bad nodeId", func(b map[string]any) { b["nodeId"] = "-node" }, invalid(ReasonRegistrationInvalid, 1000)},
		{"empty capabilities", func(b map[string]any) { b["capabilities"] = []string{} }, invalid(ReasonRegistrationInvalid, 1000)},
		{"unsorted capabilities", func(b map[string]any) { b["capabilities"] = []string{"http2", "http1"} }, invalid(ReasonRegistrationInvalid, 1000)},
		{"duplicate capabilities", func(b map[string]any) { b["capabilities"] = []string{"http1", "http1"} }, invalid(ReasonRegistrationInvalid, 1000)},
		{"unknown capability", func(b map[string]any) { b["capabilities"] = []string{"gopher"} }, invalid(ReasonRegistrationInvalid, 1000)},
		{"capabilities null", func(b map[string]any) { b["capabilities"] = nil }, invalid(ReasonRegistrationInvalid, 1000)},
		{"offer min > max", func(b map[string]any) { b["protocol"].(map[string]any)["minVersion"] = 3 }, invalid(ReasonRegistrationInvalid, 1000)},
		{"offer extra key", func(b map[string]any) { b["protocol"].(map[string]any)["x"] = 1 }, invalid(ReasonRegistrationInvalid, 1000)},
		{"offer 2..3", func(b map[string]any) {
			b["protocol"] = map[string]any{"name": ProtocolName, "minVersion": 2, "maxVersion": 3}
		}, protoRefused},
		{"other protocol name", func(b map[string]any) { b["protocol"].(map[string]any)["name"] = "other" }, protoRefused},
		{"protocol judged before the rest", func(b map[string]any) {
			b["protocol"].(map[string]any)["minVersion"] = 2
			b["protocol"].(map[string]any)["maxVersion"] = 2
			b["bearer"] = ""
		}, protoRefused},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ans relay.Envelope
			if err := json.Unmarshal(in.roundTrip(regFrame(t, tc.edit)), &ans); err != nil {
				t.Fatal(err)
			}
			if tc.wantData == nil {
				if ans.Error != nil || !bytes.Contains(ans.Response, []byte(`"accepted":true`)) {
					t.Fatalf("not accepted: error %+v, response %s", ans.Error, ans.Response)
				}
				return
			}
			if ans.Error == nil || !bytes.Equal(ans.Response, []byte("null")) {
				t.Fatalf("accepted, want refusal %s", tc.wantData)
			}
			jsonEqual(t, "error.data", ans.Error.Data, tc.wantData)
		})
	}

	// Knobs: bearer, error data, counted refusals.
	s.ExpectedBearer("right")
	var ans relay.Envelope
	_ = json.Unmarshal(in.roundTrip(regFrame(t, nil)), &ans)
	if ans.Error == nil {
		t.Fatal("wrong bearer accepted")
	}
	jsonEqual(t, "bearer refusal", ans.Error.Data, invalid(ReasonBearerRefused, 1000))
	ans = relay.Envelope{}
	_ = json.Unmarshal(in.roundTrip(regFrame(t, func(b map[string]any) { b["bearer"] = "right" })), &ans)
	if ans.Error != nil {
		t.Fatalf("right bearer refused: %+v", ans.Error)
	}
	s.ExpectedBearer("")
	s.SetRegisterErrorData(json.RawMessage(`{"code":"cluster-ingress-registration-refused","reason":"conflict","retryAfterMs":5}`), 2)
	for range 2 {
		ans = relay.Envelope{}
		_ = json.Unmarshal(in.roundTrip(regFrame(t, nil)), &ans)
		if ans.Error == nil {
			t.Fatal("error data knob not applied")
		}
		jsonEqual(t, "error data", ans.Error.Data, []byte(`{"code":"cluster-ingress-registration-refused","reason":"conflict","retryAfterMs":5}`))
	}
	ans = relay.Envelope{}
	_ = json.Unmarshal(in.roundTrip(regFrame(t, nil)), &ans)
	if ans.Error != nil {
		t.Fatal("error data knob outlived its count")
	}
}

// fakeIngress is a relay.Peer dialled at the server, serving the ingress's methods.
func fakeIngress(t *testing.T, origin string, o relay.Options, setup func(*relay.Peer)) (*relay.Peer, chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := relay.Dial(ctx, origin, o)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(p)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background()) }()
	t.Cleanup(func() {
		p.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("fake ingress did not stop")
		}
	})
	return p, done
}

func TestTablesHintsStatisticsAndRecording(t *testing.T) {
	s, origin := start(t)
	var hinted atomic.Int64
	p, _ := fakeIngress(t, origin, relay.Options{}, func(p *relay.Peer) {
		p.Handle("pushClusterIngressRouteTableChanged", func(_ context.Context, req json.RawMessage) (any, error) {
			var v struct{ Revision int64 }
			_ = json.Unmarshal(req, &v)
			hinted.Store(v.Revision)
			return struct{}{}, nil
		})
		p.Handle("getClusterTrafficStatistics", func(_ context.Context, req json.RawMessage) (any, error) {
			return json.RawMessage(`{"statistics":[]}`), nil
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	get := func() []byte {
		raw, err := p.Call(ctx, "getClusterIngressRouteTable", map[string]any{"knownRevision": nil})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	jsonEqual(t, "no table", get(), []byte(`{"table":null}`))
	table := example(t, "route-table.json")
	s.SetTable(bytes.Replace(table, []byte(`"revision": 7`), []byte(`"revision": 6`), 1), 6)
	s.SetTable(table, 7)
	s.SetTable([]byte(`{"old":true}`), 3)
	var resp map[string]json.RawMessage
	_ = json.Unmarshal(example(t, "get-route-table-response.json"), &resp)
	jsonEqual(t, "newest table", get(), resp["response"])
	s.SetTableNull()
	jsonEqual(t, "null again", get(), []byte(`{"table":null}`))

	_, err := p.Call(ctx, "getClusterIngressRouteTable", map[string]any{"knownRevision": -1})
	var re *relay.RemoteError
	if !errors.As(err, &re) || re.Code() != "request-invalid" {
		t.Fatalf("bad knownRevision: %v, want request-invalid", err)
	}
	_, err = p.Call(ctx, "somethingElse", nil)
	if !errors.Is(err, relay.ErrNoMethod) {
		t.Fatalf("unknown method: %v", err)
	}

	if err := s.WaitCalls(ctx, "getClusterIngressRouteTable", 4); err != nil {
		t.Fatal(err)
	}
	calls := s.Calls()
	if len(calls) != 5 || calls[4].Method != "somethingElse" || calls[0].CorrelationID == "" ||
		string(calls[0].Request) != `{"knownRevision":null}` || calls[0].At.IsZero() {
		t.Fatalf("recorded calls %+v", calls)
	}
	short, c2 := context.WithTimeout(ctx, 30*time.Millisecond)
	defer c2()
	if err := s.WaitCalls(short, "registerClusterIngress", 1); err == nil {
		t.Fatal("WaitCalls returned for calls never made")
	}

	if err := s.PushHint(ctx, 8); err != nil {
		t.Fatal(err)
	}
	if hinted.Load() != 8 {
		t.Fatalf("hint revision %d, want 8", hinted.Load())
	}
	raw, err := s.QueryStatistics(ctx, map[string]any{"fromDayUtc": "2026-11-28", "toDayUtc": "2026-11-30", "limit": 2})
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, "statistics", raw, []byte(`{"statistics":[]}`))
	if s.Connected() != 1 {
		t.Fatalf("Connected = %d", s.Connected())
	}
}

func TestDropDelayAndCloseSessions(t *testing.T) {
	s, origin := start(t)
	o := relay.Options{CallTimeout: 80 * time.Millisecond}
	p, done := fakeIngress(t, origin, o, nil)
	ctx := context.Background()
	body := map[string]any{"knownRevision": nil}

	s.DropAnswers("getClusterIngressRouteTable", 1)
	if _, err := p.Call(ctx, "getClusterIngressRouteTable", body); !errors.Is(err, relay.ErrTimeout) {
		t.Fatalf("dropped answer: %v, want ErrTimeout", err)
	}
	if _, err := p.Call(ctx, "getClusterIngressRouteTable", body); err != nil {
		t.Fatalf("after the drop: %v", err)
	}
	s.SetDelay("getClusterIngressRouteTable", 40*time.Millisecond)
	start := time.Now()
	if _, err := p.Call(ctx, "getClusterIngressRouteTable", body); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Fatalf("answered after %s, want the 40ms delay", d)
	}
	s.SetDelay("getClusterIngressRouteTable", 0)

	s.CloseSessions()
	select {
	case err := <-done:
		done <- err
		if !errors.Is(err, relay.ErrClosed) {
			t.Fatalf("ingress Run = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("CloseSessions did not close the ingress socket")
	}
	testwait.Until(t, 5*time.Second, "no session after CloseSessions", func() bool { return s.Connected() == 0 })
	if err := s.PushHint(ctx, 1); !errors.Is(err, ErrNoIngress) {
		t.Fatalf("PushHint with nobody connected: %v", err)
	}
}

func TestCloseEndsSessions(t *testing.T) {
	s := New(Options{})
	origin, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, done := fakeIngress(t, origin, relay.Options{}, nil)
	testwait.Until(t, 5*time.Second, "the ingress connected", func() bool { return s.Connected() == 1 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the session")
	}
	if _, err := relay.Dial(context.Background(), origin, relay.Options{CallTimeout: time.Second}); err == nil {
		t.Fatal("dial after Close succeeded")
	}
}
