package proxy

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// What the targets of the differential test (h1diff_test.go) received, as bytes. The
// recording target parses with net/http, which tolerates and repairs, and reads a
// request the way the target it stands for would: that view cannot show where one
// forwarded request ends and the next begins. So every target connection's byte stream
// is also split into requests by a framing reader of its own (readWireReq), independent
// of both net/http and the fast path's parser and stricter than either: the request
// line, the field lines, then exactly the body the head declares (Content-Length or
// chunked; neither means none), and anything that does not frame as a request is kept
// as leftover. Per input, the sequence of (method, target, version, Host, declared
// framing, body) must agree between the sides, and on each side every request the
// target saw must be one the client sent (wireProblems): a body that frames as a
// request of its own (request smuggling) fails even when both sides do it.

// wireReq is one request as the framing reader split it off a target connection, or
// bytes that do not frame as one (bad).
type wireReq struct {
	id      string // x-diff-id, "" when absent
	in      string // the input running when it arrived; cleared when taken
	method  string
	target  string
	version string
	host    string // the Host field's value, or "<n Host fields>" unless exactly one
	framing string // "none", "length N" or "chunked"
	body    string // decoded
	bad     string // not a request: why, and the bytes
}

func (w wireReq) String() string {
	switch {
	case w.bad != "":
		return "leftover: " + w.bad
	case w.method == "":
		return "(none)"
	}
	return fmt.Sprintf("%s %s %s id=%q host=%q framing=%q body=%d:%s", w.method, w.target, w.version, w.id, w.host,
		w.framing, len(w.body), abbrev(w.body))
}

var wireCRLF = []byte("\r\n")

// readWireReq splits the request at the start of b: n is its length, 0 with bad == ""
// when b holds only part of it. bad says why b does not start with a request.
func readWireReq(b []byte) (r wireReq, n int, bad string) {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 && (i == 0 || b[i-1] != '\r') {
			return r, 0, "bare LF in the head"
		}
		return r, 0, ""
	}
	lines := strings.Split(string(b[:end]), "\r\n")
	for _, l := range lines {
		if strings.ContainsAny(l, "\r\n") {
			return r, 0, "bare CR or LF in the head"
		}
	}
	rl := strings.Split(lines[0], " ")
	if len(rl) != 3 || !wireToken(rl[0]) || rl[1] == "" || strings.ContainsFunc(rl[1], func(c rune) bool { return c <= ' ' || c >= 0x7f }) ||
		rl[2] != "HTTP/1.1" && rl[2] != "HTTP/1.0" {
		return r, 0, fmt.Sprintf("not a request line: %q", lines[0])
	}
	r.method, r.target, r.version = rl[0], rl[1], rl[2]
	var cls, tes, hosts []string
	for _, l := range lines[1:] {
		name, value, ok := strings.Cut(l, ":")
		if !ok || !wireToken(name) {
			return r, 0, fmt.Sprintf("not a field line: %q", l)
		}
		value = strings.Trim(value, " \t")
		if strings.ContainsFunc(value, func(c rune) bool { return c < ' ' && c != '\t' || c == 0x7f }) {
			return r, 0, fmt.Sprintf("control byte in a field value: %q", l)
		}
		switch strings.ToLower(name) {
		case "content-length":
			cls = append(cls, value)
		case "transfer-encoding":
			tes = append(tes, value)
		case "host":
			hosts = append(hosts, value)
		case "x-diff-id":
			r.id = value
		}
	}
	r.host = fmt.Sprintf("<%d Host fields>", len(hosts))
	if len(hosts) == 1 {
		r.host = hosts[0]
	}
	n = end + 4
	switch {
	case len(tes) > 0 && len(cls) > 0:
		return r, 0, fmt.Sprintf("both Transfer-Encoding %q and Content-Length %q", tes, cls)
	case len(tes) > 0:
		if len(tes) != 1 || !strings.EqualFold(tes[0], "chunked") {
			return r, 0, fmt.Sprintf("Transfer-Encoding %q", tes)
		}
		r.framing = "chunked"
		body, m, bad := readWireChunked(b[n:])
		if bad != "" || m == 0 {
			return r, 0, bad
		}
		r.body = string(body)
		return r, n + m, ""
	case len(cls) > 1:
		return r, 0, fmt.Sprintf("Content-Length %q", cls)
	case len(cls) == 1:
		cl := cls[0]
		if cl == "" || len(cl) > 18 || strings.ContainsFunc(cl, func(c rune) bool { return c < '0' || c > '9' }) {
			return r, 0, fmt.Sprintf("Content-Length %q", cl)
		}
		l, _ := strconv.Atoi(cl)
		r.framing = "length " + strconv.Itoa(l)
		if len(b) < n+l {
			return r, 0, ""
		}
		r.body = string(b[n : n+l])
		return r, n + l, ""
	}
	r.framing = "none"
	return r, n, ""
}

