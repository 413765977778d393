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
	host           []byte
	contentLength  int64
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

// parseRequest parses head, a complete request head ending in CRLF CRLF, into r using
// fields as storage. It reports false for anything outside the fast path's subset:
// another version than HTTP/1.1, a target not in origin form, obsolete line folding,
// a bare LF, invalid bytes, Transfer-Encoding, Expect, Upgrade, a missing or repeated
// Host, a repeated or malformed Content-Length, or too many fields.
func parseRequest(r *h1Req, head []byte, fields []h1Field) bool {
	*r = h1Req{head: head, contentLength: 0, fields: fields[:0]}
	// Request line: method SP origin-form SP HTTP/1.1 CRLF.
	i := 0
	for i < len(head) && tchar[head[i]] {
		i++
	}
	if i == 0 || i >= len(head) || head[i] != ' ' {
		return false
	}
	r.methodEnd = uint32(i)
	i++
	ts := i
	if i >= len(head) || head[i] != '/' {
		return false
	}
	inQuery := false
	for ; i < len(head); i++ {
		c := head[i]
		if c <= ' ' || c >= 0x7f {
			break
		}
		switch c {
		case '?':
			inQuery = true
		case '%':
			// net/http rejects a malformed escape in the path (not in the query).
			if !inQuery && (i+2 >= len(head) || unhex(head[i+1]) < 0 || unhex(head[i+2]) < 0) {
				return false
			}
		}
	}
	r.targetS, r.targetE = uint32(ts), uint32(i)
	if !bytes.HasPrefix(head[i:], []byte(" HTTP/1.1\r\n")) {
		return false
	}
	i += len(" HTTP/1.1\r\n")

	hosts := 0
	seenCL := false
	for {
		if i+1 >= len(head) {
			return false
		}
		if head[i] == '\r' && head[i+1] == '\n' {
			break // the blank line ends the head
		}
		f, next, ok := parseField(head, i)
		if !ok || len(r.fields) == cap(r.fields) {
			return false // obs-fold, space before the colon, a bad name or value, too many
		}
		i = next
		name, val := f.name(head), f.value(head)
		f.kind = requestFieldKind(name)
		switch f.kind {
		case fkHandoff:
			return false
		case fkHost:
			hosts++
			r.host = val
		case fkContentLength:
			if seenCL {
				return false
			}
			seenCL = true
			n, ok := parseContentLength(val)
			if !ok {
				return false
			}
			r.contentLength = n
		case fkConnection:
			if hasConnToken(val, "close") {
				r.connClose = true
			}
		case fkTE:
			if hasTokenBytes(val, "trailers") {
				r.teTrailers = true
			}
		case fkXFF, fkXFProto, fkXFHost, fkForwarded, fkXRealIP:
			r.hasProxyFields = true
		}
		r.fields = append(r.fields, f)
	}
	if hosts != 1 || len(r.host) == 0 {
		return false
	}
	for _, c := range r.host {
		if !hostByte[c] {
			return false
		}
	}
	dropConnectionNamed(head, r.fields)
	return true
}

// parseField parses the header line at head[i:] (not the blank line ending the head):
// a token name, a colon, optional whitespace, a value without control bytes (HTAB
// aside), CRLF. It returns the field, trailing whitespace trimmed, and where the next
// line starts.
func parseField(head []byte, i int) (f h1Field, next int, ok bool) {
	ns := i
	for i < len(head) && tchar[head[i]] {
		i++
	}
	if i == ns || i >= len(head) || head[i] != ':' {
		return f, 0, false
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
		return f, 0, false
	}
	ve := i
	for ve > vs && (head[ve-1] == ' ' || head[ve-1] == '\t') {
		ve--
	}
	return h1Field{ns: uint32(ns), ne: uint32(ne), vs: uint32(vs), ve: uint32(ve)}, i + 2, true
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
		switch {
		case eqFold(name, "upgrade"):
			return fkHandoff
		case eqFold(name, "trailer"):
			return fkDrop
		}
	case 9:
		if eqFold(name, "forwarded") {
			return fkForwarded
		}
	case 10:
		switch {
		case eqFold(name, "connection"):
			return fkConnection
		case eqFold(name, "keep-alive"):
			return fkDrop
		}
	}
	switch {
	case eqFold(name, "content-length"):
		return fkContentLength
	case eqFold(name, "transfer-encoding"):
		return fkHandoff
	case eqFold(name, "x-forwarded-for"):
		return fkXFF
	case eqFold(name, "x-forwarded-proto"):
		return fkXFProto
	case eqFold(name, "x-forwarded-host"):
		return fkXFHost
	case eqFold(name, "x-real-ip"):
		return fkXRealIP
	case eqFold(name, "proxy-connection"), eqFold(name, "proxy-authenticate"),
		eqFold(name, "proxy-authorization"), eqFold(name, "http2-settings"):
		return fkDrop
	}
	return fkOther
}

func responseFieldKind(name []byte) uint8 {
	switch len(name) {
	case 2:
		if eqFold(name, "te") {
			return fkDrop
		}
	case 4:
		if eqFold(name, "date") {
			return fkDate
		}
	case 7:
		// Trailer stays: chunked bodies, trailers included, pass through verbatim.
		switch {
		case eqFold(name, "alt-svc"):
			return fkAltSvc
		case eqFold(name, "upgrade"):
			return fkDrop
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
	switch {
	case eqFold(name, "proxy-connection"), eqFold(name, "proxy-authenticate"),
		eqFold(name, "proxy-authorization"), eqFold(name, "http2-settings"):
		return fkDrop
	}
	return fkOther
}

// dropConnectionNamed marks the fields that a Connection field names as hop-by-hop.
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
				if fields[j].kind != fkConnection && eqFoldBytes(fields[j].name(head), tok) {
					fields[j].kind = fkDrop
				}
			}
		}
	}
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
		f, next, ok := parseField(head, i)
		if !ok {
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
	if !r.chunked {
		r.contentLength = cl
	}
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
