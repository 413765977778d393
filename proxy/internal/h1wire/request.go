package h1wire

import (
	"bytes"
)

// Parsing for the fast HTTP/1.1 path (proxy/h1serve.go). The request parser accepts a strict
// subset of HTTP/1.1 and reports everything else as "not fast", which hands the
// connection to net/http: what we accept, net/http would accept with the same meaning
// (FuzzH1RequestSubset checks this), so request smuggling defences for the unusual cases
// stay the standard library's. The response parser reads what targets send back and
// fails (502) on anything it cannot frame unambiguously.

// MaxFields is the most header fields a request or response may have on the fast path.
const MaxFields = 100

// field kinds: how a header field is treated when it is forwarded.
const (
	KindOther uint8 = iota
	KindDrop        // hop-by-hop, or named by Connection: never forwarded
	KindHost
	KindContentLength
	KindConnection
	KindTE
	KindXFF
	KindXFProto
	KindXFHost
	KindForwarded
	KindXRealIP
	KindDate
	KindAltSvc
	KindTransferEncoding
	KindKeepAlive
)

// Field is one header field as offsets into the head it was parsed from.
type Field struct {
	NS, NE, VS, VE uint32
	Kind           uint8
}

func (f *Field) Name(b []byte) []byte  { return b[f.NS:f.NE] }
func (f *Field) Value(b []byte) []byte { return b[f.VS:f.VE] }

// Request is a parsed request head. Spans index the head bytes.
type Request struct {
	Head           []byte
	MethodEnd      uint32 // method is head[:MethodEnd]
	TargetS        uint32 // target is head[TargetS:TargetE]
	TargetE        uint32
	LineEnd        uint32 // the fields start here
	Host           []byte
	ContentLength  int64
	HasCL          bool // the client sent Content-Length (forwarded as len(body))
	HTTP11         bool // the request line says HTTP/1.1
	ConnClose      bool
	TETrailers     bool
	HasProxyFields bool // X-Forwarded-*, Forwarded or X-Real-Ip came from the client
	Fields         []Field
}

func (r *Request) Method() []byte { return r.Head[:r.MethodEnd] }
func (r *Request) Target() []byte { return r.Head[r.TargetS:r.TargetE] }

// Tchar is RFC 9110's token alphabet.
var Tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// BadValueByte: control bytes other than HTAB, and DEL, which no field value may hold.
var BadValueByte = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = c != '\t'
	}
	t[0x7f] = true
	return t
}()

// hostByte is the alphabet net/http accepts in a Host header (httpguts.ValidHostHeader).
var hostByte = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!$%&'()*+,-.:;=[]_~" {
		t[c] = true
	}
	return t
}()

// HeadEnd returns the length of the head at the start of b (through the blank line), or
// -1 when b holds no complete head yet. from is where an earlier call stopped looking.
func HeadEnd(b []byte, from int) int {
	from = max(from-3, 0)
	if i := bytes.Index(b[from:], crlfcrlf); i >= 0 {
		return from + i + 4
	}
	return -1
}

var crlfcrlf = []byte("\r\n\r\n")

// Verdict is what the request parser decided about a head.
type Verdict uint8

const (
	// Fast: within the fast path's subset; served here.
	Fast Verdict = iota
	// Other: well-formed as far as the fast path can tell but outside its subset
	// (another version, another target form, Transfer-Encoding, Expect, Upgrade,
	// obsolete line folding, too many fields): net/http serves the connection from here.
	Other
	// Bad: malformed or ambiguous framing or routing (bare CR or LF, control bytes, a
	// bad field name, Connection naming a framing field or Host, Content-Length with
	// Transfer-Encoding, a malformed or conflicting Content-Length, a missing, repeated or
	// malformed Host): answered 400 here and the connection closed. Nothing of it reaches
	// a target, and net/http never gets to read the rest of the stream differently.
	Bad
)

