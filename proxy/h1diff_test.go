package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Differential tests of the fast HTTP/1.1 path (h1serve.go, h1parse.go, h1forward.go)
// against the net/http path it replaced (handler.go, forward.go, headers.go): the same
// client bytes go to two proxies built alike but for Server.h1Off, each with its own
// recording target. What must agree, up to the differences listed in diffAccepted:
// per response what the client read (status, body, Content-Length, Content-Type,
// chunked framing, Connection: close, the framing field lines as sent, every other field
// and the trailers); how the connection ended (closed after Connection: close, or still
// answering a probe request); per request what the target saw (method, request target,
// Host, body and the header fields, canonicalised).
//
// The inputs are sequences of one to three requests written on one connection at once
// (pipelined), built from a few feature bytes (diffReq) so that nearly every input is
// valid and reaches the forwarding logic; FuzzH1RequestSubset already covers arbitrary
// bytes at the parser. The target's answer depends on the path (diffAnswer), so that
// every way of framing a response is exercised too.

const diffUnknownHost = "unknown.example.test"

// diffTarget is a recording target: it reads requests with net/http's parser, records
// each with its raw head, and answers as diffAnswer says for its path.
type diffTarget struct {
	addr string
	mu   sync.Mutex
	seen []diffSeen
}

// diffSeen is what the target saw of one request.
type diffSeen struct {
	id      string // the request's x-diff-id
	rawHead string
	method  string
	uri     string
	host    string
	proto   string
	body    string
	header  http.Header
}

func newDiffTarget(tb testing.TB) *diffTarget {
	tg := &diffTarget{}
	tg.addr = rawServer(tb, func(c net.Conn) {
		serveRecorded(c, func(rawHead string, req *http.Request, body string) bool {
			s := diffSeen{id: req.Header.Get("X-Diff-Id"), rawHead: rawHead, method: req.Method,
				uri: req.RequestURI, host: req.Host, proto: req.Proto, body: body, header: req.Header}
			tg.mu.Lock()
			tg.seen = append(tg.seen, s)
			tg.mu.Unlock()
			return diffAnswer(c, req, body)
		})
	})
	return tg
}

// take returns and forgets what the target saw of the requests whose id starts with
// prefix. A few hundred others are kept (requests of an input that failed early may
// arrive late), so that a long fuzzing run does not pile up bodies.
func (tg *diffTarget) take(prefix string) []diffSeen {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	var out []diffSeen
	tg.seen = slices.DeleteFunc(tg.seen, func(s diffSeen) bool {
		if strings.HasPrefix(s.id, prefix) {
			out = append(out, s)
			return true
		}
		return false
	})
	if n := len(tg.seen); n > 300 {
		tg.seen = slices.Delete(tg.seen, 0, n-100)
	}
	return out
}

// The target's answers, chosen by the request path's first segment (diffPaths). Bodies
// echo the request, so that a response delivered to the wrong request shows.
const (
	dpCL          = iota // Content-Length body, no Content-Type (as many small targets answer)
	dpTyped              // hop-by-hop fields to drop, fields to keep, the target's own Date
	dpChunked            // chunked, with a trailer
	dpEmpty              // 204
	dpNoCL               // close-delimited, then the target closes
	dpHeadOK             // HEAD: announces a length it does not send
	dpNotModified        // 304 with the representation's Content-Length
	dpClose              // Connection: close from the target, which then closes
	dpHTTP10             // HTTP/1.0, close-delimited
	dpHTTP10Keep         // HTTP/1.0 keep-alive with a Content-Length
	dpBig                // 40 KB body: many reads of the upstream buffer
	dpNoReason           // "HTTP/1.1 200" without a reason phrase
	dpManyFields         // 120 response fields (Set-Cookie and the like)
	dpDupCL              // the same Content-Length field twice (RFC 9110 8.6 lets a recipient merge them)
)

var diffPaths = []string{"/cl", "/typed", "/chunked", "/empty", "/nocl", "/head-ok", "/notmod", "/close",
	"/http10", "/http10-keep", "/big", "/noreason", "/many", "/dupcl"}

