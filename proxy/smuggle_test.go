package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/serve-zone/ingress/routetable"
)

// Request smuggling corpus: raw bytes on the real listeners (plain and TLS, whichever
// path serves them), two routes (a.test, b.test) each to its own recording target. The
// targets split what each of their connections receives into requests with a strict
// HTTP/1.1 reader of their own (not net/http's), record them and answer each with a
// response naming it ("target=a conn=1 req=1 path=/x"). For every case the test checks:
//
//   - what the client read, response by response (an allowed outcome), and whether its
//     connection was closed afterwards or still serves a probe request correctly;
//   - the exact requests each target received (method, path, Host, body length), so a
//     request hidden in a body or a header never reaches anybody, and nothing reaches a
//     target it was not routed to;
//   - invariants of every forwarded request: the forwarding fields are the ingress's own
//     (client 127.0.0.1, proto http/https), one canonical Content-Length or chunked
//     (never both), no framing fields in trailers, nothing malformed; a request cut short
//     at a target only on a connection that then closed;
//   - that a later client, on a new connection, gets its own answers from both routes
//     (nothing left over on a pooled target connection, nothing leaked to it).
//
// Every read has a deadline of smugWait (the ingress's header timeout is 10 s), so a
// refusal that waits for more bytes than will ever come fails instead of passing late.

const smugWait = 3 * time.Second

var (
	// smugPayload is a complete request to b.test: wherever it appears inside a body or a
	// chunk, b's target recording /smuggled means it was taken for a request.
	smugPayload = "GET /smuggled HTTP/1.1\r\nHost: b.test\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n"
	// smugAdmin is the classic 71-byte body of a Connection: Content-Length attack.
	smugAdmin = "GET /admin HTTP/1.1\r\nHost: internal.admin\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n"
)

// smugHead joins lines with CRLF and ends the head.
func smugHead(lines ...string) string { return strings.Join(lines, "\r\n") + "\r\n\r\n" }

// smugChunked is data as one chunk and the last chunk.
func smugChunked(data string) string { return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(data), data) }

// The recording target.

type smugTarget struct {
	name      string
	addr      string
	script    *smugScript // how it answers requests for /evil…; nil: like any other
	release   chan struct{}
	laterDone chan struct{}
	laterOnce sync.Once
	quit      chan struct{}

	mu    sync.Mutex
	conns []*smugConn
}

// smugScript is a hostile answer: first right after the request, later (if any) once
// the test has read the client's response (release).
type smugScript struct {
	first, later string
}

type smugConn struct {
	id      int
	reqs    []*smugReq
	partial bool  // a request has begun and is not complete yet
	ended   bool  // the connection is over
	endErr  error // why: nil when it closed between requests
	done    chan struct{}
}

type smugReq struct {
	conn, seq int
	method    string
	path      string
	fields    [][2]string
	body      []byte
	chunked   bool
	trailers  [][2]string
}

func (r *smugReq) values(name string) []string {
	var vs []string
	for _, f := range r.fields {
		if strings.EqualFold(f[0], name) {
			vs = append(vs, f[1])
		}
	}
	return vs
}

func (r *smugReq) String() string {
	s := fmt.Sprintf("%s %s host=%q body=%d", r.method, r.path, strings.Join(r.values("host"), "|"), len(r.body))
	if r.chunked {
		s += " (chunked)"
	}
	return s
}

func newSmugTarget(t *testing.T, name string, script *smugScript) *smugTarget {
	tg := &smugTarget{name: name, script: script, release: make(chan struct{}),
		laterDone: make(chan struct{}), quit: make(chan struct{})}
	tg.addr = rawServer(t, tg.serve)
	t.Cleanup(func() { close(tg.quit) }) // runs before rawServer's cleanup waits
	return tg
}

func (tg *smugTarget) serve(c net.Conn) {
	sc := &smugConn{done: make(chan struct{})}
	tg.mu.Lock()
	sc.id = len(tg.conns) + 1
	tg.conns = append(tg.conns, sc)
	tg.mu.Unlock()
	var end error
	defer func() {
		tg.mu.Lock()
		sc.ended, sc.endErr = true, end
		tg.mu.Unlock()
		close(sc.done)
	}()
	br := bufio.NewReader(c)
	for seq := 1; ; seq++ {
		r, err := smugReadRequest(br,
			func() { tg.mu.Lock(); sc.partial = true; tg.mu.Unlock() },
			func() { _, _ = io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n") })
		if err != nil {
			if !errors.Is(err, errSmugIdle) {
				end = err
			}
			return
		}
		r.conn, r.seq = sc.id, seq
		tg.mu.Lock()
		sc.reqs = append(sc.reqs, r)
		sc.partial = false
		tg.mu.Unlock()
		if tg.script != nil && strings.HasPrefix(r.path, "/evil") {
			if _, err := io.WriteString(c, tg.script.first); err != nil {
				end = fmt.Errorf("answer not written: %w", err)
				return
			}
			if tg.script.later != "" {
				select {
				case <-tg.release:
				case <-tg.quit:
					return
				}
				_, _ = io.WriteString(c, tg.script.later)
				tg.laterOnce.Do(func() { close(tg.laterDone) })
			}
			continue
		}
		ans := fmt.Sprintf("target=%s conn=%d req=%d path=%s", tg.name, sc.id, seq, r.path)
		res := fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Answer: %s\r\nContent-Length: %d\r\n\r\n", ans, len(ans))
		if r.method != "HEAD" {
			res += ans
		}
		if _, err := io.WriteString(c, res); err != nil {
			end = fmt.Errorf("answer not written: %w", err)
			return
		}
	}
}

// settle waits (boundedly) for connections holding the beginning of a request to end.
func (tg *smugTarget) settle() {
	tg.mu.Lock()
	var wait []*smugConn
	for _, sc := range tg.conns {
		if sc.partial && !sc.ended {
			wait = append(wait, sc)
		}
	}
	tg.mu.Unlock()
	deadline := time.After(smugWait)
	for _, sc := range wait {
		select {
		case <-sc.done:
		case <-deadline:
			return
		}
	}
}

// smugConnView is a snapshot of one target connection.
type smugConnView struct {
	id      int
	reqs    []*smugReq
	partial bool
	ended   bool
	endErr  error
}

func (tg *smugTarget) snapshot() []smugConnView {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	var v []smugConnView
	for _, sc := range tg.conns {
		v = append(v, smugConnView{sc.id, slices.Clone(sc.reqs), sc.partial, sc.ended, sc.endErr})
	}
	return v
}

func (tg *smugTarget) sawEvil() bool {
	for _, cv := range tg.snapshot() {
		for _, r := range cv.reqs {
			if strings.HasPrefix(r.path, "/evil") {
				return true
			}
		}
	}
	return false
}

// The strict request reader of the targets.

var (
	errSmugIdle      = errors.New("closed between requests")
	errSmugTruncated = errors.New("truncated request")
	errSmugMalformed = errors.New("malformed request")
)

func smugTruncated(what string, err error) error {
	return fmt.Errorf("%w: %s (%v)", errSmugTruncated, what, err)
}

func smugMalformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errSmugMalformed, fmt.Sprintf(format, args...))
}

