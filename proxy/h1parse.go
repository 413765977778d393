package proxy

import (
	"bytes"
	"errors"
)

// Parsing for the fast HTTP/1.1 path (h1serve.go). The request parser accepts a strict
// subset of HTTP/1.1 and reports everything else as "not fast", which hands the
// connection to net/http: what we accept, net/http would accept with the same meaning
// (FuzzH1RequestSubset checks this), so request smuggling defences for the unusual cases
// stay the standard library's. The response parser reads what targets send back and
// fails (502) on anything it cannot frame unambiguously.

// h1MaxFields is the most header fields a request or response may have on the fast path.
const h1MaxFields = 100

// field kinds: how a header field is treated when it is forwarded.
const (
	fkOther uint8 = iota
	fkDrop        // hop-by-hop, or named by Connection: never forwarded
	fkHost
	fkContentLength
	fkConnection
	fkTE
	fkXFF
	fkXFProto
	fkXFHost
	fkForwarded
	fkXRealIP
	fkDate
	fkAltSvc
	fkTransferEncoding
	fkKeepAlive
)

// h1Field is one header field as offsets into the head it was parsed from.
type h1Field struct {
	ns, ne, vs, ve uint32
	kind           uint8
}

func (f *h1Field) name(b []byte) []byte  { return b[f.ns:f.ne] }
func (f *h1Field) value(b []byte) []byte { return b[f.vs:f.ve] }

// h1Req is a parsed request head. Spans index the head bytes.
type h1Req struct {
	head           []byte
	methodEnd      uint32 // method is head[:methodEnd]
	targetS        uint32 // target is head[targetS:targetE]
	targetE        uint32
	lineEnd        uint32 // the fields start here
	host           []byte
	contentLength  int64
	hasCL          bool // the client sent Content-Length (forwarded as len(body))
	http11         bool // the request line says HTTP/1.1
	connClose      bool
	teTrailers     bool
	hasProxyFields bool // X-Forwarded-*, Forwarded or X-Real-Ip came from the client
	fields         []h1Field
}

func (r *h1Req) method() []byte { return r.head[:r.methodEnd] }
func (r *h1Req) target() []byte { return r.head[r.targetS:r.targetE] }

