package h2

import (
	"context"
	"sync"
	"time"
)

// streamCtx is a stream's context.Context, reused with the Stream (no allocation per
// stream): cancelled once, when the stream is reset, the connection ends or the handler
// returns. Once someone asked for its Done channel or registered a function (which is
// what context.WithCancel and context.AfterFunc do), it may be read after the stream
// ended, by functions running after the cancel: it is then not reused (escaped). Its
// Done channel is made only when someone asks for it, and it implements AfterFunc, so that context.AfterFunc and children made with context.WithCancel
// register a function here instead of starting a goroutine. Values come from the
// connection's context; it has no deadline.
type streamCtx struct {
	parent context.Context // for Value only
	mu     sync.Mutex
	done   chan struct{} // nil until Done is called
	err    error
	afters []*afterFunc
	// escaped: Done or AfterFunc was called (under mu).
	escaped bool
}

type afterFunc struct {
	f    func()
	ctx  *streamCtx
	once sync.Once
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *streamCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *streamCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.escaped = true
	if c.done == nil {
		if c.err != nil {
			return closedChan
		}
		c.done = make(chan struct{})
	}
	return c.done
}

func (c *streamCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *streamCtx) Value(key any) any { return c.parent.Value(key) }

// AfterFunc arranges for f to run in its own goroutine once c is cancelled (at once if
// it is); stop unregisters it, reporting whether it did so before f started.
func (c *streamCtx) AfterFunc(f func()) (stop func() bool) {
	a := &afterFunc{f: f, ctx: c}
	c.mu.Lock()
	c.escaped = true
	if c.err != nil {
		c.mu.Unlock()
		a.start()
		return a.stop
	}
	c.afters = append(c.afters, a)
	c.mu.Unlock()
	return a.stop
}

func (a *afterFunc) start() {
	a.once.Do(func() { go a.f() })
}

func (a *afterFunc) stop() bool {
	stopped := false
	a.once.Do(func() { stopped = true })
	if stopped {
		c := a.ctx
		c.mu.Lock()
		for i, x := range c.afters {
			if x == a {
				c.afters = append(c.afters[:i], c.afters[i+1:]...)
				break
			}
		}
		c.mu.Unlock()
	}
	return stopped
}

// cancel ends c with context.Canceled (only the first call counts).
func (c *streamCtx) cancel() {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = context.Canceled
	if c.done != nil {
		close(c.done)
	}
	afters := c.afters
	c.afters = nil
	c.mu.Unlock()
	for _, a := range afters {
		a.start()
	}
}

// reusable reports whether c may serve another stream (after its cancel); if so it is
// cleared for it.
func (c *streamCtx) reusable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.escaped {
		return false
	}
	c.parent, c.done, c.err, c.afters = nil, nil, nil, nil
	return true
}
