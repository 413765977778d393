package register

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/serve-zone/ingress/env"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/relay"
	"github.com/serve-zone/ingress/relaysim"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

const secret = "bearer-for-tests-0123456789"

// table returns a valid plain-HTTP route table of revision rev.
func table(rev int64) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"revision":%d,"routes":[{"hostname":"app.example.test","targets":[{"leaseId":"lease-1","address":"127.0.0.1","port":8080}],"tls":null}],"certificates":[]}`, rev))
}

// invalidTable breaks a rule (an unordered, out-of-range port).
func invalidTable(rev int64) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"revision":%d,"routes":[{"hostname":"app.example.test","targets":[{"leaseId":"lease-1","address":"127.0.0.1","port":0}],"tls":null}],"certificates":[]}`, rev))
}

type harness struct {
	t       *testing.T
	sim     *relaysim.Server
	store   *routetable.Store
	stats   *stats.Registry
	session *Session
	logs    *observer.ObservedLogs
	cancel  context.CancelFunc
	done    chan error

	mu    sync.Mutex
	waits []time.Duration
}

type option func(*Config, *harness)

// recordWaits makes the session's waits return at once while recording their lengths,
// so backoff sequences are observable without sleeping through them.
func recordWaits() option {
	return func(c *Config, h *harness) {
		c.Wait = func(ctx context.Context, d time.Duration) error {
			if d >= time.Minute && d == c.RepullInterval {
				<-ctx.Done() // the periodic re-pull: not part of what we observe
				return ctx.Err()
			}
			h.mu.Lock()
			h.waits = append(h.waits, d)
			h.mu.Unlock()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// Part of what is tested: the injected wait stands in for the backoff, lasting
			// 1 ms instead of d so that the session's next attempt comes promptly.
			time.Sleep(time.Millisecond)
			return nil
		}
	}
}

func jitter(v float64) option {
	return func(c *Config, _ *harness) { c.Jitter = func() float64 { return v } }
}

func repull(d time.Duration) option {
	return func(c *Config, _ *harness) { c.RepullInterval = d }
}

func newHarness(t *testing.T, setup func(*relaysim.Server), opts ...option) *harness {
	t.Helper()
	h := &harness{t: t, done: make(chan error, 1)}
	h.sim = relaysim.New(relaysim.Options{Logger: zap.NewNop()})
	origin, err := h.sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.sim.Close() })
	h.sim.ExpectedBearer(secret)
	if setup != nil {
		setup(h.sim)
	}
	h.stats = stats.NewRegistry(stats.Options{NodeID: "node-1"})
	h.store = routetable.NewStore(routetable.StoreOptions{Stats: h.stats})
	core, logs := observer.New(zap.DebugLevel)
	h.logs = logs
	cfg := Config{
		Env:          env.Config{Bearer: env.NewBearer(secret), RelayOrigin: origin, NodeID: "node-1"},
		Version:      "1.2.3",
		Capabilities: []string{"http1", "http2", "websocket"},
		Tables:       h.store,
		Stats:        h.stats,
		Logger:       zap.New(core),
		Relay:        relay.Options{Logger: zap.New(core)},
		Jitter:       func() float64 { return 0 },
	}
	for _, o := range opts {
		o(&cfg, h)
	}
	h.session = New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.session.Run(ctx) }()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		h.t.Error("session did not stop within 10 s")
	}
	for _, e := range h.logs.All() {
		if strings.Contains(e.Message, secret) || strings.Contains(fmt.Sprint(e.ContextMap()), secret) {
			h.t.Errorf("a log line carries the bearer: %q", e.Message)
		}
	}
}