// diffAnswer writes the answer to r; false closes the connection.
func diffAnswer(c net.Conn, r *http.Request, body string) bool {
	// The decoded path: RequestURI itself is compared at the target (see diffAccepted).
	echo := fmt.Sprintf("%s %s?%s %d:%s", r.Method, r.URL.Path, r.URL.RawQuery, len(body), body)
	head := r.Method == "HEAD"
	seg, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	var b strings.Builder
	withBody := func(h string) {
		b.WriteString(h)
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(echo))
		if !head {
			b.WriteString(echo)
		}
	}
	keep := true
	switch "/" + seg {
	default: // dpCL
		withBody("HTTP/1.1 200 OK\r\n")
	case diffPaths[dpTyped]:
		withBody("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nX-Target: typed\r\n" +
			"X-Dup: a\r\nx-dup: b\r\nConnection: X-Hop-Res\r\nX-Hop-Res: 1\r\nKeep-Alive: timeout=5\r\n" +
			"Proxy-Connection: keep-alive\r\nUpgrade: h2c\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\n")
	case diffPaths[dpChunked]:
		b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n")
		if !head {
			half := len(echo) / 2
			for _, part := range []string{echo[:half], echo[half:]} {
				fmt.Fprintf(&b, "%x\r\n%s\r\n", len(part), part)
			}
			b.WriteString("0\r\nX-Sum: 42\r\n\r\n")
		}
	case diffPaths[dpEmpty]:
		b.WriteString("HTTP/1.1 204 No Content\r\nX-Target: empty\r\n\r\n")
	case diffPaths[dpNoCL]:
		b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
		if !head { // a HEAD answer is complete at its blank line: the connection stays
			b.WriteString(echo)
			keep = false
		}
	case diffPaths[dpHeadOK]:
		if head {
			b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1234\r\n\r\n")
		} else {
			withBody("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n")
		}
	case diffPaths[dpNotModified]:
		b.WriteString("HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nContent-Length: 10\r\n\r\n")
	case diffPaths[dpClose]:
		withBody("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: text/plain\r\n")
		keep = false
	case diffPaths[dpHTTP10]:
		b.WriteString("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n")
		if !head {
			b.WriteString(echo)
		}
		keep = false
	case diffPaths[dpHTTP10Keep]:
		withBody("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Type: text/plain\r\n")
	case diffPaths[dpBig]:
		echo = strings.Repeat(echo+"\n", 40000/(len(echo)+1)+1)
		withBody("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n")
	case diffPaths[dpNoReason]:
		withBody("HTTP/1.1 200\r\nContent-Type: text/plain\r\n")
	case diffPaths[dpManyFields]:
		var h strings.Builder
		for i := range 120 {
			fmt.Fprintf(&h, "Set-Cookie: c%d=%d\r\n", i, i)
		}
		withBody("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" + h.String())
	case diffPaths[dpDupCL]:
		fmt.Fprintf(&b, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n", len(echo))
		withBody("")
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return false
	}
	return keep
}

// diffReq describes one request by features; raw writes it. Every feature is an index
// into a short list, so that fuzz bytes map onto valid requests (decodeDiffReqs).
type diffReq struct {
	method, path, suffix, query, host int
	body                              int // index into diffBodies
	flags                             uint8
	mode                              int // diffModes: requests the fast path hands to net/http
}

const (
	mGET = iota
	mHEAD
	mPOST
	mOPTIONS
	mDELETE
	mPUT
)

const (
	hRoute    = iota // the route's hostname
	hUpper           // in upper case
	hPort80          // mixed case with :80
	hPort8080        // with :8080
	hUnknown         // no route
)

const (
	bNone    = iota // no body, no Content-Length
	bZero           // Content-Length: 0
	bOne            // 1 byte
	bSmall          // 11
	bMid            // 300
	bLarge          // 5000: behind another request it needs the read buffer compacted
	bNearBuf        // 8000: with its head more than the fast path's buffer: handed off
	bHuge           // 20000: more than the lean upstream sends itself (http.Transport)
)

var (
	diffMethods  = []string{"GET", "HEAD", "POST", "OPTIONS", "DELETE", "PUT"}
	diffSuffixes = []string{"", "/x/y", "/caf%C3%A9", "/caf%c3%a9", "/a%2Fb%2f", "/~u/!$&'()*+,;=:@", "//double", "/.././x",
		"/\"{}|^`<>\\[]"}
	diffQueries = []string{"", "?q=1", "?q=%41%zz&x=a+b", "?", "?a=1;b=2&c", "?p=/x?y&e=%E2%82%AC", "?x#frag", "?\"{}|^`<>\\"}
	diffHosts   = []string{h1Host, "APP.EXAMPLE.TEST", "App.Example.Test:80", h1Host + ":8080", diffUnknownHost}
	diffBodies  = []int{0, -1, 1, 11, 300, 5000, 8000, 20000} // -1: an explicit "Content-Length: 0"
)

// diffReq flags.
const (
	dfClose     uint8 = 1 << iota // Connection: close
	dfForwarded                   // the client sends X-Forwarded-*, Forwarded, X-Real-Ip
	dfHop                         // hop-by-hop fields, one named by Connection
	dfTE                          // TE: trailers
	dfOdd                         // odd spacing and case, a repeated field, an empty value
	dfUA                          // a User-Agent
	dfKeepAlive                   // Connection: keep-alive
	dfUpper                       // upper-case Host, Connection and Content-Length names
)

// diffModes: most requests stay on the fast path; the others are handed to net/http by
// the fast side, in the middle of a pipeline, together with the bytes already read.
const (
	dmChunked = 1 + iota // a chunked request body
	dmExpect             // Expect: 100-continue (the body follows at once)
	dmHTTP10             // HTTP/1.0 (keep-alive with dfKeepAlive)
	dmUpgrade            // Connection: upgrade, Upgrade: foo/1 (not a WebSocket)
	diffModes = 8        // modes from dmUpgrade+1 on are plain requests
)

