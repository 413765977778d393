package h2

import (
	"errors"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Header blocks are decoded here rather than by the Framer's ReadMetaHeaders, which
// costs about 8 allocations per block (a MetaHeadersFrame, its emit closure and the
// variables it captures, and its Fields slice grown by append). The Framer still parses
// every frame, and checks that CONTINUATIONs follow their HEADERS without anything in
// between; hpack.Decoder still does the HPACK. What this file does in the Framer's place
// is the rest of Framer.readMetaFrame and MetaHeadersFrame.checkPseudos
// (golang.org/x/net v0.62.0, http2/frame.go), check for check and in the same order, so
// that every block gets the same answer as before: the same stream or connection error,
// or the same truncated list.
//
// Each fragment is decoded as its frame arrives, as readMetaFrame does, rather than
// collected until END_HEADERS: readMetaFrame's refusal of an oversized fragment depends
// on the decoded size of the fragments before it, and hpack.Decoder keeps a field split
// across fragments itself (bounded by SetMaxStringLength). The limits that readMetaFrame
// left to one ReadFrame call, which used to read a whole block, are re-homed here and in
// readLoop: the block's byte budget and its timeout run from the block's first byte over
// all its frames (budgetReader.refill), and the abuse verdict on a block that goes on
// past the limit counts the block's bytes (headerBlock.bytes, protocolError).

// headerBlock is the header block being read: one HEADERS frame and its CONTINUATIONs.
// It belongs to the read loop (and is used under c.mu, like everything process does).
type headerBlock struct {
	// open: a HEADERS without END_HEADERS was read; its CONTINUATIONs are still to come.
	open bool
	id   uint32
	// endStream is the HEADERS frame's END_STREAM; selfDep, that its priority names
	// the stream itself.
	endStream, selfDep bool
	// bytes counts the block's frames so far, their 9-byte headers and padding included:
	// what one ReadFrame call read when the Framer read the whole block in it.
	bytes int
	// headersLeft and trailersLeft are what is left of MaxHeaderBytes for the decoded
	// list: readMetaFrame counts "trailer" fields apart, and refuses a fragment more than
	// twice the sum of both.
	headersLeft, trailersLeft int64
	sawRegular                bool
	// invalid is the first invalid field's error; emission stops at it.
	invalid error
	// truncated: the list went past MaxHeaderBytes; emission stopped there, decoding
	// went on so that the dynamic table stays in sync.
	truncated bool
	// fields is the decoded list, reused from block to block. The strings are hpack's
	// own (a copy of the frame's bytes, or a table entry): they outlive the block.
	fields []hpack.HeaderField
}

// maxKeptFields bounds the field list a connection keeps for its next block: a rare
// request with hundreds of fields does not make the connection hold their room (up to
// MaxHeaderBytes/32 fields) for the rest of its life.
const maxKeptFields = 64

// The invalid field errors. They are the StreamError's cause, which nobody reads but
// tests: sentinels, so that a refusal allocates nothing (x/net names the field).
var (
	errFieldValue         = errors.New("h2: invalid header field value")
	errFieldName          = errors.New("h2: invalid header field name")
	errPseudoAfterRegular = errors.New("h2: pseudo header field after regular header field")
	errUnknownPseudo      = errors.New("h2: invalid pseudo-header")
	errDuplicatePseudo    = errors.New("h2: duplicate pseudo-header")
	errMixPseudo          = errors.New("h2: mix of request and response pseudo headers")
)

// onHeadersFrame starts a header block. The Framer has checked the frame itself (stream
// id not 0, padding) and that no block was open.
func (c *Conn) onHeadersFrame(f *http2.HeadersFrame) error {
	limit := int64(c.cfg.MaxHeaderBytes)
	c.hb = headerBlock{
		id:          f.StreamID,
		endStream:   f.StreamEnded(),
		selfDep:     f.HasPriority() && f.Priority.StreamDep == f.StreamID,
		bytes:       c.budget.n,
		headersLeft: limit, trailersLeft: limit,
		fields: c.hb.fields[:0],
	}
	c.hdec.SetEmitEnabled(true)
	return c.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded())
}

// onContinuation goes on with the open header block. The Framer has checked that one is
// open and that the frame is on its stream (else a connection error PROTOCOL_ERROR); the
// check here only makes sure of it.
func (c *Conn) onContinuation(f *http2.ContinuationFrame) error {
	if !c.hb.open || f.StreamID != c.hb.id {
		return connError{http2.ErrCodeProtocol, "CONTINUATION out of a header block"}
	}
	c.hb.bytes += c.budget.n
	return c.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded())
}

// headerFragment decodes one fragment of the block and, after the last one, checks the
// list and hands it on: readMetaFrame's loop body and what follows it.
func (c *Conn) headerFragment(frag []byte, end bool) error {
	b := &c.hb
	// Do not decode much more than can be kept: a fragment more than twice what is left
	// of the list (any non-empty one once the list went past the limit) ends the
	// connection. (readMetaFrame adds the two budgets in uint32; int64 here, which only
	// differs for a MaxHeaderBytes above 2 GiB.)
	if int64(len(frag)) > 2*(b.headersLeft+b.trailersLeft) {
		return c.headerBlockError()
	}
	// After an invalid field the sizes are no longer counted: the block may not go on.
	if b.invalid != nil {
		return c.headerBlockError()
	}
	if _, err := c.hdec.Write(frag); err != nil {
		return connError{http2.ErrCodeCompression, "HPACK"}
	}
	if !end {
		b.open = true
		return nil
	}
	b.open = false
	defer c.endHeaderBlock()
	if err := c.hdec.Close(); err != nil {
		return connError{http2.ErrCodeCompression, "HPACK"}
	}
	if b.invalid != nil {
		return c.headerStreamError(b.id, http2.ErrCodeProtocol)
	}
	if checkPseudos(b.fields) != nil {
		return c.headerStreamError(b.id, http2.ErrCodeProtocol)
	}
	return c.onHeaders(b)
}

