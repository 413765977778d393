package h2

// Frames that arrive on a stream after the engine is done with it (issue 25).
//
// RFC 9113 §5.1: once an endpoint sent RST_STREAM it MUST ignore the frames it then
// receives on the stream, which the peer may have sent before the reset reached it
// (request trailers, the rest of a body); it MAY limit how long it does so. Other frames
// on closed streams stay errors where the RFC says so: HEADERS on a stream that both
// sides ended, or that the client reset, is a connection error STREAM_CLOSED.
//
// The engine keeps no state for closed streams, so it remembers the ids of the last
// streams it reset (resetMemory of them, a ring filled as RST_STREAMs are queued): a
// frame on one of those is ignored. That is the limited period the RFC allows, counted
// in resets rather than time; a frame on a stream reset longer ago is judged as before.
//
// Ignoring is not free for the client: the first frame ignored on a stream costs a reset
// token (Config.ResetBurst), any further one a junk token (Config.JunkBurst: a body in
// flight when its stream was reset is one DATA frame per 16 KiB, and each is charged),
// except a header block, which costs a reset token every time (there is one, the
// trailers, on a stream at most).
// A request above the last stream id of a GOAWAY we sent is ignored too, and costs a
// reset token, as a stream refused for concurrency does (onHeaders): a browser has a
// few in flight when the GOAWAY arrives, a client that goes on sending them is a flood.
// A RST_STREAM from the client on a stream whose handler already returned, or that is
// already closed, costs a reset token too (onReset), exactly as one that arrives while
// the handler works: a flood of HEADERS, each followed by RST_STREAM once its answer
// came, ends with ENHANCE_YOUR_CALM like any rapid reset.

// resetMemory is how many reset stream ids a connection remembers: twice the default
// MaxConcurrentStreams, so that every stream of two full rounds of resets (a client's
// body still in flight for each) is still known when its frames arrive.
const resetMemory = 256

// chargedBit marks a remembered id whose first ignored frame was charged (stream ids
// are 31 bits).
const chargedBit = 1 << 31

// noteReset remembers that the engine queued RST_STREAM for id (c.mu held). The ring
// is made on the first reset, so that connections that never reset a stream do not pay
// for it.
func (c *Conn) noteReset(id uint32) {
	if c.resetIDs == nil {
		c.resetIDs = new([resetMemory]uint32)
	}
	c.resetIDs[c.resetNext] = id
	c.resetNext = (c.resetNext + 1) % resetMemory
}

// wasReset reports whether id is one of the streams the engine reset last.
func (c *Conn) wasReset(id uint32) (i int, ok bool) {
	if c.resetIDs == nil {
		return 0, false
	}
	for i, v := range c.resetIDs {
		if v&^chargedBit == id {
			return i, true
		}
	}
	return 0, false
}

// ignoreLate reports whether a frame on the closed stream id is to be ignored: the
// stream is above the last stream id of a GOAWAY we sent (RFC 9113 §6.8), or one the
// engine reset recently (RFC 9113 §5.1). err is the charge's verdict. A header block
// (head) costs a reset token every time: a stream has one late block at most (its
// trailers, which end it), and each was decoded. Any other frame costs a junk token on
// a stream above the GOAWAY's id; on a reset one, a reset token for the first frame
// ignored and a junk token for each later one (a body in flight is many DATA frames).
func (c *Conn) ignoreLate(id uint32, head bool) (ignored bool, err error) {
	if c.goingAway && id > c.goawayID {
		if head {
			return true, c.spendReset()
		}
		return true, c.spendJunk()
	}
	i, ok := c.wasReset(id)
	if !ok {
		return false, nil
	}
	if c.resetIDs[i]&chargedBit != 0 && !head {
		return true, c.spendJunk()
	}
	c.resetIDs[i] |= chargedBit
	return true, c.spendReset()
}