const diffReqBytes = 8

func (d diffReq) meth() string { return diffMethods[d.method%len(diffMethods)] }

// raw is the request's bytes; id goes into x-diff-id, which the target reports back.
func (d diffReq) raw(id string) string {
	var b strings.Builder
	bodyLen := diffBodies[d.body%len(diffBodies)]
	mode := d.mode % diffModes
	version := "HTTP/1.1"
	if mode == dmHTTP10 {
		version = "HTTP/1.0"
	}
	b.WriteString(d.meth() + " " + diffPaths[d.path%len(diffPaths)] + diffSuffixes[d.suffix%len(diffSuffixes)] +
		diffQueries[d.query%len(diffQueries)] + " " + version + "\r\n")
	name := func(canonical, upper string) string {
		switch {
		case d.flags&dfUpper != 0:
			return upper
		case d.flags&dfOdd != 0:
			return strings.ToLower(canonical)
		}
		return canonical
	}
	host := diffHosts[d.host%len(diffHosts)]
	if d.flags&dfOdd != 0 {
		b.WriteString(name("Host", "HOST") + ":\t " + host + " \t\r\n")
	} else {
		b.WriteString(name("Host", "HOST") + ": " + host + "\r\n")
	}
	b.WriteString("x-diff-id: " + id + "\r\n")
	if d.flags&dfUA != 0 {
		b.WriteString("User-Agent: diff/1\r\n")
	}
	var conn []string
	if d.flags&dfKeepAlive != 0 {
		conn = append(conn, "keep-alive")
	}
	if d.flags&dfHop != 0 {
		conn = append(conn, "x-foo")
		b.WriteString("Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nX-Foo: bar\r\n" +
			"Proxy-Authorization: Basic eHl6\r\nTrailer: X-Sum\r\n")
	}
	if d.flags&dfClose != 0 {
		conn = append(conn, "close")
	}
	if len(conn) > 0 {
		sep := ", "
		if d.flags&dfOdd != 0 {
			sep = " ,\t"
		}
		b.WriteString(name("Connection", "CONNECTION") + ": " + strings.Join(conn, sep) + "\r\n")
	}
	if d.flags&dfForwarded != 0 {
		b.WriteString("X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-For: 7.7.7.7, 8.8.8.8\r\nX-Forwarded-Proto: https\r\n" +
			"X-Forwarded-Host: evil.test\r\nForwarded: for=6.6.6.6\r\nX-Real-Ip: 6.6.6.6\r\n")
	}
	if d.flags&dfTE != 0 {
		b.WriteString("TE: trailers\r\n")
	}
	if d.flags&dfOdd != 0 {
		b.WriteString("x-odd:   spaced\tvalue \t\r\nX-Empty:\r\nX-Rep: 1\r\nx-rep: 2\r\nACCEPT: */*\r\n")
	}
	switch mode {
	case dmExpect:
		b.WriteString("Expect: 100-continue\r\n")
	case dmUpgrade:
		b.WriteString("Connection: upgrade\r\nUpgrade: foo/1\r\n")
	}
	n := max(bodyLen, 0)
	body := make([]byte, n)
	for i := range body {
		body[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[(i+len(id))%36]
	}
	switch {
	case mode == dmChunked:
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		if n > 0 {
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body)
		}
		b.WriteString("0\r\n\r\n")
	case bodyLen != 0:
		b.WriteString(name("Content-Length", "CONTENT-LENGTH") + ": " + strconv.Itoa(n) + "\r\n\r\n")
		b.Write(body)
	default:
		b.WriteString("\r\n")
	}
	return b.String()
}

func (d diffReq) encode() []byte {
	return []byte{byte(d.method), byte(d.path), byte(d.suffix), byte(d.query), byte(d.host), byte(d.body), d.flags, byte(d.mode)}
}

// decodeDiffReqs maps fuzz bytes to a server choice and 1 to 3 requests: the first byte
// chooses the number and whether the client is a trusted proxy, then diffReqBytes per
// request (missing bytes read as zero: GET /cl to the route).
func decodeDiffReqs(data []byte) (trusted bool, reqs []diffReq) {
	at := func(i int) int {
		if i < len(data) {
			return int(data[i])
		}
		return 0
	}
	n := 1 + at(0)%3
	trusted = at(0)/3%2 == 1
	for i := range n {
		o := 1 + i*diffReqBytes
		reqs = append(reqs, diffReq{method: at(o), path: at(o + 1), suffix: at(o + 2), query: at(o + 3),
			host: at(o + 4), body: at(o + 5), flags: uint8(at(o + 6)), mode: at(o + 7)})
	}
	return trusted, reqs
}

func encodeDiffReqs(trusted bool, reqs ...diffReq) []byte {
	b := []byte{byte(len(reqs) - 1)}
	if trusted {
		b[0] += 3
	}
	for _, r := range reqs {
		b = append(b, r.encode()...)
	}
	return b
}