// smugLine reads one line, which must end in CRLF and hold no other CR or LF.
func smugLine(br *bufio.Reader) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return line, err
	}
	body := line[:len(line)-1]
	if !strings.HasSuffix(body, "\r") || strings.ContainsAny(body[:len(body)-1], "\r\n") {
		return "", smugMalformed("line %q not ended by CRLF", line)
	}
	return body[:len(body)-1], nil
}

// smugToken reports an RFC 9110 token (own table: the parser under test is not the judge).
func smugToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// smugField parses a field line (no obs-fold, no whitespace before the colon, no control
// bytes but HTAB in the value).
func smugField(line string) ([2]string, error) {
	if line[0] == ' ' || line[0] == '\t' {
		return [2]string{}, smugMalformed("obs-fold or leading whitespace: %q", line)
	}
	name, value, ok := strings.Cut(line, ":")
	if !ok || !smugToken(name) {
		return [2]string{}, smugMalformed("bad field line %q", line)
	}
	value = strings.Trim(value, " \t")
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return [2]string{}, smugMalformed("control byte in field %q", line)
		}
	}
	return [2]string{name, value}, nil
}

// smugReadRequest reads one request: request line, fields, and a body framed by one
// Content-Length or by chunked alone. started is called once its first line is in,
// expect100 before a body announced with Expect: 100-continue is read.
func smugReadRequest(br *bufio.Reader, started, expect100 func()) (*smugReq, error) {
	line, err := smugLine(br)
	if err != nil {
		if errors.Is(err, errSmugMalformed) {
			return nil, err
		}
		if line == "" {
			return nil, errSmugIdle
		}
		return nil, smugTruncated("request line", err)
	}
	started()
	parts := strings.Split(line, " ")
	if len(parts) != 3 || !smugToken(parts[0]) || parts[1] == "" || parts[2] != "HTTP/1.1" {
		return nil, smugMalformed("request line %q", line)
	}
	for i := 0; i < len(parts[1]); i++ {
		if c := parts[1][i]; c <= ' ' || c >= 0x7f {
			return nil, smugMalformed("request target %q", parts[1])
		}
	}
	r := &smugReq{method: parts[0], path: parts[1]}
	for {
		line, err := smugLine(br)
		if err != nil {
			if errors.Is(err, errSmugMalformed) {
				return nil, err
			}
			return nil, smugTruncated("head", err)
		}
		if line == "" {
			break
		}
		f, err := smugField(line)
		if err != nil {
			return nil, err
		}
		r.fields = append(r.fields, f)
	}
	if h := r.values("host"); len(h) != 1 {
		return nil, smugMalformed("%d Host fields: %q", len(h), h)
	}
	te, cl := r.values("transfer-encoding"), r.values("content-length")
	n := 0
	switch {
	case len(te) > 0:
		if len(cl) > 0 {
			return nil, smugMalformed("Content-Length %q and Transfer-Encoding %q", cl, te)
		}
		if len(te) != 1 || te[0] != "chunked" {
			return nil, smugMalformed("Transfer-Encoding %q", te)
		}
		r.chunked = true
	case len(cl) > 1:
		return nil, smugMalformed("Content-Length fields %q", cl)
	case len(cl) == 1:
		v := cl[0]
		if v == "" || len(v) > 12 || strings.Trim(v, "0123456789") != "" {
			return nil, smugMalformed("Content-Length %q", v)
		}
		n, _ = strconv.Atoi(v)
	}
	if (r.chunked || n > 0) && strings.EqualFold(strings.Join(r.values("expect"), ","), "100-continue") {
		expect100()
	}
	if !r.chunked {
		r.body = make([]byte, n)
		if _, err := io.ReadFull(br, r.body); err != nil {
			return nil, smugTruncated(fmt.Sprintf("body of %d bytes", n), err)
		}
		return r, nil
	}
	for {
		line, err := smugLine(br)
		if err != nil {
			if errors.Is(err, errSmugMalformed) {
				return nil, err
			}
			return nil, smugTruncated("chunk size line", err)
		}
		size, _, _ := strings.Cut(line, ";")
		if size == "" || len(size) > 16 || strings.Trim(size, "0123456789abcdefABCDEF") != "" {
			return nil, smugMalformed("chunk size line %q", line)
		}
		k, _ := strconv.ParseUint(size, 16, 64)
		if k == 0 {
			break
		}
		if k > 1<<20 {
			return nil, smugMalformed("chunk of %d bytes", k)
		}
		data := make([]byte, k+2)
		if _, err := io.ReadFull(br, data); err != nil {
			return nil, smugTruncated("chunk data", err)
		}
		if string(data[k:]) != "\r\n" {
			return nil, smugMalformed("chunk data not followed by CRLF")
		}
		r.body = append(r.body, data[:k]...)
	}
	for {
		line, err := smugLine(br)
		if err != nil {
			if errors.Is(err, errSmugMalformed) {
				return nil, err
			}
			return nil, smugTruncated("trailers", err)
		}
		if line == "" {
			return r, nil
		}
		f, err := smugField(line)
		if err != nil {
			return nil, err
		}
		r.trailers = append(r.trailers, f)
	}
}

// The client.

type smugClient struct {
	c  net.Conn
	br *bufio.Reader
}

