package h2

import (
	"errors"
	"time"

	"golang.org/x/net/http2"
)

// errAborted is what Serve returns for a connection ended with Abort.
var errAborted = errors.New("h2: connection ended for abuse (Abort)")

// abortGrace bounds how long an aborted connection's writer may take to get its GOAWAY
// out: then the socket is closed whatever the writer is doing (a client that does not
// read keeps its socket's buffers full).
const abortGrace = 250 * time.Millisecond

// Abort ends the connection now for abuse; any goroutine may call it (the caller's
// verdict on the client, e.g. a penalty of its address, reaching connections it already
// holds). A GOAWAY(ENHANCE_YOUR_CALM) with the last stream id seen is queued, every open
// stream is reset (its handler's context cancelled, its Read and Write fail), nothing
// more the client sent is handled, and the socket is closed once the GOAWAY is written,
// after abortGrace at the latest, unread data and all (the client gets a TCP reset
// rather than a drain). Serve returns errAborted once every handler has returned.
// Config.OnAbuse is not told: the verdict is the caller's. A second call, or one after
// the connection ended, does nothing.
func (c *Conn) Abort() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead || c.aborted {
		return
	}
	c.aborted, c.abused = true, true
	if !c.goingAway {
		c.goAwayLocked(http2.ErrCodeEnhanceYourCalm)
	} else if c.goawayCode != http2.ErrCodeEnhanceYourCalm {
		// A graceful GOAWAY went first: a second one carries the verdict.
		c.ctrl = append(c.ctrl, item{kind: itGoAway, id: c.goawayID, code: http2.ErrCodeEnhanceYourCalm})
		c.goawayCode = http2.ErrCodeEnhanceYourCalm
	}
	for _, st := range c.streams {
		st.resetLocked(ErrConnClosed)
		c.closeStream(st)
	}
	// The writer sends what control frames are queued (the GOAWAY) and ends; the read
	// loop wakes from its read and ends too (readTimeout, readLoop).
	c.closing = true
	c.wake.Signal()
	_ = c.nc.SetReadDeadline(time.Now())
	c.abortTimer = time.AfterFunc(abortGrace, c.Close)
}
