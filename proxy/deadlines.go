package proxy

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Client progress deadlines (Config.ClientBodyTimeout and Config.ClientSendTimeout).
//
// They are set through the response writer's SetReadDeadline and SetWriteDeadline, the
// methods http.ResponseController calls (found the same way, through Unwrap):
//   - net/http's HTTP/1.1 writer sets them on the client connection: they fail a read or
//     write that is pending when they pass or starts after. net/http clears the write
//     deadline after each response and the read deadline when the body reaches EOF.
//   - quic-go's http3 writer (v0.65) sets them on the QUIC stream, with the same
//     semantics.
//   - net/http's HTTP/2 writer keeps a timer per stream that fails the stream's body
//     (read) or resets the stream (write) when it fires, whether a call is pending or
//     not, and every change of it is a message to the connection's serve loop.
//
// Deadlines of the first two kinds are moved forward lazily, at most every eighth of
// their timeout, so that a busy stream does not pay for a deadline per read or write. On
// HTTP/2 a streamWatch of ours times the calls instead (it acts only on a call that is
// still pending when its time is up, never while the target is being waited for), and
// the stream's own write deadline is set once, for what net/http writes after the
// handler has returned.

// deadlineSetter is implemented by the response writers of all three servers.
type deadlineSetter interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// deadlinesOf returns w's deadline methods, following Unwrap as http.ResponseController
// does; nil when w has none (Handler used directly).
func deadlinesOf(w http.ResponseWriter) deadlineSetter {
	for {
		switch t := w.(type) {
		case deadlineSetter:
			return t
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return nil
		}
	}
}

const (
	// bodyProgressBytes is what every ClientBodyTimeout window must deliver.
	bodyProgressBytes = 1 << 10
	// deadlineSlackDiv: a lazily moved deadline is set this fraction of its timeout
	// beyond what is due, so that it is moved again only after that much time.
	deadlineSlackDiv = 8
)

// longAgo is a deadline in the past: the pending call fails at once.
var longAgo = time.Unix(1, 0)

// clientDeadline is one direction's deadline on the client side of a request.
type clientDeadline struct {
	dl    deadlineSetter // nil: no deadlines
	write bool           // SetWriteDeadline, else SetReadDeadline
	at    time.Time      // the deadline set; zero when none is
}

func (d *clientDeadline) set(t time.Time) {
	if d.write {
		_ = d.dl.SetWriteDeadline(t)
	} else {
		_ = d.dl.SetReadDeadline(t)
	}
}

// cover makes the deadline at least due: when it is earlier (or none is set), it is set
// to due plus slack.
func (d *clientDeadline) cover(due time.Time, slack time.Duration) {
	if d.at.Before(due) {
		d.at = due.Add(slack)
		d.set(d.at)
	}
}

// streamWatch times the reads (or the writes) of one side of an HTTP/2 stream with a
// timer of its own: when a call is still pending at its due time, it sets the stream's
// deadline in the past, which net/http acts on at once (the body fails, or the stream is
// reset). The calling goroutine uses begin and end; the timer runs check; stop ends it
// before the handler returns, after which the response writer must not be touched.
type streamWatch struct {
	d     clientDeadline // only set is used, with longAgo
	mu    sync.Mutex     // guards done, fired and the creation of timer
	done  bool
	fired bool
	gone  chan struct{} // closed by a callback that stop had to wait for
	timer *time.Timer
	due   atomic.Int64 // UnixNano by which the pending call must end; 0: none pending
	idle  atomic.Bool  // the timer is stopped: begin restarts it
}

// begin marks a call pending until due.
func (w *streamWatch) begin(now, due time.Time) {
	w.due.Store(due.UnixNano())
	if w.timer == nil {
		w.mu.Lock()
		if !w.done {
			w.timer = time.AfterFunc(due.Sub(now), w.check)
		}
		w.mu.Unlock()
		return
	}
	if w.idle.Load() && w.idle.CompareAndSwap(true, false) {
		w.timer.Reset(due.Sub(now))
	}
}

// end marks the pending call done.
func (w *streamWatch) end() { w.due.Store(0) }

func (w *streamWatch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done || w.fired {
		if w.gone != nil {
			close(w.gone)
			w.gone = nil
		}
		return
	}
	w.idle.Store(true)
	due := w.due.Load()
	if due == 0 || !w.idle.CompareAndSwap(true, false) {
		return // nothing pending (the next begin restarts the timer), or begin just did
	}
	if left := time.Until(time.Unix(0, due)); left > 0 {
		w.timer.Reset(left)
		return
	}
	w.fired = true
	w.d.set(longAgo)
}

