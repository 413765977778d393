package relay

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// pingLoop pings every PingInterval. A pong is recorded by the OnPongReceived hook; a ping
// that gets none is idleLoop's business, so its error is ignored here.
func (p *Peer) pingLoop() {
	t := time.NewTicker(p.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-p.life.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(p.life, p.opts.IdleTimeout)
		if p.conn.Ping(ctx) == nil {
			p.touch()
		}
		cancel()
	}
}

// idleLoop closes the socket once nothing (message, ping or pong) arrived for IdleTimeout.
func (p *Peer) idleLoop() {
	t := time.NewTimer(p.opts.IdleTimeout)
	defer t.Stop()
	for {
		select {
		case <-p.life.Done():
			return
		case <-t.C:
		}
		idle := time.Since(time.Unix(0, p.lastActivity.Load()))
		if idle >= p.opts.IdleTimeout {
			p.log.Warn("relay peer idle; closing", zap.Duration("idle", idle))
			p.idleFired.Store(true)
			_ = p.conn.CloseNow() // the peer is gone: no closing handshake to wait for
			return
		}
		t.Reset(p.opts.IdleTimeout - idle)
	}
}
