package relay

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"
)

// Path is where a relay serves TypedRequest.
const Path = "/typedrequest"

// HandlerFunc serves one method. It runs in its own goroutine with a ctx that ends when the
// peer closes. Its response is JSON-encoded (a json.RawMessage is sent as it is; nil is sent
// as {}). Returning a *RemoteError answers with that error, a *RetryError with a retry
// envelope, and any other error with {"text":"internal error","data":{}} (its text is only
// logged, as the error's type, never sent).
type HandlerFunc func(ctx context.Context, request json.RawMessage) (response any, err error)

// Peer is one side of a TypedRequest WebSocket. Call, Handle, Close and Done are safe for
// concurrent use; Run is called once.
type Peer struct {
	conn *websocket.Conn
	opts Options
	log  *zap.Logger

	handlersMu sync.RWMutex
	handlers   map[string]HandlerFunc

	pendingMu sync.Mutex
	pending   map[string]chan answer

	idPrefix string
	idSeq    atomic.Uint64

	lastActivity atomic.Int64 // unix nanoseconds of the last message, ping or pong received
	idleFired    atomic.Bool

	sem chan struct{} // handler slots

	life       context.Context // ends when the peer closes: handlers, writes, liveness loops
	cancelLife context.CancelFunc
	closeOnce  sync.Once
	done       chan struct{}
	running    atomic.Bool
	handlerWG  sync.WaitGroup
}

func newPeer(conn *websocket.Conn, opts Options) *Peer {
	var b [6]byte
	_, _ = rand.Read(b[:])
	life, cancel := context.WithCancel(context.Background())
	p := &Peer{
		conn:       conn,
		opts:       opts,
		log:        opts.Logger,
		handlers:   map[string]HandlerFunc{},
		pending:    map[string]chan answer{},
		idPrefix:   hex.EncodeToString(b[:]) + "-",
		sem:        make(chan struct{}, MaxConcurrentHandlers),
		life:       life,
		cancelLife: cancel,
		done:       make(chan struct{}),
	}
	conn.SetReadLimit(opts.MaxMessageBytes)
	p.touch()
	return p
}

// Dial connects to a relay. origin is "https://host[:port]" (dialled as
// wss://host[:port]/typedrequest) or "http://host[:port]" (ws://); the caller judged it
// (contract §1). ctx bounds the handshake only; without a deadline, CallTimeout does.
func Dial(ctx context.Context, origin string, opts Options) (*Peer, error) {
	opts = opts.withDefaults()
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return nil, errors.New("relay: dial: origin must be http(s)://host[:port]")
	}
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	case "http":
		u.Scheme = "ws"
	default:
		return nil, errors.New("relay: dial: origin must be http(s)://host[:port]")
	}
	u.Path, u.RawPath, u.RawQuery, u.Fragment, u.User = Path, "", "", "", nil
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.CallTimeout)
		defer cancel()
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// The upgrade needs HTTP/1.1; never let ALPN pick h2 (a non-nil empty map disables it).
	tr.ForceAttemptHTTP2 = false
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	if opts.TLSConfig != nil {
		tr.TLSClientConfig = opts.TLSConfig.Clone()
		tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	var p *Peer
	dopts := &websocket.DialOptions{
		HTTPClient:     client,
		HTTPHeader:     opts.HTTPHeader,
		OnPingReceived: func(context.Context, []byte) bool { p.touch(); return true },
		OnPongReceived: func(context.Context, []byte) { p.touch() },
	}
	conn, resp, err := websocket.Dial(ctx, u.String(), dopts)
	if err != nil {
		return nil, dialError(u.Redacted(), resp, err)
	}
	p = newPeer(conn, opts)
	return p, nil
}

// Accept upgrades an HTTP request to a Peer (the relay side). On error it has already
// answered w.
func Accept(w http.ResponseWriter, r *http.Request, opts Options) (*Peer, error) {
	opts = opts.withDefaults()
	var p *Peer
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		OnPingReceived: func(context.Context, []byte) bool { p.touch(); return true },
		OnPongReceived: func(context.Context, []byte) { p.touch() },
	})
	if err != nil {
		return nil, fmt.Errorf("relay: accept: %w", err)
	}
	p = newPeer(conn, opts)
	return p, nil
}