// readWireChunked decodes the chunked body at the start of b, trailer section
// included: m is its length, 0 with bad == "" when b holds only part of it.
func readWireChunked(b []byte) (body []byte, m int, bad string) {
	i := 0
	for {
		le := bytes.Index(b[i:], wireCRLF)
		if le < 0 {
			if len(b)-i > 1024 {
				return nil, 0, "chunk size line too long"
			}
			return nil, 0, ""
		}
		line := string(b[i : i+le])
		sz, ext, _ := strings.Cut(line, ";")
		if sz == "" || len(sz) > 15 || strings.Trim(sz, "0123456789abcdefABCDEF") != "" ||
			strings.ContainsFunc(ext, func(c rune) bool { return c < ' ' && c != '\t' || c == 0x7f }) {
			return nil, 0, fmt.Sprintf("chunk size line %q", line)
		}
		size, _ := strconv.ParseInt(sz, 16, 64)
		i += le + 2
		if size == 0 {
			for { // trailer section
				le := bytes.Index(b[i:], wireCRLF)
				if le < 0 {
					return nil, 0, ""
				}
				l := string(b[i : i+le])
				i += le + 2
				if l == "" {
					return body, i, ""
				}
				if name, _, ok := strings.Cut(l, ":"); !ok || !wireToken(name) {
					return nil, 0, fmt.Sprintf("trailer line %q", l)
				}
			}
		}
		if int64(len(b)-i) < size+2 {
			return nil, 0, ""
		}
		if !bytes.Equal(b[i+int(size):i+int(size)+2], wireCRLF) {
			return nil, 0, "chunk data not followed by CRLF"
		}
		body = append(body, b[i:i+int(size)]...)
		i += int(size) + 2
	}
}

// wireStream is the framing reader's state for one target connection.
type wireStream struct {
	buf []byte // bytes not yet split off as requests
	bad string // the stream lost its framing: buf and everything after it is leftover
}

// wireLog is one target's record of what arrived on its connections.
type wireLog struct {
	mu      sync.Mutex
	cur     string // the input being run: requests without an id, and leftovers, are its
	streams map[*wireStream]bool
	reqs    []wireReq
}

// begin says that the input id is being run from now on.
func (l *wireLog) begin(id string) {
	l.mu.Lock()
	l.cur = id
	l.mu.Unlock()
}

func (l *wireLog) arrived(st *wireStream, p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st.buf = append(st.buf, p...)
	for st.bad == "" && len(st.buf) > 0 {
		r, n, bad := readWireReq(st.buf)
		if bad != "" {
			st.bad = bad
		}
		if n == 0 {
			break
		}
		r.in = l.cur
		l.reqs = append(l.reqs, r)
		st.buf = st.buf[n:]
	}
}

// flush records what is left in st as leftover. l.mu is held.
func (l *wireLog) flush(st *wireStream, when string) {
	if len(st.buf) == 0 {
		return
	}
	why := st.bad
	if why == "" {
		why = "incomplete request"
	}
	l.reqs = append(l.reqs, wireReq{in: l.cur, bad: fmt.Sprintf("%s (%s): %d bytes %s", why, when, len(st.buf), abbrev(string(st.buf)))})
	st.buf, st.bad = nil, ""
}

// take returns and forgets what arrived for input id: requests whose x-diff-id starts
// with id+"-", and requests without one and leftovers that arrived while id ran. Bytes
// still waiting for the rest of a request get a moment, then count as leftover: the
// client has read every answer, so nothing of this input should still be on its way.
// wireGrace bounds the wait for bytes still in flight to the target. It is generous
// (a loaded 2-core machine under -race can hold a write back for longer than 100 ms,
// which made a difference of nothing): the wait ends as soon as nothing is pending, so
// only an input that really leaves bytes behind pays it.
const wireGrace = 2 * time.Second

