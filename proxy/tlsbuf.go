package proxy

import (
	"bytes"
	"crypto/tls"
	"reflect"
	"unsafe"
)

// Dropping what crypto/tls keeps of its read buffers while a connection is parked.
//
// A tls.Conn keeps its record input buffer (rawInput) and its handshake message buffer
// (hand) for as long as it lives: two bytes.Buffers that grew to hold the ClientHello
// (1.5–2 KiB each with a post-quantum key share) and hold nothing once the handshake is
// done and every record read was consumed. That is about 3.5 KiB of the 7.8 KiB of Go
// memory a parked TLS connection holds otherwise (bench/README.md). crypto/tls offers no
// way to give them back, so a park drops them through the fields themselves, which
// tlsBufs finds by name and type (reflect) when the package loads: should a Go release
// rename or retype them, nothing is dropped and nothing else changes (and
// TestTLSBuffersDropped fails, so that someone looks). Only empty buffers are dropped,
// only while no goroutine uses the connection (parked: h1idle.go), and crypto/tls grows
// fresh ones at the next read, as for a new connection.

// tlsBufs are the offsets in tls.Conn of rawInput and hand (bytes.Buffer) and of input
// (bytes.Reader, which may point into rawInput's array); ok is false when tls.Conn has
// no such fields.
var tlsBufs = func() (b struct {
	rawInput, hand, input uintptr
	ok                    bool
}) {
	t := reflect.TypeFor[tls.Conn]()
	field := func(name string, typ reflect.Type) (uintptr, bool) {
		f, ok := t.FieldByName(name)
		return f.Offset, ok && f.Type == typ && len(f.Index) == 1
	}
	var ok1, ok2, ok3 bool
	b.rawInput, ok1 = field("rawInput", reflect.TypeFor[bytes.Buffer]())
	b.hand, ok2 = field("hand", reflect.TypeFor[bytes.Buffer]())
	b.input, ok3 = field("input", reflect.TypeFor[bytes.Reader]())
	b.ok = ok1 && ok2 && ok3
	return b
}()

// dropTLSBuffers lets go of tc's input buffers when they hold nothing; the caller owns
// tc (no Read, Write, Handshake or Close on it meanwhile). It reports whether it did.
func dropTLSBuffers(tc *tls.Conn) bool {
	if !tlsBufs.ok || tc == nil {
		return false
	}
	p := unsafe.Pointer(tc)
	raw := (*bytes.Buffer)(unsafe.Add(p, tlsBufs.rawInput))
	hand := (*bytes.Buffer)(unsafe.Add(p, tlsBufs.hand))
	input := (*bytes.Reader)(unsafe.Add(p, tlsBufs.input))
	if raw.Len() != 0 || hand.Len() != 0 || input.Len() != 0 {
		return false // part of a record, or data not read yet: kept as it is
	}
	*raw, *hand = bytes.Buffer{}, bytes.Buffer{}
	input.Reset(nil)
	return true
}

// tlsHeld reports whether tc holds record bytes it took from the socket and has not
// decrypted yet (part of a record); ok is false when tls.Conn's fields are not known
// (tlsBufs). Only tc's reader may ask.
func tlsHeld(tc *tls.Conn) (held, ok bool) {
	if !tlsBufs.ok || tc == nil {
		return false, false
	}
	return (*bytes.Buffer)(unsafe.Add(unsafe.Pointer(tc), tlsBufs.rawInput)).Len() > 0, true
}
