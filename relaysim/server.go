package relaysim

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/serve-zone/ingress/relay"
)

// ErrNoIngress: no ingress is connected.
var ErrNoIngress = errors.New("relaysim: no ingress connected")

// Options configure a Server. Logger nil means zap.NewNop(). Relay sets the sessions' peer
// options (zero: the contract's defaults); its Logger and OnRequest are relaysim's own.
type Options struct {
	Logger *zap.Logger
	Relay  relay.Options
}

// RecordedCall is one request the relay received from an ingress.
type RecordedCall struct {
	Method        string
	Request       json.RawMessage
	At            time.Time
	CorrelationID string
}

// Server is a development relay. Its methods are safe for concurrent use.
type Server struct {
	log  *zap.Logger
	opts Options

	ctx    context.Context // ends at Close: every session's Run
	cancel context.CancelFunc
	wg     sync.WaitGroup // sessions and the listener's Serve

	mu        sync.Mutex
	closed    bool
	httpSrv   *http.Server
	sessions  []*relay.Peer // in connection order
	tables    map[int64]json.RawMessage
	newest    int64
	hasTable  bool
	tableNull bool
	bearer    string
	regRefuse *knob[refusal]
	protoRef  *knob[Offer]
	regData   *knob[json.RawMessage]
	delays    map[string]time.Duration
	drops     map[string]int
	// Faults (faults.go).
	frameFault *knob[FrameFault]
	fails      map[string]*knob[*relay.RemoteError]
	raw        map[net.Conn]struct{} // accepted TCP connections, for Kill
	calls      []RecordedCall
	callsCh    chan struct{} // closed and replaced on every recorded call
}

type refusal struct {
	Reason       string
	RetryAfterMs int64
}

// knob is a behaviour that applies to the next count events (count < 0: until cleared).
type knob[T any] struct {
	value T
	count int
}

// take reports whether k applies now and consumes one use; a used-up knob is cleared.
func take[T any](k **knob[T]) (T, bool) {
	var zero T
	if *k == nil {
		return zero, false
	}
	v := (*k).value
	if (*k).count > 0 {
		(*k).count--
		if (*k).count == 0 {
			*k = nil
		}
	}
	return v, true
}

func set[T any](v T, count int) *knob[T] {
	if count == 0 {
		return nil
	}
	return &knob[T]{value: v, count: count}
}

// New returns a Server serving no table yet: getClusterIngressRouteTable answers
// {"table":null} and accepted registrations carry revision null.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		log:     opts.Logger,
		opts:    opts,
		ctx:     ctx,
		cancel:  cancel,
		tables:  map[int64]json.RawMessage{},
		delays:  map[string]time.Duration{},
		drops:   map[string]int{},
		fails:   map[string]*knob[*relay.RemoteError]{},
		raw:     map[net.Conn]struct{}{},
		callsCh: make(chan struct{}),
	}
}

// Start listens on addr (use "127.0.0.1:0") and serves until Close. It returns the origin
// to give the ingress, "http://127.0.0.1:PORT".
func (s *Server) Start(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, ConnContext: s.connContext}
	s.mu.Lock()
	if s.closed || s.httpSrv != nil {
		s.mu.Unlock()
		ln.Close()
		return "", errors.New("relaysim: already started or closed")
	}
	s.httpSrv = srv
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		_ = srv.Serve(ln)
	}()
	return "http://" + ln.Addr().String(), nil
}

// Close ends every session, stops the listener and waits for all of it.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	srv := s.httpSrv
	s.mu.Unlock()
	s.cancel()
	var err error
	if srv != nil {
		err = srv.Close()
	}
	s.wg.Wait()
	return err
}

// ServeHTTP serves /typedrequest: one ingress session per WebSocket.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != relay.Path {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		http.Error(w, "relaysim closed", http.StatusServiceUnavailable)
		return
	}
	s.wg.Add(1)
	fault, faulty := take(&s.frameFault)
	s.mu.Unlock()
	defer s.wg.Done()
	defer s.trackRaw(r)()
	if faulty {
		s.serveFrameFault(w, r, fault)
		return
	}

	po := s.opts.Relay
	po.Logger = s.log.Named("peer")
	po.OnRequest = s.record
	p, err := relay.Accept(w, r, po)
	if err != nil {
		s.log.Info("relaysim upgrade refused", zap.Error(err))
		return
	}
	p.Handle("registerClusterIngress", s.knobbed("registerClusterIngress", s.register))
	p.Handle("getClusterIngressRouteTable", s.knobbed("getClusterIngressRouteTable", s.routeTable))
	s.mu.Lock()
	s.sessions = append(s.sessions, p)
	s.mu.Unlock()
	s.log.Info("relaysim ingress connected")
	err = p.Run(s.ctx)
	s.mu.Lock()
	for i, q := range s.sessions {
		if q == p {
			s.sessions = append(s.sessions[:i:i], s.sessions[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	s.log.Info("relaysim ingress disconnected", zap.Error(err))
}

// record keeps one received call. It runs in a peer's reader goroutine.
func (s *Server) record(env relay.Envelope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, RecordedCall{
		Method:        env.Method,
		Request:       append(json.RawMessage(nil), env.Request...),
		At:            time.Now(),
		CorrelationID: env.Correlation.ID,
	})
	close(s.callsCh)
	s.callsCh = make(chan struct{})
}

// knobbed applies FailCalls, DropAnswers and SetDelay to a handler.
func (s *Server) knobbed(method string, fn relay.HandlerFunc) relay.HandlerFunc {
	return func(ctx context.Context, req json.RawMessage) (any, error) {
		s.mu.Lock()
		if k := s.fails[method]; k != nil {
			fail, _ := take(&k)
			if k == nil {
				delete(s.fails, method)
			}
			s.mu.Unlock()
			return nil, fail
		}
		drop := s.drops[method] != 0
		if s.drops[method] > 0 {
			s.drops[method]--
		}
		delay := s.delays[method]
		s.mu.Unlock()
		if drop {
			<-ctx.Done() // never answer; the peer's end releases the handler
			return nil, ctx.Err()
		}
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		return fn(ctx, req)
	}
}