// touch records activity; a nil p (a ping racing newPeer) is ignored.
func (p *Peer) touch() {
	if p != nil {
		p.lastActivity.Store(time.Now().UnixNano())
	}
}

// Handle registers fn for method, replacing an earlier one. Register before Run so that no
// early request is answered with ErrNoMethod; it is safe at any time.
func (p *Peer) Handle(method string, fn HandlerFunc) {
	p.handlersMu.Lock()
	defer p.handlersMu.Unlock()
	if fn == nil {
		delete(p.handlers, method)
		return
	}
	p.handlers[method] = fn
}

func (p *Peer) handler(method string) HandlerFunc {
	p.handlersMu.RLock()
	defer p.handlersMu.RUnlock()
	return p.handlers[method]
}

// Done is closed once the peer is closed.
func (p *Peer) Done() <-chan struct{} { return p.done }

// Close closes the socket with a closing handshake (bounded by closeGrace) and makes Run
// return. Pending calls fail with ErrClosed. It is idempotent and returns nil.
func (p *Peer) Close() error {
	p.shutdown(websocket.StatusNormalClosure)
	return nil
}

func (p *Peer) shutdown(code websocket.StatusCode) {
	p.closeOnce.Do(func() {
		t := time.AfterFunc(closeGrace, p.cancelLife) // closes the socket under a stuck handshake
		_ = p.conn.Close(code, "")
		t.Stop()
		p.cancelLife()
		_ = p.conn.CloseNow()
		close(p.done)
	})
}

// Run reads until the socket dies, ctx ends or Close is called, then closes the socket and
// waits for every goroutine it started (reader, ping and idle loops, handlers) before it
// returns. It returns ctx's cause when ctx ended, otherwise an error wrapping ErrClosed.
// Calls only get answers while Run runs. A second Run returns an error at once.
func (p *Peer) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("relay: Run called twice")
	}
	select {
	case <-p.done:
		return ErrClosed
	default:
	}
	p.touch() // nothing was read before Run: idleness counts from here
	var wg sync.WaitGroup
	readErr := make(chan error, 1)
	wg.Go(func() { readErr <- p.readLoop() })
	wg.Go(p.pingLoop)
	wg.Go(p.idleLoop)

	var err error
	select {
	case <-ctx.Done():
		err = context.Cause(ctx)
		p.shutdown(websocket.StatusGoingAway)
	case e := <-readErr:
		readErr <- e
		switch {
		case p.idleFired.Load():
			err = fmt.Errorf("%w: no pong or message for %s", ErrClosed, p.opts.IdleTimeout)
		case e != nil:
			err = fmt.Errorf("%w: %w", ErrClosed, e)
		default:
			err = ErrClosed
		}
		p.shutdown(websocket.StatusNormalClosure)
	case <-p.done:
		err = ErrClosed
	}
	wg.Wait()
	p.handlerWG.Wait()
	p.log.Debug("relay peer closed", p.peerError(err))
	return err
}

// write sends one frame. The write is bounded by CallTimeout and by the peer's life, not by
// a caller's ctx: coder/websocket closes the socket when a write's ctx ends mid-frame.
func (p *Peer) write(env *Envelope) error {
	b, err := env.Encode()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(p.life, p.opts.CallTimeout)
	defer cancel()
	if err := p.conn.Write(ctx, websocket.MessageText, b); err != nil {
		select {
		case <-p.done:
			return ErrClosed
		default:
		}
		if p.life.Err() != nil {
			return ErrClosed
		}
		return fmt.Errorf("%w: %w", ErrClosed, opaqueSocketError("write", err))
	}
	return nil
}

func (p *Peer) newID() string {
	return p.idPrefix + strconv.FormatUint(p.idSeq.Add(1), 10)
}