func smugDial(t *testing.T, e *env, useTLS bool) *smugClient {
	t.Helper()
	d := &net.Dialer{Timeout: smugWait}
	var c net.Conn
	var err error
	if useTLS {
		c, err = tls.DialWithDialer(d, "tcp", e.https, &tls.Config{ServerName: "a.test",
			InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	} else {
		c, err = d.Dial("tcp", e.http)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &smugClient{c: c, br: bufio.NewReader(c)}
}

func (c *smugClient) send(s string) error {
	_ = c.c.SetWriteDeadline(time.Now().Add(smugWait))
	_, err := io.WriteString(c.c, s)
	return err
}

// smugGot is one response as the client read it.
type smugGot struct {
	status int
	body   string
	answer string // X-Answer: the target's name for the request it answered
	close  bool
	err    error
}

func (g smugGot) String() string {
	if g.err != nil {
		return "error: " + g.err.Error()
	}
	s := fmt.Sprintf("%d %.60q", g.status, g.body)
	if g.answer != "" && g.answer != g.body {
		s += " answer=" + strconv.Quote(g.answer)
	}
	if g.close {
		s += " (Connection: close)"
	}
	return s
}

// read reads one final response (1xx skipped) to a request with method.
func (c *smugClient) read(method string) smugGot {
	_ = c.c.SetReadDeadline(time.Now().Add(smugWait))
	for {
		res, err := http.ReadResponse(c.br, &http.Request{Method: method})
		if err != nil {
			return smugGot{err: err}
		}
		if res.StatusCode < 200 {
			continue
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return smugGot{status: res.StatusCode, err: fmt.Errorf("reading the body of a %d: %w", res.StatusCode, err)}
		}
		return smugGot{status: res.StatusCode, body: string(b), answer: res.Header.Get("X-Answer"), close: res.Close}
	}
}

func smugIsClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// smugAnswer parses a target's answer.
func smugAnswer(s string) (target string, conn, req int, path string, ok bool) {
	n, _ := fmt.Sscanf(s, "target=%s conn=%d req=%d path=%s", &target, &conn, &req, &path)
	return target, conn, req, path, n == 4
}

// Outcomes.

type smugClose uint8

const (
	closeMay  smugClose = iota // closed, or still serving the probe correctly
	closeMust                  // closed right after the responses
)

// smugStep is one response the client must read and, when route is set, the request
// that reached that route's target for it.
type smugStep struct {
	route    string // "a", "b": the request reached that target; "": nobody
	method   string // "" means GET
	path     string
	host     string // the Host the target sees; "" means route + ".test"
	bodyLen  int
	statuses []int  // the response's status: one of these
	body     string // with exact, the response's body
	exact    bool   // else: a 200 from a route is that target's answer for path
}

func (s smugStep) meth() string {
	if s.method == "" {
		return "GET"
	}
	return s.method
}

func (s smugStep) targetHost() string {
	if s.host == "" {
		return s.route + ".test"
	}
	return s.host
}

func (s smugStep) matches(g smugGot) bool {
	if g.err != nil || !slices.Contains(s.statuses, g.status) {
		return false
	}
	switch {
	case s.exact:
		return g.body == s.body
	case s.route != "" && g.status == 200:
		tg, _, _, path, ok := smugAnswer(g.answer)
		want := g.answer
		if s.meth() == "HEAD" {
			want = ""
		}
		return ok && tg == s.route && path == s.path && g.body == want
	}
	return true
}

func (s smugStep) String() string {
	var b strings.Builder
	for i, st := range s.statuses {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(strconv.Itoa(st))
	}
	if s.exact {
		fmt.Fprintf(&b, " %q", s.body)
	}
	if s.route != "" {
		fmt.Fprintf(&b, " via %s: %s %s host=%q body=%d", s.route, s.meth(), s.path, s.targetHost(), s.bodyLen)
	}
	return b.String()
}

type smugOutcome struct {
	steps     []smugStep
	close     smugClose
	truncated bool // a target may have received a request cut short, on a connection that then closed
}

func (o smugOutcome) String() string {
	var parts []string
	for _, s := range o.steps {
		parts = append(parts, s.String())
	}
	s := "[" + strings.Join(parts, "; ") + "]"
	if o.close == closeMust {
		s += " then closed"
	}
	if o.truncated {
		s += " (truncated request at a target allowed)"
	}
	return s
}

// fwd: the request reaches route's target and the client gets its answer.
func fwd(route, method, path string, bodyLen int) smugStep {
	return smugStep{route: route, method: method, path: path, bodyLen: bodyLen, statuses: []int{200}}
}

// fwdHost is fwd with the Host the target must see.
func fwdHost(route, method, path, host string, bodyLen int) smugStep {
	s := fwd(route, method, path, bodyLen)
	s.host = host
	return s
}

// answered: the ingress answers one of statuses itself, nothing is forwarded.
func answered(statuses ...int) smugStep { return smugStep{statuses: statuses} }

// evil: the request reaches a's hostile script; the client gets status and body.
func evil(method string, status int, body string) smugStep {
	return smugStep{route: "a", method: method, path: "/evil", statuses: []int{status}, body: body, exact: true}
}

// evilRefused: the request reaches a's hostile script; the client gets a 502.
func evilRefused(method string) smugStep {
	return smugStep{route: "a", method: method, path: "/evil", statuses: []int{502}}
}

func smugOut(c smugClose, steps ...smugStep) smugOutcome {
	return smugOutcome{steps: steps, close: c}
}

// rejects: one answer with one of codes, the connection closed, nothing forwarded.
func rejects(codes ...int) smugOutcome { return smugOut(closeMust, answered(codes...)) }

// rejectsCut is rejects where the head (and part of the body) may have reached a
// target, on a connection that then closed.
func rejectsCut(codes ...int) smugOutcome {
	o := rejects(codes...)
	o.truncated = true
	return o
}

type smugCase struct {
	name     string
	raw      string
	outcomes []smugOutcome
	script   *smugScript // a's answer to /evil
}

func smugCases() []smugCase {
	var cs []smugCase
	add := func(name, raw string, outs ...smugOutcome) {
		cs = append(cs, smugCase{name: name, raw: raw, outcomes: outs})
	}
	P := smugPayload
	nP := len(P)
	cl := func(n int) string { return "Content-Length: " + strconv.Itoa(n) }

	// Connection naming a framing or routing field: refused (the lead's decision).
	add("Connection names Content-Length, body is a request",
		smugHead("POST /hop HTTP/1.1", "Host: a.test", "Connection: Content-Length", cl(len(smugAdmin)))+smugAdmin,
		rejects(400))
	add("Connection keep-alive, content-length",
		smugHead("POST /hop HTTP/1.1", "Host: a.test", "Connection: keep-alive, content-length", cl(nP))+P,
		rejects(400))
	add("Connection names Transfer-Encoding",
		smugHead("POST /hop HTTP/1.1", "Host: a.test", "Connection: Transfer-Encoding", "Transfer-Encoding: chunked")+smugChunked(P),
		rejects(400))
	add("Connection names Host",
		smugHead("GET /hop HTTP/1.1", "Host: a.test", "Connection: Host"),
		rejects(400))
	add("Connection names host, Host after it",
		smugHead("GET /hop HTTP/1.1", "Connection: close, host", "Host: a.test"),
		rejects(400))
	add("Connection names Content-Length, none sent",
		smugHead("GET /hop HTTP/1.1", "Host: a.test", "Connection: Content-Length"),
		rejects(400))
	big := strings.Repeat("z", 20<<10) // past the fast path's buffer: net/http reads it
	add("Connection names Content-Length, 20 KiB body",
		smugHead("POST /hop HTTP/1.1", "Host: a.test", "Connection: Content-Length", cl(len(big)))+big,
		rejects(400))
	// HTTP/1.0 is served by net/http: the same decisions hold there.
	add("HTTP/1.0 Connection names Content-Length",
		smugHead("POST /hop HTTP/1.0", "Host: a.test", "Connection: keep-alive, Content-Length", cl(len(smugAdmin)))+smugAdmin,
		rejects(400))
	add("HTTP/1.0 Connection names Host",
		smugHead("GET /hop HTTP/1.0", "Host: a.test", "Connection: keep-alive, Host"),
		rejects(400))
	add("HTTP/1.0 Connection names X-Forwarded-For",
		smugHead("GET /hop-fwd HTTP/1.0", "Host: a.test", "Connection: keep-alive, X-Forwarded-For", "X-Forwarded-For: 6.6.6.6"),
		smugOut(closeMay, fwd("a", "GET", "/hop-fwd", 0)))
	add("HTTP/1.0 Host a.test:evil.example",
		smugHead("GET /h HTTP/1.0", "Host: a.test:evil.example"),
		rejects(400))

	// Connection naming a forwarding field: forwarded once, with the ingress's own values.
	for _, f := range []struct{ name, forged string }{
		{"X-Forwarded-For", "6.6.6.6"},
		{"Forwarded", "for=6.6.6.6;host=evil.example;proto=https"},
		{"X-Forwarded-Host", "evil.example"},
		{"X-Forwarded-Proto", "gopher"},
		{"X-Real-Ip", "6.6.6.6"},
	} {
		add("Connection names "+f.name,
			smugHead("GET /hop-fwd HTTP/1.1", "Host: a.test", "Connection: "+strings.ToLower(f.name), f.name+": "+f.forged),
			smugOut(closeMay, fwd("a", "GET", "/hop-fwd", 0)))
	}
	add("Connection names every forwarding field",
		smugHead("GET /hop-fwd HTTP/1.1", "Host: a.test",
			"X-Forwarded-For: 6.6.6.6", "Forwarded: for=6.6.6.6", "X-Forwarded-Host: evil.example",
			"X-Forwarded-Proto: gopher", "X-Real-Ip: 6.6.6.6",
			"Connection: keep-alive, X-Forwarded-For, Forwarded, X-Forwarded-Host, X-Forwarded-Proto, X-Real-Ip"),
		smugOut(closeMay, fwd("a", "GET", "/hop-fwd", 0)))

	// Transfer-Encoding, alone and with Content-Length (CL.TE, TE.CL), plain and obfuscated.
	const (
		teValid   = iota // must be forwarded
		teMay            // refused, or forwarded as chunked
		teInvalid        // must be refused
	)
	for _, v := range []struct {
		name  string
		lines []string
		kind  int
	}{
		{"chunked", []string{"Transfer-Encoding: chunked"}, teValid},
		{"chunked twice", []string{"Transfer-Encoding: chunked", "Transfer-Encoding: chunked"}, teInvalid},
		{"chunked then x", []string{"Transfer-Encoding: chunked", "Transfer-Encoding: x"}, teInvalid},
		{"x then chunked", []string{"Transfer-Encoding: x", "Transfer-Encoding: chunked"}, teInvalid},
		{"space chunked", []string{"Transfer-Encoding:  chunked"}, teMay},
		{"tab chunked", []string{"Transfer-Encoding:\tchunked"}, teMay},
		{"CHUNKED", []string{"Transfer-Encoding: CHUNKED"}, teMay},
		{"chunked, identity", []string{"Transfer-Encoding: chunked, identity"}, teInvalid},
		{"xchunked", []string{"Transfer-Encoding: xchunked"}, teInvalid},
		{"obs-fold", []string{"Transfer-Encoding:", " chunked"}, teMay},
		{"space before colon", []string{"Transfer-Encoding : chunked"}, teInvalid},
		{"vertical tab", []string{"Transfer-Encoding: \vchunked"}, teInvalid},
	} {
		te := func(path string, extra ...string) string {
			lines := append([]string{"POST " + path + " HTTP/1.1", "Host: a.test"}, extra...)
			return smugHead(append(lines, v.lines...)...)
		}
		// TE alone: the chunk holds a request.
		teOnly := []smugOutcome{smugOut(closeMay, fwd("a", "POST", "/te", nP))}
		switch v.kind {
		case teMay:
			teOnly = append(teOnly, rejects(400, 501))
		case teInvalid:
			teOnly = []smugOutcome{rejects(400, 501)}
		}
		add("TE "+v.name, te("/te")+smugChunked(P), teOnly...)
		// CL.TE: Content-Length covers the last chunk and a request behind it.
		body := "0\r\n\r\n" + P
		clte := []smugOutcome{rejects(400, 501)}
		if v.kind != teInvalid {
			clte = append(clte, smugOut(closeMust, fwd("a", "POST", "/clte", 0)))
		}
		add("CL.TE "+v.name, te("/clte", cl(len(body)))+body, clte...)
		// TE.CL: Content-Length ends inside the chunk size line; a request follows the body.
		tecl := []smugOutcome{rejects(400, 501)}
		if v.kind != teInvalid {
			tecl = append(tecl, smugOut(closeMust, fwd("a", "POST", "/tecl", nP)))
		}
		add("TE.CL "+v.name, te("/tecl", "Content-Length: 4")+smugChunked(P)+smugHead("GET /pipelined HTTP/1.1", "Host: a.test"), tecl...)
	}

	// Content-Length values.
	clReq := func(vals ...string) string {
		lines := []string{"POST /cl HTTP/1.1", "Host: a.test"}
		for _, v := range vals {
			lines = append(lines, "Content-Length: "+v)
		}
		return smugHead(lines...)
	}
	fwd5 := smugOut(closeMay, fwd("a", "POST", "/cl", 5))
	add("CL repeated, same value", clReq("5", "5")+"hello", rejects(400), fwd5)
	add("CL list 5, 5", clReq("5, 5")+"hello", rejects(400), fwd5)
	add("CL repeated, different values", clReq("5", "6")+"hello"+P, rejects(400))
	add("CL list 5, 6", clReq("5, 6")+"hello"+P, rejects(400))
	add("CL +5", clReq("+5")+"hello"+P, rejects(400))
	add("CL 05", clReq("05")+"hello", rejects(400), fwd5)
	add("CL 0x5", clReq("0x5")+"hello"+P, rejects(400))
	add("CL -5", clReq("-5")+"hello"+P, rejects(400))
	add("CL 5x", clReq("5x")+"hello"+P, rejects(400))
	add("CL empty", clReq("")+"hello"+P, rejects(400))
	add("CL huge", clReq("99999999999999999999")+"hello"+P, rejects(400, 413))

	// Line ends and control bytes in the head: a prompt 400.
	for _, c := range []struct{ name, raw string }{
		{"bare LF everywhere", "GET /lf HTTP/1.1\nHost: a.test\n\n"},
		{"bare LF after the request line", "GET /lf HTTP/1.1\nHost: a.test\r\n\r\n"},
		{"bare LF inside the fields", "GET /lf HTTP/1.1\r\nHost: a.test\nX-A: 1\r\n\r\n"},
		{"bare LF ends the head", "GET /lf HTTP/1.1\r\nHost: a.test\r\n\n"},
		{"bare CR in a value", "GET /cr HTTP/1.1\r\nHost: a.test\r\nX-A: 1\r2\r\n\r\n"},
		{"bare CR ends the request line", "GET /cr HTTP/1.1\rHost: a.test\r\n\r\n"},
		{"NUL in a value", "GET /ctl HTTP/1.1\r\nHost: a.test\r\nX-A: a\x00b\r\n\r\n"},
		{"NUL in a name", "GET /ctl HTTP/1.1\r\nHost: a.test\r\nX-\x00A: 1\r\n\r\n"},
		{"SOH in a value", "GET /ctl HTTP/1.1\r\nHost: a.test\r\nX-A: a\x01b\r\n\r\n"},
		{"DEL in a value", "GET /ctl HTTP/1.1\r\nHost: a.test\r\nX-A: a\x7fb\r\n\r\n"},
		{"ESC in a name", "GET /ctl HTTP/1.1\r\nHost: a.test\r\nX\x1bA: 1\r\n\r\n"},
		{"NUL in the target", "GET /a\x00b HTTP/1.1\r\nHost: a.test\r\n\r\n"},
		{"SOH in the method", "G\x01T /ctl HTTP/1.1\r\nHost: a.test\r\n\r\n"},
		{"space before a colon", "GET /ctl HTTP/1.1\r\nHost: a.test\r\nX-A : 1\r\n\r\n"},
		{"non-token name", "GET /ctl HTTP/1.1\r\nHost: a.test\r\nX(A): 1\r\n\r\n"},
	} {
		add(c.name, c.raw, rejects(400))
	}
	add("obs-fold in a field", "GET /fold HTTP/1.1\r\nHost: a.test\r\nX-A: 1\r\n 2\r\n\r\n",
		rejects(400), smugOut(closeMay, fwd("a", "GET", "/fold", 0)))
	add("whitespace before the first field", "GET /ws HTTP/1.1\r\n X-A: 1\r\nHost: a.test\r\n\r\n",
		rejects(400), smugOut(closeMay, fwd("a", "GET", "/ws", 0)))

	// Malformed requests shorter than the HTTP/2 preface (24 bytes): a prompt 400.
	for _, raw := range []string{"GET / HTTP/1.1\n\n", "X\r\n\r\n", "GET /\r\n\r\n", "GET / HTTP/1.1\r\n\r\n", "\x00\x01\r\n\r\n"} {
		add(fmt.Sprintf("short %q", raw), raw, rejects(400))
	}
	add(`short "GET / HTTP/9.9"`, "GET / HTTP/9.9\r\n\r\n", rejects(400, 505))

	// The request target against Host.
	absolute := func(target, host string) string { return smugHead("GET "+target+" HTTP/1.1", "Host: "+host) }
	add("absolute-form b, Host a", absolute("http://b.test/abs", "a.test"),
		rejects(400), smugOut(closeMay, fwd("b", "GET", "/abs", 0)))
	add("absolute-form a, Host b", absolute("http://a.test/abs", "b.test"),
		rejects(400), smugOut(closeMay, fwd("a", "GET", "/abs", 0)))
	add("absolute-form https b, Host a", absolute("https://b.test/abs", "a.test"),
		rejects(400), smugOut(closeMay, fwd("b", "GET", "/abs", 0)))
	add("absolute-form b with port, Host a", absolute("http://b.test:80/abs", "a.test"),
		rejects(400), smugOut(closeMay, fwdHost("b", "GET", "/abs", "b.test:80", 0)),
		smugOut(closeMay, fwdHost("b", "GET", "/abs", "b.test", 0)))
	add("absolute-form with userinfo", absolute("http://user@b.test/abs", "a.test"),
		rejects(400), smugOut(closeMay, fwd("b", "GET", "/abs", 0)))
	add("absolute-form unknown host, Host a", absolute("http://c.unknown/abs", "a.test"),
		rejects(400), smugOut(closeMay, answered(404, 421)))
	add("absolute-form empty authority, Host a", absolute("http:///abs", "a.test"),
		rejects(400), smugOut(closeMay, answered(404, 421)))
	add("CONNECT b, Host a", smugHead("CONNECT b.test:443 HTTP/1.1", "Host: a.test"),
		rejects(400), smugOut(closeMay, answered(404, 405, 421)))

	// Host.
	host := func(lines ...string) string { return smugHead(append([]string{"GET /h HTTP/1.1"}, lines...)...) }
	add("no Host", host(), rejects(400))
	add("Host twice, same", host("Host: a.test", "Host: a.test"), rejects(400))
	add("Host twice, different", host("Host: a.test", "Host: b.test"), rejects(400))
	add("Host user@a.test", host("Host: user@a.test"), rejects(400))
	add("Host a.test:evil.example", host("Host: a.test:evil.example"), rejects(400))
	add("Host a.test:80:80", host("Host: a.test:80:80"), rejects(400), smugOut(closeMay, answered(404, 421)))
	add("Host a.test:80", host("Host: a.test:80"), smugOut(closeMay, fwdHost("a", "GET", "/h", "a.test:80", 0)))
	add("Host empty", host("Host:"), rejects(400), smugOut(closeMay, answered(404, 421)))
	add("Host list", host("Host: a.test, b.test"), rejects(400), smugOut(closeMay, answered(404, 421)))
	add("Host with a space", host("Host: a.test b.test"), rejects(400), smugOut(closeMay, answered(404, 421)))
	add("Host with a path", host("Host: a.test/evil"), rejects(400), smugOut(closeMay, answered(404, 421)))

	// HTTP/1.0, Expect, pipelining.
	// HTTP/1.0 goes to net/http, which ignores (and hides) Transfer-Encoding there: each
	// HTTP/1.0 request ends its connection (RFC 9112 §6.1), keep-alive or not.
	add("HTTP/1.0 keep-alive, pipelined to both routes",
		smugHead("GET /ten-a HTTP/1.0", "Host: a.test", "Connection: keep-alive")+
			smugHead("GET /ten-b HTTP/1.0", "Host: b.test", "Connection: keep-alive"),
		smugOut(closeMust, fwd("a", "GET", "/ten-a", 0)))
	add("HTTP/1.0 keep-alive POST, pipelined",
		smugHead("POST /ten-a HTTP/1.0", "Host: a.test", "Connection: keep-alive", "Content-Length: 5")+"hello"+
			smugHead("GET /ten-b HTTP/1.0", "Host: b.test", "Connection: keep-alive"),
		smugOut(closeMust, fwd("a", "POST", "/ten-a", 5)))
	add("HTTP/1.0 with Transfer-Encoding",
		smugHead("POST /ten-a HTTP/1.0", "Host: a.test", "Connection: keep-alive", "Transfer-Encoding: chunked")+
			"5\r\nhello\r\n0\r\n\r\n"+smugHead("GET /ten-b HTTP/1.0", "Host: b.test", "Connection: keep-alive"),
		rejects(400))
	add("HTTP/1.0 without keep-alive closes",
		smugHead("GET /ten HTTP/1.0", "Host: a.test")+smugHead("GET /ten-b HTTP/1.0", "Host: b.test", "Connection: keep-alive"),
		smugOut(closeMust, fwd("a", "GET", "/ten", 0)))
	tenBody := "0\r\n\r\n" + P
	add("HTTP/1.0 with CL and TE",
		smugHead("POST /ten-te HTTP/1.0", "Host: a.test", "Connection: keep-alive", cl(len(tenBody)), "Transfer-Encoding: chunked")+tenBody,
		rejects(400, 501), smugOut(closeMust, fwd("a", "POST", "/ten-te", 0)),
		smugOut(closeMust, fwd("a", "POST", "/ten-te", len(tenBody))))
	add("Expect 100-continue, pipelined",
		smugHead("POST /exp HTTP/1.1", "Host: a.test", "Expect: 100-continue", "Content-Length: 5")+"hello"+
			smugHead("GET /exp-next HTTP/1.1", "Host: b.test"),
		smugOut(closeMay, fwd("a", "POST", "/exp", 5), fwd("b", "GET", "/exp-next", 0)))
	add("Expect 100-continue, body is a request",
		smugHead("POST /exp HTTP/1.1", "Host: a.test", "Expect: 100-continue", cl(nP))+P,
		smugOut(closeMay, fwd("a", "POST", "/exp", nP)))
	add("pipelined a, b, a",
		smugHead("GET /p1 HTTP/1.1", "Host: a.test")+
			smugHead("POST /p2 HTTP/1.1", "Host: b.test", "Content-Length: 5")+"hello"+
			smugHead("GET /p3 HTTP/1.1", "Host: a.test"),
		smugOut(closeMay, fwd("a", "GET", "/p1", 0), fwd("b", "POST", "/p2", 5), fwd("a", "GET", "/p3", 0)))
	add("pipelined a, unknown, b",
		smugHead("GET /p1 HTTP/1.1", "Host: a.test")+smugHead("GET /p2 HTTP/1.1", "Host: c.unknown")+
			smugHead("GET /p3 HTTP/1.1", "Host: b.test"),
		smugOut(closeMay, fwd("a", "GET", "/p1", 0), answered(404, 421), fwd("b", "GET", "/p3", 0)))
	add("pipelined after Connection: close",
		smugHead("GET /p1 HTTP/1.1", "Host: a.test", "Connection: close")+smugHead("GET /p2 HTTP/1.1", "Host: b.test"),
		smugOut(closeMust, fwd("a", "GET", "/p1", 0)))

	// Upgrades: no tunnel unless the target switched protocols; what follows the request
	// on the connection is routed as a request of its own (or the connection closes).
	add("WebSocket upgrade answered 200, then a request for b",
		smugHead("GET /ws HTTP/1.1", "Host: a.test", "Connection: Upgrade", "Upgrade: websocket",
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13")+
			smugHead("GET /after HTTP/1.1", "Host: b.test"),
		smugOut(closeMay, fwd("a", "GET", "/ws", 0), fwd("b", "GET", "/after", 0)),
		smugOut(closeMust, fwd("a", "GET", "/ws", 0)), rejects(400))
	add("h2c upgrade, then a request for b",
		smugHead("GET /up HTTP/1.1", "Host: a.test", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c",
			"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA")+
			smugHead("GET /after HTTP/1.1", "Host: b.test"),
		smugOut(closeMay, fwd("a", "GET", "/up", 0), fwd("b", "GET", "/after", 0)),
		smugOut(closeMust, fwd("a", "GET", "/up", 0)), rejects(400))

	// Chunked bodies: refused (what reached a target closed), or forwarded whole.
	chunk := func(body string) string {
		return smugHead("POST /chunk HTTP/1.1", "Host: a.test", "Transfer-Encoding: chunked") + body
	}
	chunk5 := smugOut(closeMay, fwd("a", "POST", "/chunk", 5))
	add("chunk size 0x5", chunk("0x5\r\nhello\r\n0\r\n\r\n"), rejectsCut(400))
	add("chunk size -5", chunk("-5\r\nhello\r\n0\r\n\r\n"), rejectsCut(400))
	add("chunk size bare LF", chunk("5\nhello\r\n0\r\n\r\n"), rejectsCut(400), chunk5)
	add("chunk data bare LF", chunk("5\r\nhello\n0\r\n\r\n"), rejectsCut(400), chunk5)
	add("chunk size 17 hex digits", chunk("10000000000000000\r\nhello\r\n0\r\n\r\n"), rejectsCut(400, 413))
	add("chunk size 17 digits, value 5", chunk("00000000000000005\r\nhello\r\n0\r\n\r\n"), rejectsCut(400), chunk5)
	add("chunk extension NUL", chunk("5;a=\x00\r\nhello\r\n0\r\n\r\n"), rejectsCut(400), chunk5)
	add("chunk extension CR", chunk("5;a\rb\r\nhello\r\n0\r\n\r\n"), rejectsCut(400), chunk5)
	add("chunk extension LF", chunk("5;a\nb\r\nhello\r\n0\r\n\r\n"), rejectsCut(400), chunk5)
	add("chunk data longer than its size", chunk("5\r\nhelloXX\r\n0\r\n\r\n"), rejectsCut(400))
	add("chunk data shorter than its size", chunk("5\r\nhel\r\n0\r\n\r\n"), rejectsCut(400))
	add("no last chunk, a request instead",
		chunk("5\r\nhello\r\n")+smugHead("GET /pipelined HTTP/1.1", "Host: a.test"), rejectsCut(400))
	add("trailer Content-Length", chunk("5\r\nhello\r\n0\r\nContent-Length: 50\r\n\r\n"), rejectsCut(400), chunk5)
	add("trailer Transfer-Encoding", chunk("5\r\nhello\r\n0\r\nTransfer-Encoding: chunked\r\n\r\n"), rejectsCut(400), chunk5)
	add("trailer Host", chunk("5\r\nhello\r\n0\r\nHost: b.test\r\n\r\n"), rejectsCut(400), chunk5)
	// net/http's trailer reader waits for a CRLF CRLF that never comes: the body
	// timeout ends it (408), and the target connection holding the cut request closes.
	add("trailer bare LF", chunk("5\r\nhello\r\n0\r\nX-T: 1\n\r\n"), rejectsCut(400, 408), chunk5)

	// A hostile target (a): whatever it sends, the client gets one well-framed answer and
	// later requests get their own.
	hostile := func(name, method string, s smugScript, outs ...smugOutcome) {
		cs = append(cs, smugCase{name: "target " + name, raw: smugHead(method+" /evil HTTP/1.1", "Host: a.test"),
			outcomes: outs, script: &s})
	}
	const stray = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray"
	hostile("Connection names Content-Length", "GET",
		smugScript{first: "HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 5\r\n\r\nhello"},
		smugOut(closeMay, evil("GET", 200, "hello")), smugOut(closeMay, evilRefused("GET")))
	hostile("Connection names Transfer-Encoding", "GET",
		smugScript{first: "HTTP/1.1 200 OK\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		smugOut(closeMay, evil("GET", 200, "hello")), smugOut(closeMay, evilRefused("GET")))
	hostile("204 and a second response", "GET",
		smugScript{first: "HTTP/1.1 204 No Content\r\n\r\n" + stray},
		smugOut(closeMay, evil("GET", 204, "")), smugOut(closeMay, evilRefused("GET")))
	hostile("204, a second response later", "GET",
		smugScript{first: "HTTP/1.1 204 No Content\r\n\r\n", later: stray},
		smugOut(closeMay, evil("GET", 204, "")), smugOut(closeMay, evilRefused("GET")))
	hostile("body after HEAD", "HEAD",
		smugScript{first: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"},
		smugOut(closeMay, evil("HEAD", 200, "")), smugOut(closeMay, evilRefused("HEAD")))
	hostile("body after HEAD, later", "HEAD",
		smugScript{first: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", later: "hello"},
		smugOut(closeMay, evil("HEAD", 200, "")), smugOut(closeMay, evilRefused("HEAD")))
	hostile("304 with a body", "GET",
		smugScript{first: "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\nhello"},
		smugOut(closeMay, evil("GET", 304, "")), smugOut(closeMay, evilRefused("GET")))
	hostile("Content-Length and chunked", "GET",
		smugScript{first: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		smugOut(closeMay, evil("GET", 200, "hello")), smugOut(closeMay, evilRefused("GET")))
	hostile("two Content-Lengths", "GET",
		smugScript{first: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello\r\n"},
		smugOut(closeMay, evilRefused("GET")))
	hostile("Content-Length +5", "GET",
		smugScript{first: "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello"},
		smugOut(closeMay, evilRefused("GET")))
	hostile("chunked twice", "GET",
		smugScript{first: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		smugOut(closeMay, evil("GET", 200, "hello")), smugOut(closeMay, evilRefused("GET")))
	hostile("more bytes than Content-Length", "GET",
		smugScript{first: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" + stray},
		smugOut(closeMay, evil("GET", 200, "hello")), smugOut(closeMay, evilRefused("GET")))
	return cs
}

// TestSmuggling runs the corpus on the plain and the TLS listener.
func TestSmuggling(t *testing.T) {
	cases := smugCases()
	seen := map[string]bool{}
	for _, tc := range cases {
		if seen[tc.name] {
			t.Fatalf("two cases named %q", tc.name)
		}
		seen[tc.name] = true
	}
	for _, mode := range []string{"plain", "tls"} {
		t.Run(mode, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					runSmuggle(t, mode == "tls", tc)
				})
			}
		})
	}
}

// smugObs is what the client observed.
type smugObs struct {
	got     []smugGot
	stuck   error  // reading stopped on something else than the connection closing
	closed  bool   // the connection closed after got
	open    bool   // the probe on the same connection got its own answer
	probe   string // what went wrong with the probe
	answers []string
}

func (o *smugObs) String() string {
	var parts []string
	for _, g := range o.got {
		parts = append(parts, g.String())
	}
	s := "[" + strings.Join(parts, "; ") + "]"
	switch {
	case o.stuck != nil:
		s += " then " + o.stuck.Error()
	case o.closed:
		s += " then closed"
	case o.open:
		s += " then still open (probe answered)"
	case o.probe != "":
		s += " then probe: " + o.probe
	}
	return s
}

func runSmuggle(t *testing.T, useTLS bool, tc smugCase) {
	// Every attack is written at once: a body that stalls is one whose framing the
	// ingress reads as unfinished (a trailer that never ends), cut by ClientBodyTimeout.
	e := newEnv(t, func(c *Config) { c.ClientBodyTimeout = 500 * time.Millisecond })
	ta := newSmugTarget(t, "a", tc.script)
	tb := newSmugTarget(t, "b", nil)
	rt := &routetable.RouteTLS{CertificateID: "c"}
	e.apply([]routeSpec{{host: "a.test", tls: rt, backends: []string{ta.addr}}, {host: "b.test", tls: rt, backends: []string{tb.addr}}},
		certSpec{"c", []string{"a.test", "b.test"}})
	proto := "http"
	if useTLS {
		proto = "https"
	}

	var obs smugObs
	c := smugDial(t, e, useTLS)
	if err := c.send(tc.raw); err != nil {
		obs.stuck = fmt.Errorf("writing the request: %w", err)
	}
	cands := tc.outcomes
	for i := 0; obs.stuck == nil && len(cands) > 0; i++ {
		method := ""
		for _, o := range cands {
			if len(o.steps) > i {
				method = o.steps[i].meth()
				break
			}
		}
		if method == "" {
			break
		}
		g := c.read(method)
		if g.err != nil {
			if smugIsClosed(g.err) {
				obs.closed = true
			} else {
				obs.stuck = fmt.Errorf("response %d: %w", i+1, g.err)
			}
			break
		}
		obs.got = append(obs.got, g)
		obs.answers = append(obs.answers, g.answer)
		var keep []smugOutcome
		for _, o := range cands {
			if len(o.steps) > i && o.steps[i].matches(g) {
				keep = append(keep, o)
			}
		}
		cands = keep
	}
	if tc.script != nil && tc.script.later != "" {
		close(ta.release)
		if ta.sawEvil() {
			select {
			case <-ta.laterDone:
			case <-time.After(smugWait):
			}
		}
	}
	// The probe: is the connection closed, or does it still answer correctly?
	if obs.stuck == nil && !obs.closed && len(cands) > 0 {
		if err := c.send(smugHead("GET /follow-same HTTP/1.1", "Host: a.test")); err != nil {
			obs.closed = true
		} else {
			g := c.read("GET")
			obs.answers = append(obs.answers, g.answer)
			switch {
			case g.err != nil && smugIsClosed(g.err):
				obs.closed = true
			case g.err != nil:
				obs.probe = g.err.Error()
			case fwd("a", "GET", "/follow-same", 0).matches(g):
				obs.open = true
			default:
				obs.probe = "answered " + g.String() + ", not a's answer for /follow-same"
			}
		}
	}
	c.c.Close()

	// A later client on a new connection gets its own answers from both routes.
	fc := smugDial(t, e, useTLS)
	for _, r := range []string{"a", "b"} {
		path := "/follow-" + r
		if err := fc.send(smugHead("GET "+path+" HTTP/1.1", "Host: "+r+".test")); err != nil {
			t.Errorf("later client: writing its request to %s.test: %v", r, err)
			break
		}
		g := fc.read("GET")
		obs.answers = append(obs.answers, g.answer)
		if !fwd(r, "GET", path, 0).matches(g) {
			t.Errorf("later client, GET %s to %s.test: got %s, want %s's own answer", path, r, g, r)
			break
		}
	}
	fc.c.Close()

	ta.settle()
	tb.settle()
	views := map[string][]smugConnView{"a": ta.snapshot(), "b": tb.snapshot()}

	// Invariants, whatever the outcome.
	truncated := false
	for _, name := range []string{"a", "b"} {
		for _, cv := range views[name] {
			for _, r := range cv.reqs {
				for _, p := range smugRequestProblems(r, proto) {
					t.Errorf("target %s conn %d request %d (%s): %s", name, cv.id, r.seq, r, p)
				}
			}
			switch {
			case errors.Is(cv.endErr, errSmugMalformed):
				t.Errorf("target %s conn %d received a malformed request: %v", name, cv.id, cv.endErr)
			case cv.partial && !cv.ended:
				t.Errorf("target %s conn %d holds the beginning of a request and stays open", name, cv.id)
			case errors.Is(cv.endErr, errSmugTruncated):
				truncated = true
			}
		}
	}
	for _, a := range obs.answers {
		if a == "" {
			continue
		}
		tg, conn, req, path, ok := smugAnswer(a)
		if !ok || !smugRecorded(views[tg], conn, req, path) {
			t.Errorf("a client got the answer %q, which names no request its target recorded that way", a)
		}
	}

	// The outcome.
	if obs.stuck != nil || obs.probe != "" || len(cands) == 0 {
		t.Errorf("client saw %s\n\ttargets: %s\n\tallowed: %s", &obs, smugDescribe(views), smugAllowed(tc.outcomes))
		return
	}
	var why []string
	for _, o := range cands {
		if len(o.steps) != len(obs.got) {
			continue
		}
		w := o.mismatch(&obs, views, truncated)
		if w == "" {
			t.Logf("client saw %s\n\ttargets: %s", &obs, smugDescribe(views))
			return
		}
		if !slices.Contains(why, w) {
			why = append(why, w)
		}
	}
	if len(why) == 0 {
		why = append(why, "fewer responses than expected")
	}
	t.Errorf("%s\n\tclient saw %s\n\ttargets: %s\n\tallowed: %s", strings.Join(why, "; or "), &obs, smugDescribe(views), smugAllowed(tc.outcomes))
}

func smugRecorded(conns []smugConnView, conn, req int, path string) bool {
	for _, cv := range conns {
		if cv.id == conn {
			return req >= 1 && req <= len(cv.reqs) && cv.reqs[req-1].path == path
		}
	}
	return false
}

// mismatch says why o does not describe what happened ("" when it does).
func (o smugOutcome) mismatch(obs *smugObs, views map[string][]smugConnView, truncated bool) string {
	if o.close == closeMust && !obs.closed {
		return "the connection was not closed after the responses (it served another request)"
	}
	if truncated && !o.truncated {
		return "a target received a truncated request"
	}
	for _, name := range []string{"a", "b"} {
		var want []string
		for _, s := range o.steps {
			if s.route == name {
				want = append(want, fmt.Sprintf("%s %s host=%q body=%d", s.meth(), s.path, s.targetHost(), s.bodyLen))
			}
		}
		var got []string
		for _, cv := range views[name] {
			for _, r := range cv.reqs {
				if !strings.HasPrefix(r.path, "/follow-") {
					got = append(got, fmt.Sprintf("%s %s host=%q body=%d", r.method, r.path, strings.Join(r.values("host"), "|"), len(r.body)))
				}
			}
		}
		if !slices.Equal(want, got) {
			return fmt.Sprintf("target %s received %q, want %q", name, got, want)
		}
	}
	return ""
}

// smugRequestProblems checks what every forwarded request must satisfy.
func smugRequestProblems(r *smugReq, proto string) []string {
	var ps []string
	host := r.values("host")[0] // the reader insists on exactly one
	fh := host
	if !smugToken(fh) {
		fh = strconv.Quote(fh)
	}
	for _, w := range [][2]string{
		{"X-Forwarded-For", "127.0.0.1"},
		{"X-Forwarded-Proto", proto},
		{"X-Forwarded-Host", host},
		{"Forwarded", "for=127.0.0.1;host=" + fh + ";proto=" + proto},
	} {
		if got := r.values(w[0]); len(got) != 1 || got[0] != w[1] {
			ps = append(ps, fmt.Sprintf("%s %q, want exactly %q", w[0], got, w[1]))
		}
	}
	if got := r.values("X-Real-Ip"); len(got) > 0 {
		ps = append(ps, fmt.Sprintf("X-Real-Ip %q reached the target", got))
	}
	for _, v := range r.values("Connection") {
		for tok := range strings.SplitSeq(v, ",") {
			tok = strings.ToLower(strings.TrimSpace(tok))
			switch tok {
			case "host", "content-length", "transfer-encoding", "x-forwarded-for", "forwarded",
				"x-forwarded-host", "x-forwarded-proto", "x-real-ip":
				ps = append(ps, fmt.Sprintf("Connection %q names %s", v, tok))
			}
		}
	}
	if cl := r.values("Content-Length"); len(cl) == 1 && cl[0] != strconv.Itoa(len(r.body)) {
		ps = append(ps, fmt.Sprintf("Content-Length %q is not the canonical %d", cl[0], len(r.body)))
	}
	if !strings.HasPrefix(r.path, "/ws") {
		for _, name := range []string{"Upgrade", "HTTP2-Settings"} {
			if got := r.values(name); len(got) > 0 {
				ps = append(ps, fmt.Sprintf("%s %q reached the target", name, got))
			}
		}
	}
	for _, f := range r.trailers {
		switch strings.ToLower(f[0]) {
		case "content-length", "transfer-encoding", "host", "trailer":
			ps = append(ps, fmt.Sprintf("trailer %s: %s reached the target", f[0], f[1]))
		}
	}
	return ps
}

func smugDescribe(views map[string][]smugConnView) string {
	var parts []string
	for _, name := range []string{"a", "b"} {
		var cs []string
		for _, cv := range views[name] {
			var rs []string
			for _, r := range cv.reqs {
				rs = append(rs, r.String())
			}
			s := fmt.Sprintf("conn%d[%s]", cv.id, strings.Join(rs, ", "))
			switch {
			case !cv.ended:
				s += " open"
			case cv.endErr != nil:
				s += " ended: " + cv.endErr.Error()
			}
			cs = append(cs, s)
		}
		if len(cs) == 0 {
			cs = append(cs, "nothing")
		}
		parts = append(parts, name+": "+strings.Join(cs, " "))
	}
	return strings.Join(parts, " | ")
}

func smugAllowed(outs []smugOutcome) string {
	var parts []string
	for _, o := range outs {
		parts = append(parts, o.String())
	}
	return strings.Join(parts, " or ")
}