// endHeaderBlock lets go of the decoded strings (the stream keeps what it needs) and of
// an unusually long list.
func (c *Conn) endHeaderBlock() {
	b := &c.hb
	if cap(b.fields) > maxKeptFields {
		b.fields = nil
	} else {
		clear(b.fields)
		b.fields = b.fields[:0]
	}
	b.bytes = 0
}

// headerBlockError is the connection error PROTOCOL_ERROR that readMetaFrame returns for
// a fragment it refuses to decode, and the verdict readErrorLocked gave it when the
// Framer read whole blocks.
func (c *Conn) headerBlockError() error {
	c.hb.open = false
	return c.protocolError(c.hb.bytes)
}

// protocolError is a connection error PROTOCOL_ERROR raised while reading a header block
// of n bytes so far (the frame at fault included), by the Framer or by headerFragment.
// Past half of MaxHeaderBytes it is a verdict of abuse (reasonHeaderBlockOverLimit),
// exactly as when one ReadFrame call read the block and readErrorLocked counted the
// bytes that call had read.
func (c *Conn) protocolError(n int) error {
	if n > int(c.cfg.MaxHeaderBytes/2) {
		return connError{http2.ErrCodeProtocol, reasonHeaderBlockOverLimit}
	}
	return connError{http2.ErrCodeProtocol, "framer"}
}

// emitField is the hpack.Decoder's emit function for the whole connection (a method
// value made once, not a closure per block): readMetaFrame's, field for field.
func (c *Conn) emitField(f hpack.HeaderField) {
	b := &c.hb
	if !httpguts.ValidHeaderFieldValue(f.Value) || outerWhitespace(f.Value) {
		b.invalid = errFieldValue
	}
	if strings.HasPrefix(f.Name, ":") {
		if b.sawRegular {
			b.invalid = errPseudoAfterRegular
		}
	} else {
		b.sawRegular = true
		if !validWireHeaderFieldName(f.Name) {
			b.invalid = errFieldName
		}
	}
	if b.invalid != nil {
		c.hdec.SetEmitEnabled(false)
		return
	}
	left := &b.headersLeft
	size := int64(len(f.Name) + len(f.Value) + 32) // hpack.HeaderField.Size
	if f.Name == "trailer" {
		// Counted as the fields it names would be (whitespace after the commas
		// included), as readMetaFrame does.
		left = &b.trailersLeft
		n := int64(strings.Count(f.Value, ",") + 1)
		size = int64(len(f.Value)) - n + 1 + 32*n
	}
	if size > *left {
		// Past the limit: the list is kept as it is, the rest of the block is decoded
		// without being emitted (the dynamic table must stay in sync), and any
		// further non-empty CONTINUATION ends the connection.
		c.hdec.SetEmitEnabled(false)
		b.truncated = true
		b.headersLeft, b.trailersLeft = 0, 0
		return
	}
	*left -= size
	b.fields = append(b.fields, f)
}

// outerWhitespace reports a value that starts or ends with SP or HTAB, which RFC 9113
// §8.2.1 forbids (the request is malformed). x/net's Framer accepts such values; an
// HTTP/1.1 target would strip the whitespace, an HTTP/2 or HTTP/3 one (or a log, or a
// route lookup) might not, so the same request could mean two things.
func outerWhitespace(v string) bool {
	if v == "" {
		return false
	}
	first, last := v[0], v[len(v)-1]
	return first == ' ' || first == '\t' || last == ' ' || last == '\t'
}

// validWireHeaderFieldName reports a field name HTTP/2 allows on the wire (RFC 9113
// §8.2.1, the rule x/net's Framer applies): a non-empty token without upper case letters.
func validWireHeaderFieldName(v string) bool {
	if len(v) == 0 {
		return false
	}
	for _, r := range v {
		if !httpguts.IsTokenRune(r) {
			return false
		}
		if 'A' <= r && r <= 'Z' {
			return false
		}
	}
	return true
}

// checkPseudos is MetaHeadersFrame.checkPseudos: the pseudo-headers (all at the front,
// emitField saw to that) are known ones, none twice, not both a request's and a
// response's.
func checkPseudos(fields []hpack.HeaderField) error {
	var isRequest, isResponse bool
	for i, f := range fields {
		if !f.IsPseudo() {
			break
		}
		switch f.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			isRequest = true
		case ":status":
			isResponse = true
		default:
			return errUnknownPseudo
		}
		for _, g := range fields[:i] { // at most 5 of them
			if f.Name == g.Name {
				return errDuplicatePseudo
			}
		}
	}
	if isRequest && isResponse {
		return errMixPseudo
	}
	return nil
}

// headerStreamError answers a stream error on a header block's stream: readMetaFrame's
// StreamError, and any the Framer returns. A HEADERS that would have opened a stream
// still used its id.
func (c *Conn) headerStreamError(id uint32, code http2.ErrCode) error {
	if st := c.streams[id]; st != nil {
		return c.streamError(st, code)
	}
	if id%2 == 1 && id > c.maxSeen {
		if c.goingAway {
			// Above the GOAWAY's last stream id: ignored, as a valid one would be, and
			// charged as one (onHeaders).
			c.maxSeen = id
			return c.spendReset()
		}
		c.maxSeen = id
	} else if ignored, err := c.ignoreLate(id, true); ignored {
		return err // a bad block on a stream we reset: ignored as well
	}
	return c.refuse(id, code)
}