// diffSide is one proxy with its own target.
type diffSide struct {
	name string
	e    *env
	tg   *diffTarget
}

// diffPair is the fast-path proxy and the net/http one, built the same way.
type diffPair struct{ fast, std diffSide }

func newDiffPair(tb testing.TB, trusted bool) *diffPair {
	mk := func(name string, h1Off bool) diffSide {
		e := newEnv(tb, func(c *Config) {
			if trusted {
				c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
			}
		})
		if h1Off {
			// newEnv's Serve already runs, but no connection has been accepted yet, and
			// each connection's goroutine, which reads h1Off, starts after acceptLoop's
			// h1.add locked h1.mu: locking it here orders our write before that read.
			e.srv.h1Off = true
			e.srv.h1.mu.Lock()
			e.srv.h1.mu.Unlock()
		}
		tg := newDiffTarget(tb)
		e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}})
		return diffSide{name: name, e: e, tg: tg}
	}
	return &diffPair{fast: mk("fast path", false), std: mk("net/http", true)}
}

// diffPairs are the pairs for an untrusted client (0) and a trusted proxy (1).
type diffPairs [2]*diffPair

func newDiffPairs(tb testing.TB) *diffPairs {
	return &diffPairs{newDiffPair(tb, false), newDiffPair(tb, true)}
}

func (p *diffPairs) get(trusted bool) *diffPair {
	if trusted {
		return p[1]
	}
	return p[0]
}

// diffResp is what the client read of one response.
type diffResp struct {
	Status        int
	Body          string
	BodyErr       string
	ContentLength []string
	ContentType   []string
	Chunked       bool // framed with Transfer-Encoding: chunked
	Close         bool // Connection: close
	// Framing are the Content-Length, Transfer-Encoding and Connection field lines as
	// they were on the wire (sorted): http.ReadResponse merges repeated identical
	// Content-Length fields, other clients refuse them.
	Framing []string
	Header  http.Header
	Trailer http.Header
}

// diffObs is everything observed for one input on one side.
type diffObs struct {
	Responses []diffResp
	End       string // how the connection ended, see run
	Seen      []diffSeen
	raw       string // every byte the client read, for the failure message
}

var diffSeq atomic.Int64

const diffProbe = "GET /probe HTTP/1.1\r\nHost: " + diffUnknownHost + "\r\nConnection: close\r\n\r\n"

// diffWrite is requests sent in one write, and their methods.
type diffWrite struct {
	raw     string
	methods []string
}

// run sends the writes to the side's proxy, each after the answers to the one before,
// and reads the responses. End says what came after the last one: "closed" when the
// proxy closed after a Connection: close response, "open" when the connection then
// answered a probe request, else what went wrong.
func (s diffSide) run(writes []diffWrite, id string) (obs diffObs) {
	c, err := net.Dial("tcp", s.e.http)
	if err != nil {
		obs.End = "dial: " + err.Error()
		return obs
	}
	defer c.Close()
	// Bounded: a hang is a difference (or a failure), never a stuck test.
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	rec := &recReader{r: c}
	br := bufio.NewReader(rec)
	defer func() {
		obs.raw = rec.buf.String()
		obs.Seen = s.tg.take(id + "-")
	}()
	var last *http.Response
	for _, w := range writes {
		if _, err := io.WriteString(c, w.raw); err != nil {
			obs.End = "write: " + errClass(err)
			return obs
		}
		var ok bool
		if last, ok = s.read(br, rec, w.methods, &obs); !ok {
			return obs
		}
		if last != nil && last.Close {
			break
		}
	}
	if last != nil && last.Close {
		// The proxy said it closes: nothing more may arrive, and the close must come.
		b, err := io.ReadAll(br)
		switch {
		case len(b) > 0:
			obs.End = fmt.Sprintf("%d bytes after Connection: close", len(b))
		case err == nil || isReset(err) || errors.Is(err, syscall.ECONNRESET):
			obs.End = "closed"
		default:
			obs.End = "after Connection: close: " + errClass(err)
		}
		return obs
	}
	// Not announced closed: the connection must answer another request, and nothing
	// else may be waiting in it (stray bytes would corrupt the probe's answer).
	if _, err := io.WriteString(c, diffProbe); err != nil {
		obs.End = "probe write: " + errClass(err)
		return obs
	}
	res, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		obs.End = "probe: " + errClass(err)
		return obs
	}
	_, err = io.ReadAll(res.Body)
	if err != nil || res.StatusCode != 404 {
		obs.End = fmt.Sprintf("probe: status %d, %v", res.StatusCode, err)
		return obs
	}
	obs.End = "open"
	return obs
}