// stop ends the watch for good. A callback the timer already started is waited for:
// the watch lives in a pooled work area that its owner reuses once stop returns (a
// callback still on its way to the mutex raced with that reuse under -race).
func (w *streamWatch) stop() {
	w.mu.Lock()
	w.done = true
	// Armed (not idle, not fired) and not stopped in time: its callback is on its way.
	pending := w.timer != nil && !w.timer.Stop() && !w.idle.Load() && !w.fired
	var gone chan struct{}
	if pending {
		gone = make(chan struct{})
		w.gone = gone
	}
	w.mu.Unlock()
	if gone != nil {
		<-gone
	}
}

// bodyProgress enforces ClientBodyTimeout on a request body: each window must deliver
// bodyProgressBytes (or the rest of the body: a read that ends it never times out), and a
// window's clock runs only while a read waits for the client. Its fields belong to the
// goroutine reading the body, but for done, which mu guards (and the watch's own): the
// transport may still read while the handler finishes, and the response writer must not
// be touched after that.
type bodyProgress struct {
	d       clientDeadline
	h2      bool // timed by watch
	watch   streamWatch
	timeout time.Duration
	bytes   int64         // delivered in the current window
	waited  time.Duration // spent waiting for the client in the current window
	eof     bool
	mu      sync.Mutex
	done    bool
}

func (p *bodyProgress) init(dl deadlineSetter, h2 bool, timeout time.Duration) {
	p.d = clientDeadline{dl: dl}
	p.h2 = h2
	p.watch.d = p.d
	p.timeout = timeout
}

func (p *bodyProgress) on() bool { return p.d.dl != nil && !p.eof }

// before makes sure the read starting now fails when the window's time is used up. It
// returns now.
func (p *bodyProgress) before() time.Time {
	now := time.Now()
	due := now.Add(p.timeout - p.waited)
	if p.h2 {
		p.watch.begin(now, due)
	} else if p.d.at.Before(due) {
		p.mu.Lock()
		if !p.done {
			p.d.cover(due, p.timeout/deadlineSlackDiv)
		}
		p.mu.Unlock()
	}
	return now
}

// after accounts a read that started at t0 and returned n bytes and err.
func (p *bodyProgress) after(t0 time.Time, n int, err error) {
	if p.h2 {
		p.watch.end()
	}
	if err == io.EOF {
		// Nothing more to wait for (net/http cleared a connection's read deadline).
		p.eof = true
		return
	}
	p.bytes += int64(n)
	p.waited += time.Since(t0)
	if p.bytes >= bodyProgressBytes {
		p.bytes, p.waited = 0, 0 // the next window starts
	}
}

// expired reports whether the current window's time is used up (after has accounted
// the read that just failed).
func (p *bodyProgress) expired() bool { return p.waited >= p.timeout }

// finish ends the deadline calls: the handler is about to return.
func (p *bodyProgress) finish() {
	p.mu.Lock()
	p.done = true
	p.mu.Unlock()
	if p.h2 {
		p.watch.stop()
	}
}

// sendProgress enforces ClientSendTimeout on the relay's writes to the client, on the
// handler's goroutine; zero, it does nothing. On HTTP/2 a write that is followed by more
// is timed by a streamWatch (made at the first such write); the stream's own deadline is
// set for the last write, and for what is still buffered when the handler returns.
type sendProgress struct {
	d       clientDeadline
	h2      bool
	watch   *streamWatch
	timeout time.Duration
}

func (p *sendProgress) init(dl deadlineSetter, h2 bool, timeout time.Duration) {
	p.d = clientDeadline{dl: dl, write: true}
	p.h2 = h2
	p.timeout = timeout
}

// before makes sure a write starting now fails if it has not completed within the
// timeout; last says whether more writes may follow.
func (p *sendProgress) before(last bool) {
	if p.d.dl == nil {
		return
	}
	now := time.Now()
	if p.h2 && !last {
		if p.watch == nil {
			p.watch = &streamWatch{d: p.d}
		}
		p.watch.begin(now, now.Add(p.timeout))
		return
	}
	p.d.cover(now.Add(p.timeout), p.timeout/deadlineSlackDiv)
}

// after ends a write begun with before(false).
func (p *sendProgress) after() {
	if p.watch != nil {
		p.watch.end()
	}
}

// finish covers what the server writes after the handler (buffered bytes, the end of the
// stream, trailers) when wrote, and ends the watch.
func (p *sendProgress) finish(wrote bool) {
	if p.d.dl == nil {
		return
	}
	if wrote {
		p.d.cover(time.Now().Add(p.timeout), p.timeout/deadlineSlackDiv)
	}
	if p.watch != nil {
		p.watch.stop()
	}
}