// ParseRequest parses head, a complete request head ending in CRLF CRLF, into r using
// fields as storage, and judges it (Verdict). The whole head is read before a verdict
// of Other is given, so that a head that is also malformed is refused here whatever
// would have sent it to net/http.
func ParseRequest(r *Request, head []byte, fields []Field) Verdict {
	*r = Request{Head: head, ContentLength: 0, Fields: fields[:0]}
	v := parseRequestLine(r, head)
	if v == Bad {
		return Bad
	}
	i := int(r.LineEnd)
	hosts := 0
	var sawTE, clDiffers, longCL bool
	for {
		if i+1 >= len(head) {
			return Bad
		}
		if head[i] == '\r' && head[i+1] == '\n' {
			break // the blank line ends the head
		}
		f, next, fv := parseField(head, i)
		switch fv {
		case Bad:
			return Bad
		case Other:
			// Obsolete line folding: net/http's to judge. The rest of the head is still
			// read here, so that what the fast path refuses (Content-Length beside a
			// folded Transfer-Encoding, say) is refused whatever the folding.
			e := bytes.Index(head[i:], []byte("\r\n"))
			if e < 0 || scanRestBad(head[i:i+e+2]) == Bad {
				return Bad
			}
			i += e + 2
			v = max(v, Other)
			continue
		}
		i = next
		name, val := f.Name(head), f.Value(head)
		f.Kind = requestFieldKind(name)
		switch f.Kind {
		case KindHandoff:
			v = max(v, Other)
		case KindTransferEncoding:
			sawTE = true
			v = max(v, Other)
		case KindHost:
			hosts++
			r.Host = val
		case KindContentLength:
			n, ok := parseContentLength(val)
			if !ok {
				if len(val) > 0 && allDigits(val) {
					v = max(v, Other) // long, maybe valid: net/http's call
					longCL = true
					continue
				}
				return Bad // empty, signed, hex, spaces: never a length
			}
			if r.HasCL && n != r.ContentLength {
				clDiffers = true
			} else if r.HasCL {
				v = max(v, Other) // a repeated equal value: net/http folds it
			}
			r.HasCL, r.ContentLength = true, n
		case KindConnection:
			if hasConnToken(val, "close") {
				r.ConnClose = true
			}
			if NamesProtectedField(val) {
				return Bad
			}
		case KindXFF, KindXFProto, KindXFHost, KindForwarded, KindXRealIP:
			r.HasProxyFields = true
		}
		if len(r.Fields) == cap(r.Fields) {
			v = max(v, Other) // more fields than the fast path keeps: judged, not kept
			continue
		}
		r.Fields = append(r.Fields, f)
	}
	switch {
	case clDiffers, sawTE && (r.HasCL || longCL), sawTE && !r.HTTP11, hosts > 1:
		// (Transfer-Encoding in an HTTP/1.0 request: RFC 9112 §6.1 makes its framing
		// faulty, and net/http would ignore the field.)
		return Bad
	case hosts == 0:
		if r.HTTP11 {
			return Bad // RFC 9112 §3.2: an HTTP/1.1 request without Host
		}
		return max(v, Other) // HTTP/1.0, the h2c preface: net/http's call
	case len(r.Host) == 0:
		return max(v, Other) // an empty Host routes nowhere: net/http answers it
	case !validHost(r.Host):
		return Bad
	}
	// TE is hop-by-hop and regenerated (RFC 9110 §10.1.4 has clients name it in
	// Connection too): read before Connection options mark it dropped.
	for j := range r.Fields {
		if f := &r.Fields[j]; f.Kind == KindTE && hasTokenBytes(f.Value(head), "trailers") {
			r.TETrailers = true
		}
	}
	dropConnectionNamed(head, r.Fields)
	return v
}

// parseRequestLine parses "method SP target SP version CRLF" at the start of head and
// sets r's spans and LineEnd. Only origin-form targets and HTTP/1.1 are fast.
func parseRequestLine(r *Request, head []byte) Verdict {
	i := 0
	for i < len(head) && Tchar[head[i]] {
		i++
	}
	if i == 0 || i >= len(head) || head[i] != ' ' {
		return Bad // no method, or a byte no method may hold
	}
	r.MethodEnd = uint32(i)
	i++
	ts := i
	v := Fast
	if i >= len(head) || head[i] != '/' {
		v = Other // absolute-form, authority-form, asterisk-form
	}
	inQuery := false
	for ; i < len(head); i++ {
		c := head[i]
		if c >= 0x80 {
			v = Other // raw UTF-8 and the like: net/http's call
			continue
		}
		if c <= ' ' || c == 0x7f {
			break
		}
		switch c {
		case '?':
			inQuery = true
		case '%':
			// net/http rejects a malformed escape in the path (not in the query).
			if !inQuery && (i+2 >= len(head) || unhex(head[i+1]) < 0 || unhex(head[i+2]) < 0) {
				v = Other
			}
		}
	}
	r.TargetS, r.TargetE = uint32(ts), uint32(i)
	if i == ts {
		return Bad
	}
	if i < len(head) && head[i] != ' ' {
		return Bad // a control byte in the target
	}
	rest := head[i:]
	switch {
	case bytes.HasPrefix(rest, []byte(" HTTP/1.1\r\n")):
		r.HTTP11 = true
	case len(rest) >= 11 && bytes.HasPrefix(rest, []byte(" HTTP/")) && rest[9] == '\r' && rest[10] == '\n':
		v = Other // another version: net/http answers it (HTTP/1.0, or 505)
	default:
		return Bad
	}
	r.LineEnd = uint32(i + 11)
	return v
}