// tchar is RFC 9110's token alphabet.
var tchar = func() (t [256]bool) {
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

// badValueByte: control bytes other than HTAB, and DEL, which no field value may hold.
var badValueByte = func() (t [256]bool) {
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

// headEnd returns the length of the head at the start of b (through the blank line), or
// -1 when b holds no complete head yet. from is where an earlier call stopped looking.
func headEnd(b []byte, from int) int {
	from = max(from-3, 0)
	if i := bytes.Index(b[from:], crlfcrlf); i >= 0 {
		return from + i + 4
	}
	return -1
}

var crlfcrlf = []byte("\r\n\r\n")

// h1Verdict is what the request parser decided about a head.
type h1Verdict uint8

const (
	// h1Fast: within the fast path's subset; served here.
	h1Fast h1Verdict = iota
	// h1Other: well-formed as far as the fast path can tell but outside its subset
	// (another version, another target form, Transfer-Encoding, Expect, Upgrade,
	// obsolete line folding, too many fields): net/http serves the connection from here.
	h1Other
	// h1Bad: malformed or ambiguous framing or routing (bare CR or LF, control bytes, a
	// bad field name, Connection naming a framing field or Host, Content-Length with
	// Transfer-Encoding, a malformed or conflicting Content-Length, a missing, repeated or
	// malformed Host): answered 400 here and the connection closed. Nothing of it reaches
	// a target, and net/http never gets to read the rest of the stream differently.
	h1Bad
)

// parseRequest parses head, a complete request head ending in CRLF CRLF, into r using
// fields as storage, and judges it (h1Verdict). The whole head is read before a verdict
// of h1Other is given, so that a head that is also malformed is refused here whatever
// would have sent it to net/http.
func parseRequest(r *h1Req, head []byte, fields []h1Field) h1Verdict {
	*r = h1Req{head: head, contentLength: 0, fields: fields[:0]}
	v := parseRequestLine(r, head)
	if v == h1Bad {
		return h1Bad
	}
	i := int(r.lineEnd)
	hosts := 0
	var sawTE, clDiffers, longCL bool
	for {
		if i+1 >= len(head) {
			return h1Bad
		}
		if head[i] == '\r' && head[i+1] == '\n' {
			break // the blank line ends the head
		}
		f, next, fv := parseField(head, i)
		switch fv {
		case h1Bad:
			return h1Bad
		case h1Other:
			// Obsolete line folding: net/http's to judge. The rest of the head is still
			// read here, so that what the fast path refuses (Content-Length beside a
			// folded Transfer-Encoding, say) is refused whatever the folding.
			e := bytes.Index(head[i:], []byte("\r\n"))
			if e < 0 || scanRestBad(head[i:i+e+2]) == h1Bad {
				return h1Bad
			}
			i += e + 2
			v = max(v, h1Other)
			continue
		}
		i = next
		name, val := f.name(head), f.value(head)
		f.kind = requestFieldKind(name)
		switch f.kind {
		case fkHandoff:
			v = max(v, h1Other)
		case fkTransferEncoding:
			sawTE = true
			v = max(v, h1Other)
		case fkHost:
			hosts++
			r.host = val
		case fkContentLength:
			n, ok := parseContentLength(val)
			if !ok {
				if len(val) > 0 && allDigits(val) {
					v = max(v, h1Other) // long, maybe valid: net/http's call
					longCL = true
					continue
				}
				return h1Bad // empty, signed, hex, spaces: never a length
			}
			if r.hasCL && n != r.contentLength {
				clDiffers = true
			} else if r.hasCL {
				v = max(v, h1Other) // a repeated equal value: net/http folds it
			}
			r.hasCL, r.contentLength = true, n
		case fkConnection:
			if hasConnToken(val, "close") {
				r.connClose = true
			}
			if namesProtectedField(val) {
				return h1Bad
			}
		case fkXFF, fkXFProto, fkXFHost, fkForwarded, fkXRealIP:
			r.hasProxyFields = true
		}
		if len(r.fields) == cap(r.fields) {
			v = max(v, h1Other) // more fields than the fast path keeps: judged, not kept
			continue
		}
		r.fields = append(r.fields, f)
	}
	switch {
	case clDiffers, sawTE && (r.hasCL || longCL), sawTE && !r.http11, hosts > 1:
		// (Transfer-Encoding in an HTTP/1.0 request: RFC 9112 §6.1 makes its framing
		// faulty, and net/http would ignore the field.)
		return h1Bad
	case hosts == 0:
		if r.http11 {
			return h1Bad // RFC 9112 §3.2: an HTTP/1.1 request without Host
		}
		return max(v, h1Other) // HTTP/1.0, the h2c preface: net/http's call
	case len(r.host) == 0:
		return max(v, h1Other) // an empty Host routes nowhere: net/http answers it
	case !validHost(r.host):
		return h1Bad
	}
	// TE is hop-by-hop and regenerated (RFC 9110 §10.1.4 has clients name it in
	// Connection too): read before Connection options mark it dropped.
	for j := range r.fields {
		if f := &r.fields[j]; f.kind == fkTE && hasTokenBytes(f.value(head), "trailers") {
			r.teTrailers = true
		}
	}
	dropConnectionNamed(head, r.fields)
	return v
}

// parseRequestLine parses "method SP target SP version CRLF" at the start of head and
// sets r's spans and lineEnd. Only origin-form targets and HTTP/1.1 are fast.
func parseRequestLine(r *h1Req, head []byte) h1Verdict {
	i := 0
	for i < len(head) && tchar[head[i]] {
		i++
	}
	if i == 0 || i >= len(head) || head[i] != ' ' {
		return h1Bad // no method, or a byte no method may hold
	}
	r.methodEnd = uint32(i)
	i++
	ts := i
	v := h1Fast
	if i >= len(head) || head[i] != '/' {
		v = h1Other // absolute-form, authority-form, asterisk-form
	}
	inQuery := false
	for ; i < len(head); i++ {
		c := head[i]
		if c >= 0x80 {
			v = h1Other // raw UTF-8 and the like: net/http's call
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
				v = h1Other
			}
		}
	}
	r.targetS, r.targetE = uint32(ts), uint32(i)
	if i == ts {
		return h1Bad
	}
	if i < len(head) && head[i] != ' ' {
		return h1Bad // a control byte in the target
	}
	rest := head[i:]
	switch {
	case bytes.HasPrefix(rest, []byte(" HTTP/1.1\r\n")):
		r.http11 = true
	case len(rest) >= 11 && bytes.HasPrefix(rest, []byte(" HTTP/")) && rest[9] == '\r' && rest[10] == '\n':
		v = h1Other // another version: net/http answers it (HTTP/1.0, or 505)
	default:
		return h1Bad
	}
	r.lineEnd = uint32(i + 11)
	return v
}

// scanRestBad reports h1Bad when b holds a bare CR or LF or a control byte that no head
// may hold, else h1Other.
func scanRestBad(b []byte) h1Verdict {
	if hasBareLineEnd(b) {
		return h1Bad
	}
	for _, c := range b {
		if c != '\r' && c != '\n' && badValueByte[c] {
			return h1Bad
		}
	}
	return h1Other
}

// hasBareLineEnd reports whether b holds an LF not preceded by CR, or a CR followed by
// anything but LF (a CR at the very end of b may still get its LF).
func hasBareLineEnd(b []byte) bool {
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

// namesProtectedField reports whether a Connection value names a field that a
// Connection option must never remove: the framing fields and Host. RFC 9110 §7.6.1
// forbids such options; honouring one would forward a head whose framing or routing
// differs from what was read.
func namesProtectedField(v []byte) bool {
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
	return validHostPort(h)
}

// validHostPort reports whether the port of host (after the last ':' that is not inside
// an IPv6 literal) is empty or decimal digits, at most five.
func validHostPort[T string | []byte](host T) bool {
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
func parseField(head []byte, i int) (f h1Field, next int, v h1Verdict) {
	ns := i
	for i < len(head) && tchar[head[i]] {
		i++
	}
	if i == ns && i < len(head) && (head[i] == ' ' || head[i] == '\t') {
		return f, 0, h1Other
	}
	if i == ns || i >= len(head) || head[i] != ':' {
		return f, 0, h1Bad
	}
	ne := i
	i++
	for i < len(head) && (head[i] == ' ' || head[i] == '\t') {
		i++
	}
	vs := i
	for i < len(head) && !badValueByte[head[i]] {
		i++
	}
	if i+1 >= len(head) || head[i] != '\r' || head[i+1] != '\n' {
		return f, 0, h1Bad
	}
	ve := i
	for ve > vs && (head[ve-1] == ' ' || head[ve-1] == '\t') {
		ve--
	}
	return h1Field{ns: uint32(ns), ne: uint32(ne), vs: uint32(vs), ve: uint32(ve)}, i + 2, h1Fast
}

// fkHandoff marks a request field that sends the connection to net/http.
const fkHandoff uint8 = 255

func requestFieldKind(name []byte) uint8 {
	switch len(name) {
	case 2:
		if eqFold(name, "te") {
			return fkTE
		}
	case 4:
		if eqFold(name, "host") {
			return fkHost
		}
	case 6:
		if eqFold(name, "expect") {
			return fkHandoff
		}
	case 7:
		if eqFold(name, "upgrade") {
			return fkHandoff
		}
	case 9:
		if eqFold(name, "forwarded") {
			return fkForwarded
		}
	case 10:
		switch {
		case eqFold(name, "connection"):
			return fkConnection
		}
	}
	switch {
	case eqFold(name, "content-length"):
		return fkContentLength
	case eqFold(name, "transfer-encoding"):
		return fkTransferEncoding
	case eqFold(name, "x-forwarded-for"):
		return fkXFF
	case eqFold(name, "x-forwarded-proto"):
		return fkXFProto
	case eqFold(name, "x-forwarded-host"):
		return fkXFHost
	case eqFold(name, "x-real-ip"):
		return fkXRealIP
	case isHopByHop(name):
		return fkDrop // the rest of the one hop-by-hop list (headers.go)
	case bytes.IndexByte(name, '_') >= 0 && forwardingLookalike(name):
		return fkDrop
	}
	return fkOther
}

// forwardingLookalike reports a field name that spells a forwarding field with '_' for
// '-' (X_Forwarded_For): CGI and WSGI targets read both spellings as one variable, so a
// client could forge what the ingress writes. Such fields are never forwarded (nginx
// drops every name with '_' by default).
func forwardingLookalike[T string | []byte](name T) bool {
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
			return fkDate
		}
	case 7:
		switch {
		case eqFold(name, "alt-svc"):
			return fkAltSvc
		case eqFold(name, "trailer"):
			// The one exception to the hop-by-hop list: chunked bodies, trailers
			// included, pass through verbatim, so the field announcing them stays
			// (net/http's path drops it because net/http writes its own).
			return fkOther
		}
	case 10:
		switch {
		case eqFold(name, "connection"):
			return fkConnection
		case eqFold(name, "keep-alive"):
			return fkKeepAlive
		}
	case 14:
		if eqFold(name, "content-length") {
			return fkContentLength
		}
	case 17:
		if eqFold(name, "transfer-encoding") {
			return fkTransferEncoding
		}
	}
	if isHopByHop(name) {
		return fkDrop // the rest of the one hop-by-hop list (headers.go)
	}
	return fkOther
}

// dropConnectionNamed marks the fields that a Connection field names as hop-by-hop,
// except the framing fields and Host: what frames and routes a forwarded message is
// derived from what is forwarded, never removed by an option (a request naming one was
// refused already; a response naming one is framed by us all the same).
func dropConnectionNamed(head []byte, fields []h1Field) {
	for i := range fields {
		if fields[i].kind != fkConnection {
			continue
		}
		v := fields[i].value(head)
		for len(v) > 0 {
			var tok []byte
			tok, v, _ = bytes.Cut(v, []byte{','})
			tok = trimOWS(tok)
			if len(tok) == 0 || eqFold(tok, "close") || eqFold(tok, "keep-alive") {
				continue
			}
			for j := range fields {
				switch fields[j].kind {
				case fkConnection, fkContentLength, fkTransferEncoding, fkHost:
					continue
				}
				if eqFoldBytes(fields[j].name(head), tok) {
					fields[j].kind = fkDrop
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

// h1Res is a parsed response head.
type h1Res struct {
	head          []byte
	status        int
	reasonS       uint32 // reason phrase is head[reasonS:reasonE]
	reasonE       uint32
	http10        bool
	contentLength int64 // -1: none
	chunked       bool
	connClose     bool
	keepAlive     bool // "Connection: keep-alive" (matters for HTTP/1.0 targets)
	hasDate       bool
	fields        []h1Field
}

var (
	errBadResponse   = errors.New("proxy: malformed response from target")
	errBadFraming    = errors.New("proxy: target response has conflicting or unsupported framing")
	errBadChunk      = errors.New("proxy: malformed chunked body from target")
	errChunkTooLarge = errors.New("proxy: chunk header or trailer from target too large")
	// errTooManyFields: the response has more fields than the storage given; the
	// caller parses again with more.
	errTooManyFields = errors.New("proxy: more response fields than the parser was given room for")
)

// parseResponse parses head, a complete response head ending in CRLF CRLF.
func parseResponse(r *h1Res, head []byte, fields []h1Field) error {
	*r = h1Res{head: head, contentLength: -1, fields: fields[:0]}
	switch {
	case bytes.HasPrefix(head, []byte("HTTP/1.1 ")):
	case bytes.HasPrefix(head, []byte("HTTP/1.0 ")):
		r.http10 = true
	default:
		return errBadResponse
	}
	i := len("HTTP/1.1 ")
	if i+3 > len(head) {
		return errBadResponse
	}
	for k := 0; k < 3; k++ {
		c := head[i+k]
		if c < '0' || c > '9' {
			return errBadResponse
		}
		r.status = r.status*10 + int(c-'0')
	}
	if r.status < 100 {
		return errBadResponse
	}
	i += 3
	switch {
	case i+1 < len(head) && head[i] == '\r' && head[i+1] == '\n':
		r.reasonS, r.reasonE = uint32(i), uint32(i)
	case i < len(head) && head[i] == ' ':
		i++
		s := i
		for i < len(head) && !badValueByte[head[i]] {
			i++
		}
		r.reasonS, r.reasonE = uint32(s), uint32(i)
		if i+1 >= len(head) || head[i] != '\r' || head[i+1] != '\n' {
			return errBadResponse
		}
	default:
		return errBadResponse
	}
	i += 2

	var cl int64 = -1
	for {
		if i+1 >= len(head) {
			return errBadResponse
		}
		if head[i] == '\r' && head[i+1] == '\n' {
			break
		}
		if len(r.fields) == cap(r.fields) {
			return errTooManyFields
		}
		f, next, fv := parseField(head, i)
		if fv != h1Fast {
			return errBadResponse
		}
		i = next
		name, val := f.name(head), f.value(head)
		f.kind = responseFieldKind(name)
		switch f.kind {
		case fkContentLength:
			n, ok := parseContentLength(val)
			if !ok || (cl >= 0 && n != cl) {
				return errBadFraming
			}
			cl = n
		case fkTransferEncoding:
			if r.chunked || !eqFold(val, "chunked") {
				return errBadFraming
			}
			r.chunked = true
		case fkConnection:
			if hasConnToken(val, "close") {
				r.connClose = true
			}
			if hasConnToken(val, "keep-alive") {
				r.keepAlive = true
			}
		case fkDate:
			r.hasDate = true
		}
		r.fields = append(r.fields, f)
	}
	if r.chunked && cl >= 0 {
		// RFC 9112 §6.3: Transfer-Encoding wins and Content-Length is not forwarded;
		// but which framing the target meant is unknown, so its connection is not
		// used again.
		r.connClose = true
		cl = -1
	}
	r.contentLength = cl
	if r.http10 && !r.keepAlive {
		r.connClose = true
	}
	dropConnectionNamed(head, r.fields)
	for j := range r.fields {
		if r.fields[j].kind == fkKeepAlive {
			r.fields[j].kind = fkDrop
		}
	}
	return nil
}

// chunkScanner follows a chunked body as it passes through verbatim, to find its end
// and refuse a malformed one. It accepts only what net/http's own reader accepts, so that
// a Go client behind us never chokes on a body we relayed (FuzzChunkScanner): CRLF line
// ends, whitespace only at the end of a size line, at most 4094 bytes per size line
// (net/http reads them through a 4 KiB buffer), net/http's budget for extension
// overhead, and trailers that are header fields, 4 KiB in all.
type chunkScanner struct {
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

// scan consumes p and returns how many bytes of p belong to the body; done reports that
// the body ended within them.
func (s *chunkScanner) scan(p []byte) (n int, done bool, err error) {
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
					return n, false, errBadChunk
				}
				s.state = csSizeLF
				break
			}
			s.lineLen++
			if s.lineLen > maxChunkLine {
				return n, false, errChunkTooLarge
			}
			switch s.state {
			case csSize:
				if v := unhex(c); v >= 0 {
					if s.digits == 15 {
						return n, false, errChunkTooLarge
					}
					s.size = s.size<<4 | int64(v)
					s.digits++
					break
				}
				switch {
				case s.digits == 0:
					return n, false, errBadChunk
				case c == ';':
					s.state = csExt
				case c == ' ' || c == '\t':
					s.state = csSizeWS
				default:
					return n, false, errBadChunk
				}
			case csSizeWS: // only more whitespace before the CRLF
				if c != ' ' && c != '\t' {
					return n, false, errBadChunk
				}
			case csExt:
				if badValueByte[c] {
					return n, false, errBadChunk
				}
			}
		case csSizeLF:
			if c != '\n' {
				return n, false, errBadChunk
			}
			s.excess = max(s.excess+int64(s.lineLen)+2-16-2*s.size, 0)
			if s.excess > maxChunkExcess {
				return n, false, errChunkTooLarge
			}
			s.digits, s.lineLen = 0, 0
			if s.size == 0 {
				s.state = csTrailerStart
			} else {
				s.state = csData
			}
		case csDataCR:
			if c != '\r' {
				return n, false, errBadChunk
			}
			s.state = csDataLF
		case csDataLF:
			if c != '\n' {
				return n, false, errBadChunk
			}
			s.state = csSize
		default: // trailers
			s.trailerLen++
			if s.trailerLen > maxTrailerBytes {
				return n, false, errChunkTooLarge
			}
			switch s.state {
			case csTrailerStart:
				switch {
				case c == '\r':
					s.state = csEndLF
				case tchar[c]:
					s.state = csTrailerName
				default:
					return n, false, errBadChunk
				}
			case csTrailerName:
				switch {
				case c == ':':
					s.state = csTrailer
				case !tchar[c]:
					return n, false, errBadChunk
				}
			case csTrailer:
				if c == '\r' {
					s.state = csTrailerLF
				} else if badValueByte[c] {
					return n, false, errBadChunk
				}
			case csTrailerLF:
				if c != '\n' {
					return n, false, errBadChunk
				}
				s.state = csTrailerStart
			case csEndLF:
				if c != '\n' {
					return n, false, errBadChunk
				}
				s.state = csDone
				return n, true, nil
			default:
				return n, false, errBadChunk // csDone: nothing may follow
			}
		}
	}
	return n, false, nil
}
