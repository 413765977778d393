// Package h1wire is the HTTP/1.1 wire code of the proxy's fast path: the request and
// response head parsers, the chunked-body scanner and the one list of hop-by-hop fields.
// It knows nothing of routes, statistics or listeners: it reads bytes in place and
// reports spans into them, allocating nothing.
//
// # Hot path
//
// [HeadEnd] finds a head's end, [ParseRequest] classifies every field ([Field.Kind])
// and gives a [Verdict]; [ParseResponse] and [ChunkScanner.Scan] read what targets send.
// The proxy's fast path (proxy/h1serve.go, proxy/h1forward.go) calls them per request.
//
// The fuzzers here (FuzzH1RequestSubset, FuzzChunkScanner) hold the parsers to the
// standard library's reading; proxy's FuzzH1FastPathMatchesNetHTTP compares what
// targets receive through both HTTP/1.1 paths.
package h1wire

import (
	"bytes"
	"errors"
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
	MethodEnd      uint32 // method is head[:methodEnd]
	TargetS        uint32 // target is head[targetS:targetE]
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
// fields as storage, and judges it (h1Verdict). The whole head is read before a verdict
// of h1Other is given, so that a head that is also malformed is refused here whatever
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
// sets r's spans and lineEnd. Only origin-form targets and HTTP/1.1 are fast.
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

// scanRestBad reports h1Bad when b holds a bare CR or LF or a control byte that no head
// may hold, else h1Other.
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
		t = trimOWS(t)
		if eqFold(t, "content-length") || eqFold(t, "transfer-encoding") || eqFold(t, "host") {
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
// line starts. The verdict is h1Other for a line that starts with whitespace (obsolete
// line folding) and h1Bad for anything else that is not such a line.
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

// KindHandoff marks a request field that sends the connection to net/http.
const KindHandoff uint8 = 255

func requestFieldKind(name []byte) uint8 {
	switch len(name) {
	case 2:
		if eqFold(name, "te") {
			return KindTE
		}
	case 4:
		if eqFold(name, "host") {
			return KindHost
		}
	case 6:
		if eqFold(name, "expect") {
			return KindHandoff
		}
	case 7:
		if eqFold(name, "upgrade") {
			return KindHandoff
		}
	case 9:
		if eqFold(name, "forwarded") {
			return KindForwarded
		}
	case 10:
		switch {
		case eqFold(name, "connection"):
			return KindConnection
		}
	}
	switch {
	case eqFold(name, "content-length"):
		return KindContentLength
	case eqFold(name, "transfer-encoding"):
		return KindTransferEncoding
	case eqFold(name, "x-forwarded-for"):
		return KindXFF
	case eqFold(name, "x-forwarded-proto"):
		return KindXFProto
	case eqFold(name, "x-forwarded-host"):
		return KindXFHost
	case eqFold(name, "x-real-ip"):
		return KindXRealIP
	case IsHopByHop(name):
		return KindDrop // the rest of the one hop-by-hop list (headers.go)
	case bytes.IndexByte(name, '_') >= 0 && ForwardingLookalike(name):
		return KindDrop
	}
	return KindOther
}

// ForwardingLookalike reports a field name that spells a forwarding field with '_' for
// '-' (X_Forwarded_For): CGI and WSGI targets read both spellings as one variable, so a
// client could forge what the ingress writes. Such fields are never forwarded (nginx
// drops every name with '_' by default).
func ForwardingLookalike[T string | []byte](name T) bool {
	for _, f := range [...]string{"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-real-ip"} {
		if len(name) != len(f) {
			continue
		}
		same := true
		for i := 0; i < len(f) && same; i++ {
			c := name[i]
			switch {
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			case c == '_':
				c = '-'
			}
			same = c == f[i]
		}
		if same {
			return true
		}
	}
	return false
}

func responseFieldKind(name []byte) uint8 {
	switch len(name) {
	case 4:
		if eqFold(name, "date") {
			return KindDate
		}
	case 7:
		switch {
		case eqFold(name, "alt-svc"):
			return KindAltSvc
		case eqFold(name, "trailer"):
			// The one exception to the hop-by-hop list: chunked bodies, trailers
			// included, pass through verbatim, so the field announcing them stays
			// (net/http's path drops it because net/http writes its own).
			return KindOther
		}
	case 10:
		switch {
		case eqFold(name, "connection"):
			return KindConnection
		case eqFold(name, "keep-alive"):
			return KindKeepAlive
		}
	case 14:
		if eqFold(name, "content-length") {
			return KindContentLength
		}
	case 17:
		if eqFold(name, "transfer-encoding") {
			return KindTransferEncoding
		}
	}
	if IsHopByHop(name) {
		return KindDrop // the rest of the one hop-by-hop list (headers.go)
	}
	return KindOther
}

// dropConnectionNamed marks the fields that a Connection field names as hop-by-hop,
// except the framing fields and Host: what frames and routes a forwarded message is
// derived from what is forwarded, never removed by an option (a request naming one was
// refused already; a response naming one is framed by us all the same).
func dropConnectionNamed(head []byte, fields []Field) {
	for i := range fields {
		if fields[i].Kind != KindConnection {
			continue
		}
		v := fields[i].Value(head)
		for len(v) > 0 {
			var tok []byte
			tok, v, _ = bytes.Cut(v, []byte{','})
			tok = trimOWS(tok)
			if len(tok) == 0 || eqFold(tok, "close") || eqFold(tok, "keep-alive") {
				continue
			}
			for j := range fields {
				switch fields[j].Kind {
				case KindConnection, KindContentLength, KindTransferEncoding, KindHost:
					continue
				}
				if eqFoldBytes(fields[j].Name(head), tok) {
					fields[j].Kind = KindDrop
				}
			}
		}
	}
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseContentLength accepts 1 to 18 decimal digits.
func parseContentLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// eqFold compares b with lower, an ASCII lowercase string, ignoring ASCII case.
func eqFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

func eqFoldBytes(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// hasTokenBytes reports whether the comma-separated list v contains tok (lowercase),
// ignoring parameters (TE: trailers;q=1).
func hasTokenBytes(v []byte, tok string) bool {
	for len(v) > 0 {
		var t []byte
		t, v, _ = bytes.Cut(v, []byte{','})
		if i := bytes.IndexByte(t, ';'); i >= 0 {
			t = t[:i]
		}
		if eqFold(trimOWS(t), tok) {
			return true
		}
	}
	return false
}

// hasConnToken is hasTokenBytes for Connection, read as net/http reads it: a token with
// parameters is another token.
func hasConnToken(v []byte, tok string) bool {
	for len(v) > 0 {
		var t []byte
		t, v, _ = bytes.Cut(v, []byte{','})
		if eqFold(trimOWS(t), tok) {
			return true
		}
	}
	return false
}

// trimOWS trims spaces and tabs (not the Unicode spaces bytes.TrimSpace knows).
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// Response heads.

// Response is a parsed response head.
type Response struct {
	Head          []byte
	Status        int
	ReasonS       uint32 // reason phrase is head[reasonS:reasonE]
	ReasonE       uint32
	HTTP10        bool
	ContentLength int64 // -1: none
	Chunked       bool
	ConnClose     bool
	KeepAlive     bool // "Connection: keep-alive" (matters for HTTP/1.0 targets)
	HasDate       bool
	Fields        []Field
}

var (
	ErrBadResponse   = errors.New("proxy: malformed response from target")
	ErrBadFraming    = errors.New("proxy: target response has conflicting or unsupported framing")
	ErrBadChunk      = errors.New("proxy: malformed chunked body from target")
	ErrChunkTooLarge = errors.New("proxy: chunk header or trailer from target too large")
	// ErrTooManyFields: the response has more fields than the storage given; the
	// caller parses again with more.
	ErrTooManyFields = errors.New("proxy: more response fields than the parser was given room for")
)

// ParseResponse parses head, a complete response head ending in CRLF CRLF.
func ParseResponse(r *Response, head []byte, fields []Field) error {
	*r = Response{Head: head, ContentLength: -1, Fields: fields[:0]}
	switch {
	case bytes.HasPrefix(head, []byte("HTTP/1.1 ")):
	case bytes.HasPrefix(head, []byte("HTTP/1.0 ")):
		r.HTTP10 = true
	default:
		return ErrBadResponse
	}
	i := len("HTTP/1.1 ")
	if i+3 > len(head) {
		return ErrBadResponse
	}
	for k := 0; k < 3; k++ {
		c := head[i+k]
		if c < '0' || c > '9' {
			return ErrBadResponse
		}
		r.Status = r.Status*10 + int(c-'0')
	}
	if r.Status < 100 {
		return ErrBadResponse
	}
	i += 3
	switch {
	case i+1 < len(head) && head[i] == '\r' && head[i+1] == '\n':
		r.ReasonS, r.ReasonE = uint32(i), uint32(i)
	case i < len(head) && head[i] == ' ':
		i++
		s := i
		for i < len(head) && !BadValueByte[head[i]] {
			i++
		}
		r.ReasonS, r.ReasonE = uint32(s), uint32(i)
		if i+1 >= len(head) || head[i] != '\r' || head[i+1] != '\n' {
			return ErrBadResponse
		}
	default:
		return ErrBadResponse
	}
	i += 2

	var cl int64 = -1
	for {
		if i+1 >= len(head) {
			return ErrBadResponse
		}
		if head[i] == '\r' && head[i+1] == '\n' {
			break
		}
		if len(r.Fields) == cap(r.Fields) {
			return ErrTooManyFields
		}
		f, next, fv := parseField(head, i)
		if fv != Fast {
			return ErrBadResponse
		}
		i = next
		name, val := f.Name(head), f.Value(head)
		f.Kind = responseFieldKind(name)
		switch f.Kind {
		case KindContentLength:
			n, ok := parseContentLength(val)
			if !ok || (cl >= 0 && n != cl) {
				return ErrBadFraming
			}
			cl = n
		case KindTransferEncoding:
			if r.Chunked || !eqFold(val, "chunked") {
				return ErrBadFraming
			}
			r.Chunked = true
		case KindConnection:
			if hasConnToken(val, "close") {
				r.ConnClose = true
			}
			if hasConnToken(val, "keep-alive") {
				r.KeepAlive = true
			}
		case KindDate:
			r.HasDate = true
		}
		r.Fields = append(r.Fields, f)
	}
	if r.Chunked && cl >= 0 {
		// RFC 9112 §6.3: Transfer-Encoding wins and Content-Length is not forwarded;
		// but which framing the target meant is unknown, so its connection is not
		// used again.
		r.ConnClose = true
		cl = -1
	}
	r.ContentLength = cl
	if r.HTTP10 && !r.KeepAlive {
		r.ConnClose = true
	}
	dropConnectionNamed(head, r.Fields)
	for j := range r.Fields {
		if r.Fields[j].Kind == KindKeepAlive {
			r.Fields[j].Kind = KindDrop
		}
	}
	return nil
}

// ChunkScanner follows a chunked body as it passes through verbatim, to find its end
// and refuse a malformed one. It accepts only what net/http's own reader accepts, so that
// a Go client behind us never chokes on a body we relayed (FuzzChunkScanner): CRLF line
// ends, whitespace only at the end of a size line, at most 4094 bytes per size line
// (net/http reads them through a 4 KiB buffer), net/http's budget for extension
// overhead, and trailers that are header fields, 4 KiB in all.
type ChunkScanner struct {
	state      uint8
	digits     uint8
	size       int64 // remaining data bytes of the current chunk
	lineLen    int   // bytes of the current size line, CRLF excluded
	excess     int64 // non-data overhead beyond what net/http allows for free
	trailerLen int
}

const (
	csSize uint8 = iota
	csSizeWS
	csExt
	csSizeLF
	csData
	csDataCR
	csDataLF
	csTrailerStart
	csTrailerName
	csTrailer
	csTrailerLF
	csEndLF
	csDone
)

const (
	maxChunkLine    = 4094
	maxTrailerBytes = 4096
	maxChunkExcess  = 16 << 10
)

// Scan consumes p and returns how many bytes of p belong to the body; done reports that
// the body ended within them.
func (s *ChunkScanner) Scan(p []byte) (n int, done bool, err error) {
	for n < len(p) {
		if s.state == csData {
			k := min(int64(len(p)-n), s.size)
			n += int(k)
			s.size -= k
			if s.size == 0 {
				s.state = csDataCR
			}
			continue
		}
		c := p[n]
		n++
		switch s.state {
		case csSize, csSizeWS, csExt:
			if c == '\r' {
				if s.digits == 0 {
					return n, false, ErrBadChunk
				}
				s.state = csSizeLF
				break
			}
			s.lineLen++
			if s.lineLen > maxChunkLine {
				return n, false, ErrChunkTooLarge
			}
			switch s.state {
			case csSize:
				if v := unhex(c); v >= 0 {
					if s.digits == 15 {
						return n, false, ErrChunkTooLarge
					}
					s.size = s.size<<4 | int64(v)
					s.digits++
					break
				}
				switch {
				case s.digits == 0:
					return n, false, ErrBadChunk
				case c == ';':
					s.state = csExt
				case c == ' ' || c == '\t':
					s.state = csSizeWS
				default:
					return n, false, ErrBadChunk
				}
			case csSizeWS: // only more whitespace before the CRLF
				if c != ' ' && c != '\t' {
					return n, false, ErrBadChunk
				}
			case csExt:
				if BadValueByte[c] {
					return n, false, ErrBadChunk
				}
			}
		case csSizeLF:
			if c != '\n' {
				return n, false, ErrBadChunk
			}
			s.excess = max(s.excess+int64(s.lineLen)+2-16-2*s.size, 0)
			if s.excess > maxChunkExcess {
				return n, false, ErrChunkTooLarge
			}
			s.digits, s.lineLen = 0, 0
			if s.size == 0 {
				s.state = csTrailerStart
			} else {
				s.state = csData
			}
		case csDataCR:
			if c != '\r' {
				return n, false, ErrBadChunk
			}
			s.state = csDataLF
		case csDataLF:
			if c != '\n' {
				return n, false, ErrBadChunk
			}
			s.state = csSize
		default: // trailers
			s.trailerLen++
			if s.trailerLen > maxTrailerBytes {
				return n, false, ErrChunkTooLarge
			}
			switch s.state {
			case csTrailerStart:
				switch {
				case c == '\r':
					s.state = csEndLF
				case Tchar[c]:
					s.state = csTrailerName
				default:
					return n, false, ErrBadChunk
				}
			case csTrailerName:
				switch {
				case c == ':':
					s.state = csTrailer
				case !Tchar[c]:
					return n, false, ErrBadChunk
				}
			case csTrailer:
				if c == '\r' {
					s.state = csTrailerLF
				} else if BadValueByte[c] {
					return n, false, ErrBadChunk
				}
			case csTrailerLF:
				if c != '\n' {
					return n, false, ErrBadChunk
				}
				s.state = csTrailerStart
			case csEndLF:
				if c != '\n' {
					return n, false, ErrBadChunk
				}
				s.state = csDone
				return n, true, nil
			default:
				return n, false, ErrBadChunk // csDone: nothing may follow
			}
		}
	}
	return n, false, nil
}

// HopByHop is the one list of hop-by-hop fields (RFC 9110 §7.6.1 plus the usual proxy
// ones), in canonical form: the proxy removes them in both directions on every path
// (the fast path by classifying fields with IsHopByHop). Upgrade and Connection are
// restored for a WebSocket upgrade.
var HopByHop = [...]string{
	"Connection",
	"Keep-Alive",
	"Proxy-Connection",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer", // net/http writes the Trailer header itself from Request/Response.Trailer
	"Transfer-Encoding",
	"Upgrade",
	"Http2-Settings",
}

// IsHopByHop reports whether name is in HopByHop (ASCII case-insensitive).
func IsHopByHop[T string | []byte](name T) bool {
	for _, h := range HopByHop {
		if len(h) == len(name) && eqFoldCanon(name, h) {
			return true
		}
	}
	return false
}

// eqFoldCanon compares a field name with a canonical one, ASCII case-insensitively.
func eqFoldCanon[T string | []byte](a T, b string) bool {
	for i := 0; i < len(b); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