func (h *harness) waitCalls(method string, n int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.sim.WaitCalls(ctx, method, n); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) calls(method string) []relaysim.RecordedCall {
	var out []relaysim.RecordedCall
	for _, c := range h.sim.Calls() {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

func (h *harness) waitApplied(rev int64) {
	h.t.Helper()
	testwait.UntilWhy(h.t, 10*time.Second, fmt.Sprintf("revision %d applied", rev), func() (bool, string) {
		got, ok := h.store.Applied()
		return ok && got == rev, fmt.Sprintf("applied %d", got)
	})
}

func (h *harness) waitState(want State) {
	h.t.Helper()
	testwait.UntilWhy(h.t, 10*time.Second, "state "+want.String(), func() (bool, string) {
		st, _ := h.session.State()
		return st == want, "state " + st.String()
	})
}

// requestedPulls counts the pulls made for RequestPull that have ended (each logs its
// outcome with reason "requested").
func (h *harness) requestedPulls() int {
	n := 0
	for _, e := range h.logs.All() {
		if e.ContextMap()["reason"] == "requested" {
			n++
		}
	}
	return n
}

// pullBarrier asks for one pull and waits until it has ended. The puller serves requests
// one at a time and a pull drains a pending one, so after the barrier no pull asked for
// before it can still come: a test that must show a pull did NOT happen counts after it.
func (h *harness) pullBarrier() {
	h.t.Helper()
	before := h.requestedPulls()
	h.session.RequestPull()
	testwait.Until(h.t, 10*time.Second, "the requested pull", func() bool { return h.requestedPulls() > before })
}

func TestRegistrationBodyIsExact(t *testing.T) {
	h := newHarness(t, nil)
	h.waitState(StateRegistered)
	call := h.calls(MethodRegister)[0]
	var body map[string]json.RawMessage
	if err := json.Unmarshal(call.Request, &body); err != nil {
		t.Fatal(err)
	}
	if len(body) != 5 {
		t.Fatalf("registration keys %v, want exactly bearer, version, nodeId, capabilities, protocol", body)
	}
	want := map[string]string{
		"bearer":       `"` + secret + `"`,
		"version":      `"1.2.3"`,
		"nodeId":       `"node-1"`,
		"capabilities": `["http1","http2","websocket"]`,
		"protocol":     `{"name":"serve.zone/cluster-ingress","minVersion":1,"maxVersion":1}`,
	}
	for k, v := range want {
		if string(body[k]) != v {
			t.Errorf("%s = %s, want %s", k, body[k], v)
		}
	}
	// The first call on the connection is the registration.
	if h.sim.Calls()[0].Method != MethodRegister {
		t.Fatalf("first call %s", h.sim.Calls()[0].Method)
	}
}

func TestPullsAfterAcceptanceNamingANewerRevision(t *testing.T) {
	h := newHarness(t, func(s *relaysim.Server) { s.SetTable(table(3), 3) })
	h.waitApplied(3)
	pull := h.calls(MethodGetRouteTable)[0]
	if string(pull.Request) != `{"knownRevision":null}` {
		t.Fatalf("first pull %s", pull.Request)
	}
}

func TestNoPullWhenRelayHasNoTable(t *testing.T) {
	h := newHarness(t, nil, repull(time.Hour))
	h.waitState(StateRegistered)
	h.pullBarrier()
	if n := len(h.calls(MethodGetRouteTable)); n != 1 {
		t.Fatalf("%d pulls besides the requested one after an acceptance with revision null", n-1)
	}
	if first := h.logs.FilterMessage("the relay holds no route table yet").All(); first[0].ContextMap()["reason"] != "requested" {
		t.Fatalf("a pull (%v) came before the requested one", first[0].ContextMap()["reason"])
	}
	if h.store.Load() != nil {
		t.Fatal("a table appeared from nowhere")
	}
}

func TestHintsPullOnlyNewerRevisions(t *testing.T) {
	h := newHarness(t, func(s *relaysim.Server) { s.SetTable(table(3), 3) }, repull(time.Hour))
	h.waitApplied(3)
	ctx := context.Background()
	for _, rev := range []int64{3, 2, 0} {
		if err := h.sim.PushHint(ctx, rev); err != nil {
			t.Fatal(err)
		}
	}
	h.pullBarrier()
	if n := len(h.calls(MethodGetRouteTable)); n != 2 {
		t.Fatalf("%d pulls, want the first and the requested one: hints not newer than the applied revision must be ignored", n)
	}
	h.sim.SetTable(table(4), 4)
	if err := h.sim.PushHint(ctx, 4); err != nil {
		t.Fatal(err)
	}
	h.waitApplied(4)
	if got := string(h.calls(MethodGetRouteTable)[2].Request); got != `{"knownRevision":3}` {
		t.Fatalf("second pull %s", got)
	}
}

// TestHintsDuringSlowPullCoalesce: hints 3, 3, 2, 5 arriving while a pull is in flight
// cause at most one more pull.
func TestHintsDuringSlowPullCoalesce(t *testing.T) {
	h := newHarness(t, func(s *relaysim.Server) { s.SetTable(table(1), 1) }, repull(time.Hour))
	h.waitApplied(1)
	h.sim.SetDelay(MethodGetRouteTable, 400*time.Millisecond)
	h.sim.SetTable(table(5), 5)
	ctx := context.Background()
	if err := h.sim.PushHint(ctx, 3); err != nil {
		t.Fatal(err)
	}
	h.waitCalls(MethodGetRouteTable, 2) // the slow pull is in flight
	for _, rev := range []int64{3, 3, 2, 5} {
		if err := h.sim.PushHint(ctx, rev); err != nil {
			t.Fatal(err)
		}
	}
	h.waitApplied(5)
	h.pullBarrier()
	if n := len(h.calls(MethodGetRouteTable)) - 2; n < 1 || n > 2 { // less the first and the requested
		t.Fatalf("%d pulls for the hints, want at most 2", n)
	}
}

func TestRefusedRevisionIsNotPulledAgain(t *testing.T) {
	h := newHarness(t, func(s *relaysim.Server) { s.SetTable(table(1), 1) }, repull(time.Hour))
	h.waitApplied(1)
	h.sim.SetTable(invalidTable(6), 6)
	ctx := context.Background()
	if err := h.sim.PushHint(ctx, 6); err != nil {
		t.Fatal(err)
	}
	h.waitCalls(MethodGetRouteTable, 2)
	testwait.Until(t, 5*time.Second, "revision 6 refused", func() bool { return h.store.Refused(6) })
	for range 3 {
		if err := h.sim.PushHint(ctx, 6); err != nil {
			t.Fatal(err)
		}
	}
	h.pullBarrier() // the requested pull gets revision 6 again and discards it
	if n := len(h.calls(MethodGetRouteTable)); n != 3 {
		t.Fatalf("%d pulls, want 2 and the requested one: a refused revision must not be pulled again", n)
	}
	if rev, _ := h.store.Applied(); rev != 1 || h.store.Load() == nil {
		t.Fatalf("serving revision %d after a refusal, want 1", rev)
	}
	// A newer valid table is applied.
	h.sim.SetTable(table(7), 7)
	if err := h.sim.PushHint(ctx, 7); err != nil {
		t.Fatal(err)
	}
	h.waitApplied(7)
}

func TestPeriodicRepull(t *testing.T) {
	h := newHarness(t, func(s *relaysim.Server) { s.SetTable(table(1), 1) }, repull(100*time.Millisecond))
	h.waitApplied(1)
	h.sim.SetTable(table(2), 2) // no hint: the periodic pull must find it
	h.waitApplied(2)
}

// TestRefusalDelaysNextRegistration: retryAfterMs 2500 keeps the next registration at least
// 2.5 s after the refusal, even across a reconnect.
func TestRefusalDelaysNextRegistration(t *testing.T) {
	h := newHarness(t, func(s *relaysim.Server) {
		s.RefuseRegistrations(relaysim.ReasonAssignmentNotRunning, 2500, 1)
	}, jitter(0.99))
	h.waitCalls(MethodRegister, 1)
	refusedAt := time.Now()
	h.waitState(StateWaiting)
	_, until := h.session.State()
	if d := until.Sub(refusedAt); d < 2400*time.Millisecond || d > 2800*time.Millisecond {
		t.Fatalf("waiting until +%s, want 2.5 s plus at most 10 %%", d)
	}
	h.sim.CloseSessions() // a reconnect must not shortcut the wait
	h.waitCalls(MethodRegister, 2)
	calls := h.calls(MethodRegister)
	if gap := calls[1].At.Sub(calls[0].At); gap < 2500*time.Millisecond {
		t.Fatalf("second registration %s after the refusal, want at least 2.5 s", gap)
	}
	h.waitState(StateRegistered)
}

func TestProtocolRefusalBacksOffFrom30sTo5min(t *testing.T) {
	h := newHarness(t, func(s *relaysim.Server) {
		s.RefuseProtocol(relaysim.Offer{Name: ProtocolName, MinVersion: 2, MaxVersion: 3}, 7)
	}, recordWaits())
	h.waitState(StateRegistered)
	h.mu.Lock()
	got := append([]time.Duration(nil), h.waits...)
	h.mu.Unlock()
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute}
	if len(got) < len(want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
	for i, w := range want {
		if got[i] > w || got[i] < w-time.Second {
			t.Fatalf("wait %d = %s, want %s (all: %v)", i, got[i], w, got)
		}
	}
	found := false
	for _, e := range h.logs.FilterMessage("protocol refused by the relay").All() {
		m := e.ContextMap()
		if strings.Contains(fmt.Sprint(m["relayOffer"]), "2..3") && strings.Contains(fmt.Sprint(m["ownOffer"]), "1..1") {
			found = true
		}
	}
	if !found {
		t.Fatal("protocol refusal not logged with both offers")
	}
}

// TestOtherFailuresBackOffWithFullJitter: malformed refusals are "anything else": 1 s
// doubling to 60 s with full jitter, reset by an acceptance.
func TestOtherFailuresBackOffWithFullJitter(t *testing.T) {
	bad := json.RawMessage(`{"code":"cluster-ingress-registration-refused","reason":"conflict","retryAfterMs":5}`)
	h := newHarness(t, func(s *relaysim.Server) { s.SetRegisterErrorData(bad, 8) }, recordWaits(), jitter(0.5))
	h.waitState(StateRegistered)
	h.mu.Lock()
	got := append([]time.Duration(nil), h.waits...)
	h.mu.Unlock()
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	if len(got) < len(want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
	for i, w := range want {
		if got[i] > w || got[i] < w-50*time.Millisecond {
			t.Fatalf("wait %d = %s, want %s (all %v)", i, got[i], w, got)
		}
	}
	// Run owns the count; it reset it before publishing StateRegistered.
	if h.session.failures != 0 {
		t.Fatal("an acceptance did not reset the backoff")
	}
}

func TestReconnectsAfterDropAndKeepsServing(t *testing.T) {
	h := newHarness(t, func(s *relaysim.Server) { s.SetTable(table(2), 2) }, repull(time.Hour))
	h.waitApplied(2)
	h.sim.CloseSessions()
	h.waitCalls(MethodRegister, 2)
	if h.store.Load() == nil || h.store.Load().Lookup("app.example.test") == nil {
		t.Fatal("the applied table stopped serving during the reconnect")
	}
	h.waitState(StateRegistered)
	// The relay restarted with a newer table: acceptance names it, the session pulls.
	h.sim.SetTable(table(3), 3)
	h.sim.CloseSessions()
	h.waitApplied(3)
}

func TestStatisticsServedAndInvalidQueriesAnswered(t *testing.T) {
	h := newHarness(t, nil)
	h.waitState(StateRegistered)
	h.stats.Host("app.example.test").Request(100, 2000)
	today := h.stats.Today().String()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := h.sim.QueryStatistics(ctx, map[string]any{"fromDayUtc": today, "toDayUtc": today, "limit": 10})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"statistics":[{"dayUtc":"%s","nodeId":"node-1","hostname":"app.example.test","requests":1,"bytesIn":100,"bytesOut":2000,"connections":0,"backendFailures":{"connect":0,"handshake":0,"request":0}}]}`, today)
	if string(out) != want {
		t.Fatalf("statistics\n got %s\nwant %s", out, want)
	}
	_, err = h.sim.QueryStatistics(ctx, map[string]any{"fromDayUtc": "2026-02-29", "toDayUtc": today, "limit": 0})
	var re *relay.RemoteError
	if !errors.As(err, &re) || re.Code() != "request-invalid" || !strings.Contains(string(re.Data), "limit must be an integer from 1 to 1000") {
		t.Fatalf("invalid query answered %v", err)
	}
}

// TestHintBeforeAcceptanceIsActedOnAfter: the acceptance names no revision (null), so the
// only reason to pull is the hint that arrived while the registration was in flight.
func TestHintBeforeAcceptanceIsActedOnAfter(t *testing.T) {
	h := newHarness(t, func(s *relaysim.Server) {
		s.SetDelay(MethodRegister, 300*time.Millisecond)
	}, repull(time.Hour))
	h.waitCalls(MethodRegister, 1)
	if err := h.sim.PushHint(context.Background(), 4); err != nil {
		t.Fatal(err)
	}
	if st, _ := h.session.State(); st == StateRegistered {
		t.Fatal("registered before the delayed answer")
	}
	if n := len(h.calls(MethodGetRouteTable)); n != 0 {
		t.Fatalf("pulled %d times before the acceptance", n)
	}
	h.waitCalls(MethodGetRouteTable, 1)
	regs := h.calls(MethodRegister)
	pulls := h.calls(MethodGetRouteTable)
	if pulls[0].At.Before(regs[0].At.Add(300 * time.Millisecond)) {
		t.Fatal("pulled before the registration was accepted")
	}
}

// TestRequestPullPullsWithoutAHint: RequestPull (SIGHUP) pulls at once, without a hint and
// whatever the revisions known; a request made before the acceptance is served after it.
func TestRequestPullPullsWithoutAHint(t *testing.T) {
	h := newHarness(t, func(s *relaysim.Server) {
		s.SetTable(table(3), 3)
		s.RefuseRegistrations("not-ready", 1000, 1)
	}, repull(time.Hour), recordWaits())
	h.session.RequestPull() // before any acceptance
	h.waitApplied(3)
	h.waitCalls(MethodGetRouteTable, 1)

	// A newer table the relay announces to nobody: only the request brings it in. The
	// acceptance's pull and the early request's may come in either order: both end first
	// (the barrier after the early one), or one still in flight could fetch the newer table.
	testwait.Until(t, 10*time.Second, "the early request's pull", func() bool { return h.requestedPulls() >= 1 })
	h.pullBarrier()
	m := len(h.calls(MethodGetRouteTable))
	h.sim.SetTable(table(4), 4)
	h.session.RequestPull()
	h.waitApplied(4)
	if got := string(h.calls(MethodGetRouteTable)[m].Request); got != `{"knownRevision":3}` {
		t.Fatalf("requested pull %s", got)
	}
	// Nothing newer: the request still pulls, and the answer is ignored.
	n := len(h.calls(MethodGetRouteTable))
	h.session.RequestPull()
	h.waitCalls(MethodGetRouteTable, n+1)
	if rev, _ := h.store.Applied(); rev != 4 {
		t.Fatalf("applied %d, want 4", rev)
	}
}