// (The moment is a bounded grace for bytes in flight, not a wait for an event: a late
// byte that misses it shows up as a difference, never as a pass.)
func (l *wireLog) take(id string) []wireReq {
	for deadline := time.Now().Add(wireGrace); ; time.Sleep(5 * time.Millisecond) {
		l.mu.Lock()
		pending := false
		for st := range l.streams {
			pending = pending || len(st.buf) > 0
		}
		if !pending || time.Now().After(deadline) {
			break
		}
		l.mu.Unlock()
	}
	defer l.mu.Unlock()
	for st := range l.streams {
		l.flush(st, "connection open, input done")
	}
	prefix := id + "-"
	var out []wireReq
	l.reqs = slices.DeleteFunc(l.reqs, func(r wireReq) bool {
		if strings.HasPrefix(r.id, prefix) || r.id == "" && r.in == id {
			r.in = ""
			out = append(out, r)
			return true
		}
		return false
	})
	if n := len(l.reqs); n > 300 {
		l.reqs = slices.Delete(l.reqs, 0, n-100)
	}
	return out
}

// tap returns c for the target to serve, reading c eagerly on a goroutine of its own
// that records every byte as it arrives, before the target parses it: the record does
// not depend on how far the target's parser reads. The returned conn's Close waits for
// that goroutine.
func (l *wireLog) tap(c net.Conn) net.Conn {
	t := &wireTap{Conn: c, done: make(chan struct{})}
	t.cond = sync.NewCond(&t.mu)
	st := &wireStream{}
	l.mu.Lock()
	if l.streams == nil {
		l.streams = make(map[*wireStream]bool)
	}
	l.streams[st] = true
	l.mu.Unlock()
	go func() {
		defer close(t.done)
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				l.arrived(st, buf[:n])
				t.mu.Lock()
				t.q = append(t.q, buf[:n]...)
				t.cond.Signal()
				t.mu.Unlock()
			}
			if err != nil {
				l.mu.Lock()
				l.flush(st, "connection closed")
				delete(l.streams, st)
				l.mu.Unlock()
				t.mu.Lock()
				t.err = err
				t.cond.Signal()
				t.mu.Unlock()
				return
			}
		}
	}()
	return t
}

// wireTap is a target connection read through wireLog.tap.
type wireTap struct {
	net.Conn
	mu   sync.Mutex
	cond *sync.Cond
	q    []byte // read off the connection, not yet by the target
	err  error
	done chan struct{}
}

func (t *wireTap) Read(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.q) == 0 && t.err == nil {
		t.cond.Wait()
	}
	if len(t.q) > 0 {
		n := copy(p, t.q)
		t.q = t.q[n:]
		return n, nil
	}
	return 0, t.err
}

func (t *wireTap) Close() error {
	err := t.Conn.Close()
	<-t.done
	return err
}

// diffSent is a request as the client sent it.
type diffSent struct {
	id, method, target string
	host               string
	body               string
	bodyKnown          bool // the client's framing gives body one meaning (RFC 9112 6)
	teAndCL            bool // the head has both Transfer-Encoding and Content-Length
}

// clientSent splits hand-written client bytes into the requests they are (all must
// frame strictly).
func clientSent(raw string) []diffSent {
	var out []diffSent
	b := []byte(raw)
	for len(b) > 0 {
		r, n, _ := readWireReq(b)
		if n == 0 {
			break
		}
		out = append(out, diffSent{id: r.id, method: r.method, target: r.target, host: r.host, body: r.body, bodyKnown: true})
		b = b[n:]
	}
	return out
}

// wireProblems checks what one side's target received for an input against what the
// client sent: every request must frame strictly, carry exactly one Host field, and be
// one the client sent (by x-diff-id, or when the id was dropped by method and target),
// at most once, with the method, the target (up to percent-encoding) and, where the
// client's framing was unambiguous, the body the client sent. Nothing else may arrive.
func wireProblems(wire []wireReq, sent []diffSent) []string {
	var out []string
	used := make([]bool, len(sent))
	for _, w := range wire {
		if w.bad != "" {
			out = append(out, "bytes that frame no request: "+w.bad)
			continue
		}
		if strings.HasPrefix(w.host, "<") {
			out = append(out, "not exactly one Host field: "+w.String())
		}
		i := -1
		if w.id != "" {
			i = slices.IndexFunc(sent, func(s diffSent) bool { return s.id == w.id })
		} else {
			// Connection named x-diff-id: the first request not yet seen that is alike,
			// in everything if one is.
			for _, full := range []bool{true, false} {
				for j, s := range sent {
					if i < 0 && !used[j] && s.method == w.method && sameTarget(s.target, w.target) &&
						(!full || s.host == w.host && (!s.bodyKnown || s.body == w.body)) {
						i = j
					}
				}
			}
		}
		switch {
		case i < 0:
			out = append(out, "a request the client did not send: "+w.String())
			continue
		case used[i]:
			out = append(out, "a request the client sent once arrived again: "+w.String())
		case sent[i].method != w.method || !sameTarget(sent[i].target, w.target):
			out = append(out, fmt.Sprintf("sent as %s %s, arrived as %s", sent[i].method, sent[i].target, w))
		case sent[i].bodyKnown && sent[i].body != w.body:
			out = append(out, fmt.Sprintf("sent with body %d:%s, arrived as %s", len(sent[i].body), abbrev(sent[i].body), w))
		}
		used[i] = true
	}
	return out
}

