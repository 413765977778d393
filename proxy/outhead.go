package proxy

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"strconv"

	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/internal/ascii"
	"github.com/serve-zone/ingress/proxy/internal/h1wire"
	"github.com/serve-zone/ingress/proxy/internal/upstream"
)

// The outgoing request head: what every front-end's request becomes at the target,
// written here once. A front-end classifies its fields into h1wire's kinds (its parser
// does: h1wire.ParseRequest, or h1wire.RequestFieldKind for HTTP/2, HTTP/3 and net/http's
// fields) and says what it knows beyond them (outHead); requestFieldRules decides what
// each kind becomes, and appendHead writes the head.

// fieldRule is what a request field of one kind becomes at the target.
type fieldRule uint8

const (
	fwdKeep    fieldRule = iota // forwarded as it came
	fwdDrop                     // hop-by-hop (or named by Connection), or a forwarding look-alike
	fwdDerived                  // Host and the framing fields: written from what is forwarded
	fwdTE                       // TE: "trailers" goes on when the client asked for it, once
	fwdChain                    // X-Forwarded-For, Forwarded: extended from a trusted proxy, else replaced
	fwdTrusted                  // X-Forwarded-Proto, -Host, X-Real-Ip: kept from a trusted proxy only
	fwdAside                    // Expect, Upgrade: the body's or the tunnel's business, written by them
)

// requestFieldRules is the forwarding-field table: one rule per field kind, for every
// front-end. Trusted proxies (--trusted-proxies) only change what fwdChain and fwdTrusted
// do (appendForwarding, headers.go).
var requestFieldRules = func() (t [256]fieldRule) {
	t[h1wire.KindDrop] = fwdDrop
	t[h1wire.KindConnection] = fwdDrop
	t[h1wire.KindKeepAlive] = fwdDrop
	t[h1wire.KindHost] = fwdDerived
	t[h1wire.KindContentLength] = fwdDerived
	t[h1wire.KindTransferEncoding] = fwdDerived
	t[h1wire.KindTE] = fwdTE
	t[h1wire.KindXFF] = fwdChain
	t[h1wire.KindForwarded] = fwdChain
	t[h1wire.KindXFProto] = fwdTrusted
	t[h1wire.KindXFHost] = fwdTrusted
	t[h1wire.KindXRealIP] = fwdTrusted
	t[h1wire.KindHandoff] = fwdAside
	return t
}()

// headFields is a request's fields, in a front-end's representation, as appendHead reads
// them (and appendForwarding, through fieldSource).
type headFields interface {
	fieldSource
	count() int
	kind(i int) uint8
	name(i int) []byte
	value(i int) []byte
	// appendField appends field i as "name: value" the way this representation carries it.
	appendField(b []byte, i int) []byte
}

// outHead is what a front-end knows of a request beyond its fields.
type outHead struct {
	method, target, host string // target as it goes on the request line; host from Host or :authority
	// The body: body says one follows, of length bytes (-1: unknown, sent chunked).
	// Without one, zeroLength still writes "Content-Length: 0" (a client that stated it,
	// or a method that defines content).
	body       bool
	length     int64
	zeroLength bool
	te         bool // the client asked for trailers (TE: trailers)
	trailers   bool // the body may end with trailers: announced ones go on, chunked
	// upgrade makes the request a WebSocket upgrade (Connection: Upgrade, Upgrade:
	// websocket); newKey adds a Sec-WebSocket-Key of our own (an extended CONNECT has
	// none: its stream is the proof).
	upgrade, newKey bool
	fwd             forwardedFor
}

// headPlan is what appendHead found that the body's sender and the replay rule need.
type headPlan struct {
	chunked bool // the body goes chunked (length unknown, or trailers announced)
	expect  bool // Expect: 100-continue went with a body
	keyed   bool // an idempotency key went on (upstream.IdempotencyKey)
}

// writeHead writes p's outgoing head for src and p.oh (appendHead) into p's upWork and
// notes an idempotency key for the replay rule (mayResend).
func writeHead[S headFields](p *pipe, src S) headPlan {
	b, plan := appendHead(p.w.wb[:0], src, &p.oh)
	p.w.wb, p.keyed = b, plan.keyed
	return plan
}

