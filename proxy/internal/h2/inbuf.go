package h2

import "sync"

// inChunk is the size of the pooled pieces a stream's received body bytes wait in: the
// default (and usual) largest DATA frame.
const inChunk = defaultMaxFrame

// inChunks pools the pieces across streams and connections.
var inChunks = sync.Pool{New: func() any { return new([inChunk]byte) }}

// inBuf is a stream's received request body bytes not yet read (under c.mu): a queue of
// pooled pieces, each given back as soon as it is read. A body read as it comes keeps
// at most a piece or two per stream; one that waits is held in pieces of its size, not
// in a slice grown by doubling and kept at its largest once read (issue 33: a held
// HTTP/2 body cost the engine's copy besides the reader's).
type inBuf struct {
	pieces []*[inChunk]byte
	off    int // read position in pieces[0]
	end    int // write position in the last piece
	n      int // bytes not yet read
}

// write appends p.
func (b *inBuf) write(p []byte) {
	b.n += len(p)
	for len(p) > 0 {
		if len(b.pieces) == 0 || b.end == inChunk {
			b.pieces = append(b.pieces, inChunks.Get().(*[inChunk]byte))
			b.end = 0
		}
		k := copy(b.pieces[len(b.pieces)-1][b.end:], p)
		b.end += k
		p = p[k:]
	}
}

// read moves up to len(p) bytes into p; pieces read to their end go back to the pool.
func (b *inBuf) read(p []byte) int {
	n := 0
	for n < len(p) && b.n > 0 {
		last := len(b.pieces) == 1
		stop := inChunk
		if last {
			stop = b.end
		}
		k := copy(p[n:], b.pieces[0][b.off:stop])
		n += k
		b.off += k
		b.n -= k
		if b.off == stop {
			b.dropFirst()
		}
	}
	return n
}

// dropFirst gives the first piece back.
func (b *inBuf) dropFirst() {
	inChunks.Put(b.pieces[0])
	b.pieces[0] = nil
	b.pieces = b.pieces[1:]
	b.off = 0
	if len(b.pieces) == 0 {
		b.pieces, b.end = nil, 0
	}
}

// reset drops whatever was not read.
func (b *inBuf) reset() {
	for len(b.pieces) > 0 {
		b.dropFirst()
	}
	b.n = 0
}
