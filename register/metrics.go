package register

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// State is where the session stands.
type State int32

const (
	StateConnecting State = iota
	StateRegistering
	StateWaiting // waiting until a time before the next attempt (refusal or backoff)
	StateRegistered
	StateStopped
)

var stateNames = [...]string{"connecting", "registering", "waiting", "registered", "stopped"}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "unknown"
}

func (s *Session) setState(st State) {
	s.state.Store(int32(st))
	if st != StateWaiting {
		s.waitUntil.Store(0)
	}
}

func (s *Session) setWaiting(until time.Time) {
	s.waitUntil.Store(until.UnixNano())
	s.state.Store(int32(StateWaiting))
}

// State returns the session's state and, while waiting, the time it waits for.
func (s *Session) State() (State, time.Time) {
	st := State(s.state.Load())
	if st == StateWaiting {
		return st, time.Unix(0, s.waitUntil.Load())
	}
	return st, time.Time{}
}

type metrics struct {
	registrations prometheus.Counter
	reconnects    prometheus.Counter
	refusals      *prometheus.CounterVec
	hints         prometheus.Counter
	pulls         prometheus.Counter
	pullFailures  prometheus.Counter
}

func newMetrics(s *Session) *metrics {
	m := &metrics{
		registrations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ingress_relay_registrations_total", Help: "Registrations sent to the relay."}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ingress_relay_reconnects_total", Help: "Relay connections opened after the first."}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ingress_relay_registration_refusals_total",
			Help: "Registration refusals by reason (protocol-refused, other for anything that is no named refusal)."},
			[]string{"reason"}),
		hints: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ingress_relay_route_table_hints_total", Help: "Route-table change hints received."}),
		pulls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ingress_relay_route_table_pulls_total", Help: "Route-table pulls sent."}),
		pullFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ingress_relay_route_table_pull_failures_total", Help: "Route-table pulls that got no usable answer."}),
	}
	for _, r := range RefusalReasons {
		m.refusals.WithLabelValues(r)
	}
	m.refusals.WithLabelValues("protocol-refused")
	m.refusals.WithLabelValues("other")
	return m
}

// Collectors returns the session's metrics, including ingress_relay_session_state (1 for
// the current state, 0 for the others) read at scrape time.
func (s *Session) Collectors() []prometheus.Collector {
	out := []prometheus.Collector{s.m.registrations, s.m.reconnects, s.m.refusals, s.m.hints, s.m.pulls, s.m.pullFailures}
	for i, name := range stateNames {
		st := State(i)
		out = append(out, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "ingress_relay_session_state",
			Help:        "The relay session's state: 1 for the current one.",
			ConstLabels: prometheus.Labels{"state": name},
		}, func() float64 {
			if cur, _ := s.State(); cur == st {
				return 1
			}
			return 0
		}))
	}
	out = append(out, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ingress_relay_session_wait_until_seconds",
		Help: "While waiting, the Unix time of the next registration attempt; 0 otherwise.",
	}, func() float64 {
		if _, until := s.State(); !until.IsZero() {
			return float64(until.UnixNano()) / 1e9
		}
		return 0
	}))
	return out
}