// read reads the responses to methods into obs, up to one that closes the connection,
// and returns the last; false when something went wrong (recorded in obs.End).
func (s diffSide) read(br *bufio.Reader, rec *recReader, methods []string, obs *diffObs) (*http.Response, bool) {
	var last *http.Response
	for _, m := range methods {
		var res *http.Response
		var framing []string
		for res == nil || res.StatusCode >= 100 && res.StatusCode < 200 { // skip 100 Continue
			start := rec.buf.Len() - br.Buffered()
			var err error
			if res, err = http.ReadResponse(br, &http.Request{Method: m}); err != nil {
				obs.End = fmt.Sprintf("response %d: %s", len(obs.Responses)+1, errClass(err))
				return nil, false
			}
			framing = framingFields(rec.buf.Bytes()[start:])
		}
		b, err := io.ReadAll(res.Body)
		r := diffResp{Status: res.StatusCode, Body: string(b), Close: res.Close,
			ContentLength: res.Header["Content-Length"], ContentType: res.Header["Content-Type"],
			Chunked: slices.Contains(res.TransferEncoding, "chunked"), Framing: framing,
			Header: res.Header, Trailer: res.Trailer}
		if err != nil {
			r.BodyErr = errClass(err)
			obs.Responses = append(obs.Responses, r)
			obs.End = "body broken off"
			return nil, false
		}
		obs.Responses = append(obs.Responses, r)
		last = res
		if res.Close {
			break
		}
	}
	return last, true
}

// framingFields returns the framing field lines of the response head at the start of
// b, as "name: value" in lower case, sorted.
func framingFields(b []byte) []string {
	head, _, _ := bytes.Cut(b, []byte("\r\n\r\n"))
	lines := strings.Split(string(head), "\r\n")
	var out []string
	for _, l := range lines[1:] {
		name, value, _ := strings.Cut(l, ":")
		switch name = strings.ToLower(name); name {
		case "content-length", "transfer-encoding", "connection":
			out = append(out, name+": "+strings.ToLower(strings.Trim(value, " \t")))
		}
	}
	slices.Sort(out)
	return out
}

// errClass names an error by kind: the two sides' exact messages may differ.
func errClass(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF):
		return "EOF"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected EOF"
	case isReset(err) || errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "malformed (" + err.Error() + ")"
}

// diffAccepted are the differences between the paths that the comparison tolerates,
// each with its reason: the one place that says what is not compared. Each normalises
// one or both sides' observations before they are compared; nothing else is ignored.
var diffAccepted = []struct {
	what, why string
	apply     func(fast, std *diffObs)
}{
	{"Date values",
		"each side stamps its own clock; that there is exactly one Date field is still compared",
		func(fast, std *diffObs) {
			for _, o := range []*diffObs{fast, std} {
				for _, r := range o.Responses {
					if d, ok := r.Header["Date"]; ok {
						r.Header["Date"] = slices.Repeat([]string{"<date>"}, len(d))
					}
				}
			}
		}},
	{"raw heads at the target",
		"the fast path forwards field lines byte for byte (name case, spacing, order), net/http " +
			"canonicalises names and writes fields sorted; the target's parsed view is compared instead",
		func(fast, std *diffObs) {
			for _, o := range []*diffObs{fast, std} {
				for i := range o.Seen {
					o.Seen[i].rawHead = ""
				}
			}
		}},
	{"escaping of the request path",
		"net/http re-encodes the path (URL.EscapedPath): bytes RFC 3986 does not allow in a path that " +
			"the client sent raw (\"{}|^`<>\\[]) reach the target percent-encoded; the fast path forwards " +
			"the request target as sent. The decoded path and the query must still agree",
		func(fast, std *diffObs) {
			for i, f := range fast.Seen {
				if i >= len(std.Seen) || f.uri == std.Seen[i].uri {
					continue
				}
				fu, ferr := url.ParseRequestURI(f.uri)
				su, serr := url.ParseRequestURI(std.Seen[i].uri)
				if ferr == nil && serr == nil && fu.Path == su.Path && fu.RawQuery == su.RawQuery &&
					su.EscapedPath() == (&url.URL{Path: fu.Path}).EscapedPath() {
					fast.Seen[i].uri = std.Seen[i].uri
				}
			}
		}},
	{"Content-Length: 0 on a request without a body",
		"the fast path forwards the client's field as sent; net/http's writer sends Content-Length " +
			"for an empty body only for methods that expect one (POST, PUT, PATCH), and adds it there " +
			"when the client sent none. Both mean no content (RFC 9110 8.6)",
		func(fast, std *diffObs) {
			for i, f := range fast.Seen {
				if i >= len(std.Seen) || f.body != "" || std.Seen[i].body != "" {
					continue
				}
				fc, sc := f.header["Content-Length"], std.Seen[i].header["Content-Length"]
				if slices.Equal(fc, []string{"0"}) && sc == nil || fc == nil && slices.Equal(sc, []string{"0"}) {
					delete(f.header, "Content-Length")
					delete(std.Seen[i].header, "Content-Length")
				}
			}
		}},
	{"Content-Length on 304",
		"RFC 9110 8.6 lets a 304 carry the representation's Content-Length (no body follows either " +
			"way); the fast path relays the target's, net/http's server deletes it",
		func(fast, std *diffObs) {
			for i, f := range fast.Responses {
				if f.Status == http.StatusNotModified && i < len(std.Responses) && std.Responses[i].ContentLength == nil {
					fast.Responses[i].ContentLength = nil
					var framing []string
					for _, l := range f.Framing {
						if !strings.HasPrefix(l, "content-length:") {
							framing = append(framing, l)
						}
					}
					fast.Responses[i].Framing = framing
					delete(f.Header, "Content-Length")
				}
			}
		}},
}

