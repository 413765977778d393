package h2

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestInBufKeepsOrderAndGivesBack: bytes come out of an inBuf in the order they went in,
// whatever the sizes written and read, and a buffer read to its end keeps no piece (a
// held body is held once: issue 33).
func TestInBufKeepsOrderAndGivesBack(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var b inBuf
	var in, out bytes.Buffer
	for round := range 400 {
		if rng.IntN(2) == 0 {
			p := make([]byte, rng.IntN(3*inChunk))
			for i := range p {
				p[i] = byte(in.Len() + i)
			}
			in.Write(p)
			b.write(p)
		} else {
			p := make([]byte, rng.IntN(2*inChunk)+1)
			n := b.read(p)
			out.Write(p[:n])
		}
		if b.n != in.Len()-out.Len() {
			t.Fatalf("round %d: %d bytes unread, want %d", round, b.n, in.Len()-out.Len())
		}
		if want := (b.n + b.off + inChunk - 1) / inChunk; b.n > 0 && len(b.pieces) > want+1 {
			t.Fatalf("round %d: %d pieces for %d unread bytes", round, len(b.pieces), b.n)
		}
	}
	rest := make([]byte, b.n)
	out.Write(rest[:b.read(rest)])
	if !bytes.Equal(in.Bytes(), out.Bytes()) {
		t.Fatal("bytes read differ from the bytes written")
	}
	if b.n != 0 || b.pieces != nil {
		t.Fatalf("read to its end, the buffer keeps %d bytes in %d pieces", b.n, len(b.pieces))
	}
	b.write(make([]byte, 3*inChunk+1))
	b.reset()
	if b.n != 0 || b.pieces != nil {
		t.Fatalf("reset keeps %d bytes in %d pieces", b.n, len(b.pieces))
	}
}
