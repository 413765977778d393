package proxy

import (
	"io"
)

// Request bodies held before a target is chosen (Config.RequestBuffer).
//
// A body sent to its target as it comes reaches the target cut when the client's framing
// turns out broken half-way (a malformed chunk, an HTTP/2 or HTTP/3 body shorter or longer
// than its content-length, a reset): the target has the head and part of the body, and
// its connection is lost. So the core reads the first bytes of every body before the
// target walk starts (holdBody): up to the bound, and one byte more to learn whether the
// body ends within it. A body that ends within the bound is whole, and its framing was
// checked by the front-end's reader as it was read (net/http's chunked reader and its
// Content-Length, the own HTTP/2 engine's and quic-go's checks of content-length
// against the DATA received: a stated length is read past once, for the body's end,
// trackedBody.readEnd); one that fails is answered without any target having seen it
// (400 for a malformed body, 408 when it stalled, nothing when the client left; HTTP/2
// and HTTP/3 reset the stream of a body that does not match its content-length, as
// their RFCs say, and it is recorded as 400). A larger body goes out as before, its held bytes
// first: the uploader (h2upload.go) sends what is held, then reads on from the client.
//
// Every front-end that sends a body through the uploader shares this (the own HTTP/2
// engine, net/http's HTTP/1.1 hand-offs and HTTP/3); the fast HTTP/1.1 path holds its
// bodies (Content-Length, with the head within h1ReadBuf) in its read buffer already,
// and hands chunked and larger ones to net/http.
//
// Held bytes live in bufPool's buffers, taken as the body grows and given back when
// the exchange is over (release); a request without a body takes none. Each buffer is
// counted against the bound over all requests (Config.RequestBufferTotal, bounds.go):
// a body that finds it spent holds no more and streams, as a larger one does.

// holdRoom is what one pooled buffer holds of a body: the rest is room for a chunk's
// size line before the data and its CRLF after it (uploader.send frames in place).
const holdRoom = copyBufSize - chunkPre - 2

// chunkPre is the room before a buffer's data for a chunk's size line and its CRLF.
const chunkPre = 18

// holdBody reads the start of up's body before a target is chosen: until it ended or
// more than bound bytes are held (Server.bodyBound; 0 holds nothing). It reports the
// outcome to answer when reading the body failed: then no target is tried. A request
// without a body (up nil) costs nothing.
//
// A body announced with Expect: 100-continue and a content-length beyond the bound is
// not held: it could not be checked whole anyway, and its target still decides
// whether it wants it before the client sends it (the uploader waits for the 100).
// Any other expectation is answered by whoever reads the body first: net/http's
// HTTP/1.1 server and the own HTTP/2 engine send the client its 100 at the first read,
// and the body, once held, follows the head at once.
func (s *Server) holdBody(up *uploader) (outcome, bool) {
	bound := s.bodyBound
	if up == nil || bound <= 0 || up.expect && up.length > bound {
		return 0, false
	}
	up.expect = false
	up.held = up.holdArr[:0]
	for up.heldN <= bound {
		i, off := int(up.heldN/holdRoom), int(up.heldN%holdRoom)
		if i == len(up.held) {
			if !s.takeHeld(copyBufSize) {
				// All requests together hold their bound (bounds.go): this body
				// streams, what it holds first.
				return 0, false
			}
			up.srv = s
			up.held = append(up.held, bufPool.Get().(*[copyBufSize]byte))
		}
		want := int(min(int64(holdRoom-off), bound+1-up.heldN))
		n, err := up.src.Read(up.held[i][chunkPre+off : chunkPre+off+want])
		up.heldN += int64(n)
		if err == io.EOF {
			up.whole = true
			return 0, false
		}
		if err != nil {
			up.clientErr = err
			return up.src.failure(err), true
		}
	}
	return 0, false
}

// release gives the buffers holding the body back to their pool; the upload must be
// over (end), or never started.
func (u *uploader) release() {
	for i, b := range u.held {
		bufPool.Put(b)
		u.held[i] = nil
		u.srv.giveHeld(copyBufSize)
	}
	u.held, u.heldN, u.whole = nil, 0, false
}

// taken reports whether body bytes were read from the client that are no longer held:
// then the request cannot go to another target, nor be sent again.
func (u *uploader) taken() bool { return u != nil && u.took.Load() }

// rewindable reports a request without a body, or whose body is held whole: it can be
// sent again as it was (upstream.Replayable then judges its method).
func (u *uploader) rewindable() bool { return u == nil || u.whole }