// normalized returns copies of the parts of fast and std that must agree.
func normalized(fast, std diffObs) (nf, ns diffObs) {
	cp := func(o diffObs) diffObs {
		n := diffObs{End: o.End}
		for _, r := range o.Responses {
			r.Header = r.Header.Clone()
			n.Responses = append(n.Responses, r)
		}
		for _, s := range o.Seen {
			s.header = s.header.Clone()
			n.Seen = append(n.Seen, s)
		}
		return n
	}
	nf, ns = cp(fast), cp(std)
	for _, a := range diffAccepted {
		a.apply(&nf, &ns)
	}
	return nf, ns
}

// check sends reqs to both sides and fails t on any difference not in diffAccepted.
// (A race of the net/http path this test found, a truncated answer to an upload over
// upMaxBody, is fixed at its cause: TestTrackedBodyEndsAtContentLength.)
func (p *diffPair) check(t *testing.T, reqs []diffReq) {
	t.Helper()
	id := strconv.FormatInt(diffSeq.Add(1), 10)
	if msg := p.compare(diffWrites(reqs, id), id); msg != "" {
		t.Error(msg)
	}
}

// diffWrites writes reqs, as the requests numbered id-0, id-1 and so on. They go in
// one write, except that a request after which the proxy may close (Connection: close,
// HTTP/1.0) ends a write when the whole would not fit one server read: a server that
// closes with unread bytes in its socket makes the kernel send RST, which can destroy
// the response on its way to the client. Both paths close that way (net/http lingers
// only in some cases), so that race would only add noise.
func diffWrites(reqs []diffReq, id string) []diffWrite {
	var raws []string
	total := 0
	for i, r := range reqs {
		raws = append(raws, r.raw(id+"-"+strconv.Itoa(i)))
		total += len(raws[i])
	}
	var writes []diffWrite
	var w diffWrite
	for i, r := range reqs {
		w.raw += raws[i]
		w.methods = append(w.methods, r.meth())
		mayClose := r.flags&dfClose != 0 || r.mode%diffModes == dmHTTP10
		if mayClose && total > diffOneRead && i < len(reqs)-1 {
			writes, w = append(writes, w), diffWrite{}
		}
	}
	return append(writes, w)
}

// diffOneRead is what both servers read at once (net/http's bufio.Reader; the fast
// path's buffer is larger).
const diffOneRead = 4096

// checkRaw is check for hand-written request bytes; every request must carry an
// x-diff-id field starting with id+"-".
func (p *diffPair) checkRaw(t *testing.T, writes []diffWrite, id string) {
	t.Helper()
	if msg := p.compare(writes, id); msg != "" {
		t.Error(msg)
	}
}

// compare sends writes to both sides and describes their differences ("" when they
// agree); broken reports a response body that broke off on either side.
func (p *diffPair) compare(writes []diffWrite, id string) string {
	fast := p.fast.run(writes, id)
	std := p.std.run(writes, id)
	nf, ns := normalized(fast, std)
	if reflect.DeepEqual(nf, ns) {
		return ""
	}
	var b strings.Builder
	b.WriteString("the paths disagree on")
	for _, w := range writes {
		b.WriteString(" " + abbrev(w.raw))
	}
	b.WriteString("\n")
	for i := range max(len(nf.Responses), len(ns.Responses)) {
		f, s := at(nf.Responses, i), at(ns.Responses, i)
		if !reflect.DeepEqual(f, s) {
			fmt.Fprintf(&b, "response %d:\n  fast:     %s\n  net/http: %s\n", i+1, f, s)
		}
	}
	if nf.End != ns.End {
		fmt.Fprintf(&b, "end:\n  fast:     %s\n  net/http: %s\n", nf.End, ns.End)
	}
	for i := range max(len(nf.Seen), len(ns.Seen)) {
		f, s := at(nf.Seen, i), at(ns.Seen, i)
		if !reflect.DeepEqual(f, s) {
			fmt.Fprintf(&b, "target request %d:\n  fast:     %s\n  net/http: %s\n", i+1, f, s)
		}
	}
	fmt.Fprintf(&b, "client read:\n  fast:     %s\n  net/http: %s\n", abbrev(fast.raw), abbrev(std.raw))
	for i := range max(len(fast.Seen), len(std.Seen)) {
		fmt.Fprintf(&b, "target raw head %d:\n  fast:     %q\n  net/http: %q\n", i+1, at(fast.Seen, i).rawHead, at(std.Seen, i).rawHead)
	}
	return b.String()
}

