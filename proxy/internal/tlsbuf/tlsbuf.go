// Package tlsbuf drops what crypto/tls keeps of its read buffers while a connection is
// idle, and tells whether crypto/tls holds part of a record. It is the proxy's one
// reflect access to crypto/tls's unexported fields, kept apart so that a Go release
// that renames them fails here (TestFieldsKnown) and nowhere else.
//
// A tls.Conn keeps its record input buffer (rawInput) and its handshake message buffer
// (hand) for as long as it lives: two bytes.Buffers that grew to hold the ClientHello
// (1.5–2 KiB each with a post-quantum key share) and hold nothing once the handshake is
// done and every record read was consumed. That is about 3.5 KiB of the 7.8 KiB of Go
// memory a parked TLS connection holds otherwise (bench/README.md). crypto/tls offers no
// way to give them back, so [Drop] empties the fields themselves, which the package
// finds by name and type (reflect) when it loads: should a Go release rename or retype
// them, nothing is dropped and nothing else changes ([Known] is false). Only empty
// buffers are dropped, only by the connection's owner while nothing else uses it, and
// crypto/tls grows fresh ones at the next read, as for a new connection.
package tlsbuf

import (
	"bytes"
	"crypto/tls"
	"reflect"
	"unsafe"
)

// fields are the offsets in tls.Conn of rawInput and hand (bytes.Buffer) and of input
// (bytes.Reader, which may point into rawInput's array); ok is false when tls.Conn has
// no such fields.
var fields = func() (b struct {
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

// Known reports whether this Go release's tls.Conn has the fields the package uses.
func Known() bool { return fields.ok }

// Drop lets go of tc's input buffers when they hold nothing; the caller owns tc (no
// Read, Write, Handshake or Close on it meanwhile). It reports whether it did.
func Drop(tc *tls.Conn) bool {
	if !fields.ok || tc == nil {
		return false
	}
	p := unsafe.Pointer(tc)
	raw := (*bytes.Buffer)(unsafe.Add(p, fields.rawInput))
	hand := (*bytes.Buffer)(unsafe.Add(p, fields.hand))
	input := (*bytes.Reader)(unsafe.Add(p, fields.input))
	if raw.Len() != 0 || hand.Len() != 0 || input.Len() != 0 {
		return false // part of a record, or data not read yet: kept as it is
	}
	*raw, *hand = bytes.Buffer{}, bytes.Buffer{}
	input.Reset(nil)
	return true
}

// Held reports whether tc holds record bytes it took from the socket and has not
// decrypted yet (part of a record); ok is false when the fields are not known. Only
// tc's reader may ask.
func Held(tc *tls.Conn) (held, ok bool) {
	if !fields.ok || tc == nil {
		return false, false
	}
	return (*bytes.Buffer)(unsafe.Add(unsafe.Pointer(tc), fields.rawInput)).Len() > 0, true
}

// Forget makes the package act as if the fields were not known, for tests of what a
// caller does then, and returns the undo. Call it before anything uses the package
// concurrently, and undo it after.
func Forget() (undo func()) {
	known := fields.ok
	fields.ok = false
	return func() { fields.ok = known }
}