// appendHead appends the outgoing HTTP/1.1 request head for src and h to b: the request
// line, Host, the client's fields by requestFieldRules, the upgrade fields, the framing
// of the body as it will be sent (derived from it, never copied), this hop's forwarding
// fields (appendForwarding) and the blank line.
func appendHead[S headFields](b []byte, src S, h *outHead) ([]byte, headPlan) {
	var plan headPlan
	b = append(b, h.method...)
	b = append(b, ' ')
	b = append(b, h.target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, h.host...)
	b = append(b, "\r\n"...)
	trusted := h.fwd.keepsClientForwarding()
	trailers := 0
	for i, n := 0, src.count(); i < n; i++ {
		switch requestFieldRules[src.kind(i)] {
		case fwdKeep:
			plan.keyed = plan.keyed || upstream.IdempotencyKey(src.name(i))
		case fwdTrusted:
			if !trusted {
				continue
			}
		case fwdDrop:
			if h.trailers && ascii.EqualLower(src.name(i), "trailer") && len(appendTrailerNames(nil, src.value(i))) > 0 {
				trailers++ // announced request trailers go on with a chunked body, below
			}
			continue
		case fwdAside:
			if !h.body || !ascii.EqualLower(src.name(i), "expect") {
				continue
			}
			plan.expect = true // only 100-continue gets this far; the target answers it
		default: // fwdDerived, fwdTE, fwdChain: written below
			continue
		}
		b = src.appendField(b, i)
		b = append(b, "\r\n"...)
	}
	if h.te {
		b = append(b, "Te: trailers\r\n"...)
	}
	if h.upgrade {
		b = append(b, "Connection: Upgrade\r\nUpgrade: websocket\r\n"...)
		if h.newKey {
			var key [16]byte
			_, _ = rand.Read(key[:])
			b = append(b, "Sec-Websocket-Key: "...)
			b = base64.StdEncoding.AppendEncode(b, key[:])
			b = append(b, "\r\n"...)
		}
	}
	switch {
	case h.body && (h.length < 0 || h.trailers && trailers > 0):
		plan.chunked = true
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
		for i, n := 0, src.count(); i < n && trailers > 0; i++ {
			if requestFieldRules[src.kind(i)] == fwdDrop && ascii.EqualLower(src.name(i), "trailer") {
				if names := appendTrailerNames(nil, src.value(i)); len(names) > 0 {
					b = append(b, "Trailer: "...)
					b = append(b, names...)
					b = append(b, "\r\n"...)
				}
			}
		}
	case h.body || h.zeroLength:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, max(h.length, 0), 10)
		b = append(b, "\r\n"...)
	}
	b = appendForwarding(b, src, h.fwd)
	return append(b, "\r\n"...), plan
}

// appendTrailerNames appends, comma-separated, the names of an announcement of request
// trailers that a trailer may carry to an HTTP/1.1 target: tokens that are neither
// hop-by-hop nor framing, routing or forwarding fields (the rule uploader.finish applies
// to the trailers themselves).
func appendTrailerNames(b, value []byte) []byte {
	start := len(b)
	for len(value) > 0 {
		var name []byte
		if i := bytes.IndexByte(value, ','); i >= 0 {
			name, value = value[:i], value[i+1:]
		} else {
			name, value = value, nil
		}
		name = bytes.Trim(name, " \t")
		if !isToken(name) || h1wire.IsHopByHop(name) || h1wire.RequestFieldKind(name) != h1wire.KindOther {
			continue
		}
		if len(b) > start {
			b = append(b, ", "...)
		}
		b = append(b, name...)
	}
	return b
}

// h1Fields are the fast path's request fields: a field goes on as it was sent (name,
// colon, whitespace and value).
type h1Fields struct{ req *h1wire.Request }

func (h h1Fields) count() int         { return len(h.req.Fields) }
func (h h1Fields) kind(i int) uint8   { return h.req.Fields[i].Kind }
func (h h1Fields) name(i int) []byte  { return h.req.Fields[i].Name(h.req.Head) }
func (h h1Fields) value(i int) []byte { return h.req.Fields[i].Value(h.req.Head) }
func (h h1Fields) hasKind(k uint8) bool {
	for i := range h.req.Fields {
		if h.req.Fields[i].Kind == k {
			return true
		}
	}
	return false
}

func (h h1Fields) appendField(b []byte, i int) []byte {
	f := &h.req.Fields[i]
	return append(b, h.req.Head[f.NS:f.VE]...)
}

func (h h1Fields) appendValues(b []byte, k uint8) []byte {
	for i := range h.req.Fields {
		if f := &h.req.Fields[i]; f.Kind == k {
			b = append(b, f.Value(h.req.Head)...)
			b = append(b, ", "...)
		}
	}
	return b
}

// listFields are decoded fields (HTTP/2's and HTTP/3's, or net/http's header map
// flattened by appendHeaderFields), names in any case; each one's kind is h1wire's.
type listFields struct {
	fields []hpack.HeaderField
	kinds  []uint8
}

// classify fills l.kinds for l.fields (into buf when it has room).
func (l *listFields) classify(buf []uint8) {
	l.kinds = buf[:0]
	for i := range l.fields {
		l.kinds = append(l.kinds, h1wire.RequestFieldKind(nameBytes(l.fields[i].Name)))
	}
}

func (l *listFields) count() int         { return len(l.fields) }
func (l *listFields) kind(i int) uint8   { return l.kinds[i] }
func (l *listFields) name(i int) []byte  { return nameBytes(l.fields[i].Name) }
func (l *listFields) value(i int) []byte { return nameBytes(l.fields[i].Value) }
func (l *listFields) appendField(b []byte, i int) []byte {
	b = append(b, l.fields[i].Name...)
	b = append(b, ": "...)
	return append(b, l.fields[i].Value...)
}

func (l *listFields) hasKind(k uint8) bool {
	for _, kk := range l.kinds {
		if kk == k {
			return true
		}
	}
	return false
}

func (l *listFields) appendValues(b []byte, k uint8) []byte {
	for i, kk := range l.kinds {
		if kk == k {
			b = append(b, l.fields[i].Value...)
			b = append(b, ", "...)
		}
	}
	return b
}
