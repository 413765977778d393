package upstream

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Pools holds the idle connections of every target address ("ip:port"), each in a LIFO
// stack of at most Limits.MaxIdle behind a small mutex of its own (no lock is shared
// between targets; the address-to-pool lookup is a sync.Map read). Connections idle for
// Limits.IdleTimeout are closed lazily at Get and by Sweep (Janitor runs it). Idle
// connections hold no buffers.
//
// All methods are safe for concurrent use.
type Pools struct {
	Limits
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	pools  sync.Map // target address -> *pool
	closed atomic.Bool
}

// New returns empty pools that dial with dial.
func New(l Limits, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *Pools {
	return &Pools{Limits: l, dial: dial}
}

// Get returns an idle connection to addr that is still good at now, or nil.
func (ps *Pools) Get(addr string, now time.Time) *Conn {
	return ps.pool(addr).get(ps.IdleTimeout, now)
}

// Dial opens a new connection to addr, which Put may later keep in addr's pool.
func (ps *Pools) Dial(ctx context.Context, addr string) (*Conn, error) {
	nc, err := ps.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return newConn(nc, ps.pool(addr)), nil
}

// Put ends uc's exchange at now: it goes back to its pool when keep says the exchange
// ended cleanly and the pools are not closed, else it is closed.
func (ps *Pools) Put(uc *Conn, keep bool, now time.Time) {
	if keep && uc.pool != nil && !ps.closed.Load() {
		uc.idleAt = now
		if uc.pool.put(uc, ps.MaxIdle) {
			return
		}
	}
	uc.Close()
}

// Idle returns the number of idle connections to addr.
func (ps *Pools) Idle(addr string) int {
	v, ok := ps.pools.Load(addr)
	if !ok {
		return 0
	}
	p := v.(*pool)
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

func (ps *Pools) pool(addr string) *pool {
	if v, ok := ps.pools.Load(addr); ok {
		return v.(*pool)
	}
	v, _ := ps.pools.LoadOrStore(addr, new(pool))
	return v.(*pool)
}

// Sweep closes connections idle since before now-IdleTimeout and forgets pools that
// stayed empty for two sweeps in a row.
func (ps *Pools) Sweep(now time.Time) {
	var expired []*Conn
	ps.pools.Range(func(k, v any) bool {
		p := v.(*pool)
		p.mu.Lock()
		kept := p.idle[:0]
		for _, uc := range p.idle {
			if now.Sub(uc.idleAt) >= ps.IdleTimeout {
				expired = append(expired, uc)
			} else {
				kept = append(kept, uc)
			}
		}
		clear(p.idle[len(kept):])
		p.idle = kept
		if len(kept) > 0 {
			p.emptySweeps = 0
		} else if p.emptySweeps++; p.emptySweeps >= 2 {
			p.dead = true
			ps.pools.CompareAndDelete(k, p)
		}
		p.mu.Unlock()
		return true
	})
	for _, uc := range expired {
		uc.Close()
	}
}

// Janitor sweeps every half idle timeout until ctx is done.
func (ps *Pools) Janitor(ctx context.Context, now func() time.Time) {
	t := time.NewTicker(ps.IdleTimeout / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ps.Sweep(now())
		}
	}
}

// CloseIdle closes every idle connection, and connections that finish later close
// instead of going idle (shutdown).
func (ps *Pools) CloseIdle() {
	ps.closed.Store(true)
	var all []*Conn
	ps.pools.Range(func(k, v any) bool {
		p := v.(*pool)
		p.mu.Lock()
		all = append(all, p.idle...)
		clear(p.idle)
		p.idle = p.idle[:0]
		p.dead = true
		p.mu.Unlock()
		ps.pools.CompareAndDelete(k, p)
		return true
	})
	for _, uc := range all {
		uc.Close()
	}
}

// Closed reports whether CloseIdle was called.
func (ps *Pools) Closed() bool { return ps.closed.Load() }

// pool is one target's idle connections, oldest first (LIFO: the warmest is reused).
type pool struct {
	mu          sync.Mutex
	idle        []*Conn
	dead        bool // dropped by Sweep or CloseIdle: put refuses
	emptySweeps uint8
}

// get pops the most recently idled connection, or nil. When that one has expired, every
// idle connection has (they are ordered), and all are closed.
func (p *pool) get(idleTimeout time.Duration, now time.Time) *Conn {
	for {
		var uc *Conn
		var expired []*Conn
		p.mu.Lock()
		if n := len(p.idle); n > 0 {
			if top := p.idle[n-1]; now.Sub(top.idleAt) < idleTimeout {
				uc = top
				p.idle[n-1] = nil
				p.idle = p.idle[:n-1]
			} else {
				expired = slices.Clone(p.idle)
				clear(p.idle)
				p.idle = p.idle[:0]
			}
		}
		p.mu.Unlock()
		for _, c := range expired {
			c.Close()
		}
		// Every reuse, whatever the idle age, first checks the connection for a FIN or
		// stray bytes (one non-blocking peek): bytes that arrived after the previous
		// response ended (a second answer after a 204, a body after a HEAD answer) are
		// not the next request's answer, and a target with a short keep-alive timeout
		// (Node.js: 5 s) does not turn a non-retryable request into a 502.
		if uc == nil {
			return nil
		}
		if uc.rc == nil || !uc.probe.run(uc.rc) {
			uc.reused = true
			return uc
		}
		uc.Close()
	}
}

func (p *pool) put(uc *Conn, max int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead || len(p.idle) >= max {
		return false
	}
	p.idle = append(p.idle, uc)
	return true
}