// scanRestBad reports Bad when b holds a bare CR or LF or a control byte that no head
// may hold, else Other.
func scanRestBad(b []byte) Verdict {
	if HasBareLineEnd(b) {
		return Bad
	}
	for _, c := range b {
		if c != '\r' && c != '\n' && BadValueByte[c] {
			return Bad
		}
	}
	return Other
}

// HasBareLineEnd reports whether b holds an LF not preceded by CR, or a CR followed by
// anything but LF (a CR at the very end of b may still get its LF).
func HasBareLineEnd(b []byte) bool {
	for i := 0; i < len(b); {
		j := bytes.IndexAny(b[i:], "\r\n")
		if j < 0 {
			return false
		}
		i += j
		switch {
		case b[i] == '\n':
			return true // an LF that no CR precedes (CR LF pairs are skipped below)
		case i+1 < len(b) && b[i+1] != '\n':
			return true
		}
		i += 2
	}
	return false
}

// NamesProtectedField reports whether a Connection value names a field that a
// Connection option must never remove: the framing fields and Host. RFC 9110 §7.6.1
// forbids such options; honouring one would forward a head whose framing or routing
// differs from what was read.
func NamesProtectedField(v []byte) bool {
	for len(v) > 0 {
		var t []byte
		t, v, _ = bytes.Cut(v, []byte{','})
		if ProtectedField(trimOWS(t)) {
			return true
		}
	}
	return false
}

// validHost reports whether h is a Host value net/http accepts (httpguts.ValidHostHeader)
// whose port, if any, is all digits: "b.test:evil.example" routes nowhere.
func validHost(h []byte) bool {
	for _, c := range h {
		if !hostByte[c] {
			return false
		}
	}
	return ValidHostPort(h)
}

// ValidHostPort reports whether the port of host (after the last ':' that is not inside
// an IPv6 literal) is empty or decimal digits, at most five.
func ValidHostPort[T string | []byte](host T) bool {
	i := len(host) - 1
	for ; i >= 0; i-- {
		if host[i] == ':' {
			break
		}
		if host[i] == ']' {
			return true
		}
	}
	if i < 0 {
		return true
	}
	if host[0] != '[' {
		// "a:b:c": only an IPv6 literal in brackets may hold more than one colon.
		for k := 0; k < i; k++ {
			if host[k] == ':' {
				return false
			}
		}
	}
	port := host[i+1:]
	if len(port) > 5 {
		return false
	}
	for k := 0; k < len(port); k++ {
		if port[k] < '0' || port[k] > '9' {
			return false
		}
	}
	return true
}

// parseField parses the header line at head[i:] (not the blank line ending the head):
// a token name, a colon, optional whitespace, a value without control bytes (HTAB
// aside), CRLF. It returns the field, trailing whitespace trimmed, and where the next
// line starts. The verdict is Other for a line that starts with whitespace (obsolete
// line folding) and Bad for anything else that is not such a line.
func parseField(head []byte, i int) (f Field, next int, v Verdict) {
	ns := i
	for i < len(head) && Tchar[head[i]] {
		i++
	}
	if i == ns && i < len(head) && (head[i] == ' ' || head[i] == '\t') {
		return f, 0, Other
	}
	if i == ns || i >= len(head) || head[i] != ':' {
		return f, 0, Bad
	}
	ne := i
	i++
	for i < len(head) && (head[i] == ' ' || head[i] == '\t') {
		i++
	}
	vs := i
	for i < len(head) && !BadValueByte[head[i]] {
		i++
	}
	if i+1 >= len(head) || head[i] != '\r' || head[i+1] != '\n' {
		return f, 0, Bad
	}
	ve := i
	for ve > vs && (head[ve-1] == ' ' || head[ve-1] == '\t') {
		ve--
	}
	return Field{NS: uint32(ns), NE: uint32(ne), VS: uint32(vs), VE: uint32(ve)}, i + 2, Fast
}