func (r diffResp) String() string {
	if r.Status == 0 {
		return "(none)"
	}
	return fmt.Sprintf("%d body=%d:%s err=%q Content-Length=%q Content-Type=%q chunked=%v close=%v framing=%q header=%s trailer=%v",
		r.Status, len(r.Body), abbrev(r.Body), r.BodyErr, r.ContentLength, r.ContentType, r.Chunked, r.Close,
		r.Framing, abbrev(fmt.Sprint(r.Header)), r.Trailer)
}

// abbrev quotes s, cut in the middle when it is long.
func abbrev(s string) string {
	if len(s) <= 200 {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:100]) + "…" + strconv.Quote(s[len(s)-100:])
}

func (s diffSeen) String() string {
	if s.id == "" && s.method == "" {
		return "(none)"
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range s.header {
			if !yield(k) {
				return
			}
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s host=%q body=%d:%s header={", s.method, s.uri, s.proto, s.host, len(s.body), abbrev(s.body))
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %q; ", k, s.header[k])
	}
	b.WriteString("}")
	return b.String()
}

func at[T any](s []T, i int) T {
	var zero T
	if i < len(s) {
		return s[i]
	}
	return zero
}

// diffSeeds are the table's inputs and the fuzz target's seeds: every target answer,
// every method, the hop-by-hop and forwarding fields, hosts, hand-offs and pipelines.
var diffSeeds = []struct {
	name    string
	trusted bool
	reqs    []diffReq
}{
	{"GET answers, pipelined", false, []diffReq{{path: dpCL}, {path: dpTyped}, {path: dpChunked}}},
	{"GET close-delimited, 204, 304", false, []diffReq{{path: dpNoCL}, {path: dpEmpty}, {path: dpNotModified}}},
	{"GET head-ok, target closes, HTTP/1.0", false, []diffReq{{path: dpHeadOK}, {path: dpClose}, {path: dpHTTP10}}},
	{"GET HTTP/1.0 keep-alive, big, no reason", false, []diffReq{{path: dpHTTP10Keep}, {path: dpBig}, {path: dpNoReason}}},
	{"HEAD answers", false, []diffReq{{method: mHEAD, path: dpCL}, {method: mHEAD, path: dpChunked}, {method: mHEAD, path: dpHeadOK}}},
	{"HEAD close-delimited, target closes, HTTP/1.0", false, []diffReq{{method: mHEAD, path: dpNoCL}, {method: mHEAD, path: dpClose}, {method: mHEAD, path: dpHTTP10}}},
	{"POST bodies", false, []diffReq{{method: mPOST, body: bOne}, {method: mPOST, path: dpChunked, body: bMid}, {method: mPOST, path: dpNoCL, body: bSmall}}},
	{"POST large bodies", false, []diffReq{{}, {method: mPOST, path: dpTyped, body: bLarge}, {method: mPUT, body: bNearBuf}}},
	{"PUT huge body", false, []diffReq{{method: mPUT, path: dpBig, body: bHuge}, {}}},
	{"Content-Length 0, OPTIONS, DELETE with body", false, []diffReq{{method: mPOST, body: bZero}, {method: mOPTIONS, path: dpTyped}, {method: mDELETE, body: bSmall}}},
	{"GET with Content-Length 0 or a body", false, []diffReq{{body: bZero}, {body: bSmall}}},
	{"hop-by-hop fields and TE", false, []diffReq{{flags: dfHop | dfTE | dfKeepAlive}, {path: dpChunked, flags: dfHop | dfTE}}},
	{"client forwarding fields", false, []diffReq{{flags: dfForwarded}, {method: mPOST, body: bSmall, flags: dfForwarded | dfHop}}},
	{"client forwarding fields, trusted", true, []diffReq{{flags: dfForwarded}, {path: dpChunked, flags: dfForwarded | dfTE}, {host: hPort8080, flags: dfForwarded}}},
	{"Connection: close mid-pipeline", false, []diffReq{{}, {path: dpTyped, flags: dfClose}, {path: dpChunked}}},
	{"Connection: close odd spelling", false, []diffReq{{flags: dfClose | dfOdd | dfHop | dfKeepAlive}}},
	{"odd and upper-case fields", false, []diffReq{{flags: dfOdd | dfUA}, {method: mPOST, body: bSmall, flags: dfUpper | dfUA}}},
	{"hosts", false, []diffReq{{host: hUpper}, {host: hPort80}, {host: hPort8080}}},
	{"unknown host", false, []diffReq{{host: hUnknown}, {method: mPOST, host: hUnknown, body: bSmall}, {}}},
	{"paths and queries", false, []diffReq{{suffix: 1, query: 1}, {suffix: 2, query: 2}, {suffix: 3, query: 3}}},
	{"more paths and queries", false, []diffReq{{suffix: 4, query: 4}, {suffix: 5, query: 5}, {suffix: 6}}},
	{"dot segments, bytes net/http escapes", false, []diffReq{{suffix: 7, flags: dfUA}, {suffix: 8, query: 7}, {query: 6}}},
	{"hand-offs mid-pipeline: chunked, Expect", false, []diffReq{{}, {method: mPOST, path: dpTyped, body: bSmall, mode: dmChunked}, {method: mPOST, body: bOne, mode: dmExpect}}},
	{"hand-offs mid-pipeline: Upgrade, HTTP/1.0", false, []diffReq{{}, {path: dpNoCL, mode: dmUpgrade}, {path: dpChunked, mode: dmHTTP10, flags: dfKeepAlive}}},
	// Fast-path bugs, failing until fixed:
	//  - h1Conn.answer writes its fixed body after the head even for HEAD (net/http
	//    suppresses it): the stray "404 Not Found\n" corrupts the next response on the
	//    connection. Every fixed answer (404, 502, 503, 504) to a HEAD does it.
	//  - parseResponse refuses a response with more than h1MaxFields (100) fields: the
	//    client gets 502 where net/http relays the target's answer.
	//  - relay forwards a repeated identical Content-Length as it came: Go's client
	//    merges the fields, others (Node.js's llhttp) refuse any repeated Content-Length;
	//    net/http sends one.
	{"HEAD unknown host", false, []diffReq{{method: mHEAD, host: hUnknown}, {}}},
	{"more than 100 response fields", false, []diffReq{{path: dpManyFields}}},
	{"duplicate Content-Length from the target", false, []diffReq{{path: dpDupCL}}},
}

// TestH1FastPathMatchesNetHTTP: for each input, both paths give the client the same
// responses and the target the same requests (up to diffAccepted).
func TestH1FastPathMatchesNetHTTP(t *testing.T) {
	pairs := newDiffPairs(t)
	t.Run("the sides take their paths", func(t *testing.T) {
		// The fast path forwards field names as sent, net/http canonicalises them: if
		// both sides ran the same path, every comparison below would be vacuous.
		p := pairs.get(false)
		id := strconv.FormatInt(diffSeq.Add(1), 10)
		for _, s := range []struct {
			side diffSide
			want string
		}{{p.fast, "\r\nx-diff-id: "}, {p.std, "\r\nX-Diff-Id: "}} {
			obs := s.side.run(diffWrites([]diffReq{{}}, id), id)
			if len(obs.Seen) != 1 || !strings.Contains(obs.Seen[0].rawHead, s.want) || obs.End != "open" {
				t.Fatalf("%s: target saw %v, end %q; want one request with %q", s.side.name, obs.Seen, obs.End, s.want)
			}
		}
	})
	for _, tc := range diffSeeds {
		t.Run(tc.name, func(t *testing.T) {
			pairs.get(tc.trusted).check(t, tc.reqs)
		})
	}
	// Requests the generator does not write, handed off by the fast side mid-pipeline.
	raws := []struct{ name, raw string }{
		{"OPTIONS * then GET", "OPTIONS * HTTP/1.1\r\nHost: " + h1Host + "\r\nx-diff-id: @-0\r\n\r\n" +
			"GET /cl HTTP/1.1\r\nHost: " + h1Host + "\r\nx-diff-id: @-1\r\n\r\n"},
		{"GET then a head larger than the read buffer", "GET /cl HTTP/1.1\r\nHost: " + h1Host + "\r\nx-diff-id: @-0\r\n\r\n" +
			"GET /typed HTTP/1.1\r\nHost: " + h1Host + "\r\nx-diff-id: @-1\r\nCookie: c=" + strings.Repeat("k", h1ReadBuf) + "\r\n\r\n" +
			"GET /chunked HTTP/1.1\r\nHost: " + h1Host + "\r\nx-diff-id: @-2\r\n\r\n"},
	}
	for _, tc := range raws {
		t.Run(tc.name, func(t *testing.T) {
			id := "r" + strconv.FormatInt(diffSeq.Add(1), 10)
			raw := strings.ReplaceAll(tc.raw, "@", id)
			var methods []string
			for _, line := range strings.Split(raw, "\r\n") {
				if strings.HasSuffix(line, " HTTP/1.1") {
					methods = append(methods, strings.Fields(line)[0])
				}
			}
			pairs.get(false).checkRaw(t, []diffWrite{{raw, methods}}, id)
		})
	}
}

// FuzzH1FastPathMatchesNetHTTP is TestH1FastPathMatchesNetHTTP on generated inputs (see
// decodeDiffReqs). The servers are built once per fuzzing process: inputs run one at a
// time and are told apart at the targets by their x-diff-id.
func FuzzH1FastPathMatchesNetHTTP(f *testing.F) {
	for _, tc := range diffSeeds {
		f.Add(encodeDiffReqs(tc.trusted, tc.reqs...))
	}
	pairs := newDiffPairs(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		trusted, reqs := decodeDiffReqs(data)
		pairs.get(trusted).check(t, reqs)
	})
}