// sameTarget: equal request targets, or equal decoded paths and queries (net/http
// re-encodes the path, see diffAccepted).
func sameTarget(a, b string) bool {
	if a == b {
		return true
	}
	ua, errA := url.ParseRequestURI(a)
	ub, errB := url.ParseRequestURI(b)
	return errA == nil && errB == nil && ua.Path == ub.Path && ua.RawQuery == ub.RawQuery
}

// wireToken: s is an RFC 9110 token (written out here, not shared with the parser).
func wireToken(s string) bool {
	return s != "" && strings.Trim(s, "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") == ""
}

// TestWireReader: the framing reader splits a byte stream where the head says, and
// nowhere else.
func TestWireReader(t *testing.T) {
	const smuggle = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"
	for _, tc := range []struct {
		name, in string
		want     []string // wireReq.String() of each request; "bad: " + why for the stop
	}{
		{"no body", "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
			[]string{`GET / HTTP/1.1 id="" host="a" framing="none" body=0:""`}},
		{"a body that is a request, framed", "POST /p HTTP/1.1\r\nhost: a\r\nx-diff-id: 1-0\r\nContent-Length: 35\r\n\r\n" + smuggle,
			[]string{`POST /p HTTP/1.1 id="1-0" host="a" framing="length 35" body=35:"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"`}},
		{"the same body unframed", "POST /p HTTP/1.1\r\nHost: a\r\n\r\n" + smuggle,
			[]string{`POST /p HTTP/1.1 id="" host="a" framing="none" body=0:""`, `GET /smuggled HTTP/1.1 id="" host="a" framing="none" body=0:""`}},
		{"chunked, extension, trailer", "PUT / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n3;x=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nT: 1\r\n\r\n",
			[]string{`PUT / HTTP/1.1 id="" host="a" framing="chunked" body=13:"abc0123456789"`}},
		{"leading zeros", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 003\r\n\r\nabc",
			[]string{`POST / HTTP/1.1 id="" host="a" framing="length 3" body=3:"abc"`}},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", []string{`GET / HTTP/1.1 id="" host="<0 Host fields>" framing="none" body=0:""`}},
		{"body bytes then a request", "POST / HTTP/1.1\r\nHost: a\r\n\r\nabcGET / HTTP/1.1\r\nHost: a\r\n\r\n",
			// A method is any token: that the client sent no "abcGET" is wireProblems' to see.
			[]string{`POST / HTTP/1.1 id="" host="a" framing="none" body=0:""`, `abcGET / HTTP/1.1 id="" host="a" framing="none" body=0:""`}},
		{"body bytes then a request line", "POST / HTTP/1.1\r\nHost: a\r\n\r\n{}GET / HTTP/1.1\r\nHost: a\r\n\r\n",
			[]string{`POST / HTTP/1.1 id="" host="a" framing="none" body=0:""`, `bad: not a request line: "{}GET / HTTP/1.1"`}},
		{"two Content-Length fields", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na",
			[]string{`bad: Content-Length ["1" "1"]`}},
		{"Content-Length and Transfer-Encoding", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			[]string{`bad: both Transfer-Encoding ["chunked"] and Content-Length ["5"]`}},
		{"Content-Length with a sign", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\na", []string{`bad: Content-Length "+1"`}},
		{"chunked, not last", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
			[]string{`bad: Transfer-Encoding ["chunked, identity"]`}},
		{"bare LF", "GET / HTTP/1.1\nHost: a\r\n\r\n", []string{`bad: bare CR or LF in the head`}},
		{"chunk data too long", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n",
			[]string{`bad: chunk data not followed by CRLF`}},
		{"incomplete body", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nab", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			b := []byte(tc.in)
			for len(b) > 0 {
				r, n, bad := readWireReq(b)
				if bad != "" {
					got = append(got, "bad: "+bad)
					break
				}
				if n == 0 {
					break
				}
				got = append(got, r.String())
				b = b[n:]
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}
