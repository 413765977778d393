package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"
)

// The own HTTP/2 server's byte-level forwarding (h2bytes.go) against net/http's HTTP/2
// server (the oracle: Config.stdH2), compared by what the target's
// connection received, byte for byte (FuzzH2BytesWire). The JSON echo of
// FuzzH2OwnMatchesStd shows what a lenient parser made of a request; this shows the
// bytes themselves, where a request line, a second Host or bytes after the head would
// be.

// wireTarget is a raw TCP target that records the exact bytes each of its connections
// received, split into request heads at each blank line (the byte-level path forwards
// only bodiless requests: whatever follows a head is the start of the next one, or
// stray bytes), and answers each head with answer's bytes.
type wireTarget struct {
	addr string
	// answer writes the response to head on c; false closes the connection.
	answer func(c net.Conn, head string) bool

	mu     sync.Mutex
	conns  int           // connections accepted
	heads  []wireArrival // every head, in arrival order
	stray  map[int][]byte
	closed map[int]bool
}

// wireArrival is one head as it arrived: its bytes and the target connection (1, 2, ...).
type wireArrival struct {
	conn int
	head string
}

func (a wireArrival) String() string { return fmt.Sprintf("connection %d: %q", a.conn, a.head) }

// wireOK is the fixed answer: an empty 200 that keeps the connection.
func wireOK(c net.Conn, _ string) bool {
	_, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	return err == nil
}

func newWireTarget(t testing.TB, answer func(c net.Conn, head string) bool) *wireTarget {
	tg := &wireTarget{answer: answer, stray: map[int][]byte{}, closed: map[int]bool{}}
	tg.addr = rawServer(t, func(c net.Conn) {
		tg.mu.Lock()
		tg.conns++
		id := tg.conns
		tg.mu.Unlock()
		defer func() {
			tg.mu.Lock()
			tg.closed[id] = true
			tg.mu.Unlock()
		}()
		var buf []byte
		rd := make([]byte, 64<<10)
		for {
			n, err := c.Read(rd)
			buf = append(buf, rd[:n]...)
			for {
				i := bytes.Index(buf, []byte("\r\n\r\n"))
				if i < 0 {
					break
				}
				head := string(buf[:i+4])
				buf = buf[i+4:]
				tg.mu.Lock()
				tg.heads = append(tg.heads, wireArrival{id, head})
				tg.stray[id] = slices.Clone(buf)
				tg.mu.Unlock()
				if !tg.answer(c, head) {
					return
				}
			}
			tg.mu.Lock()
			tg.stray[id] = slices.Clone(buf)
			tg.mu.Unlock()
			if err != nil {
				return
			}
		}
	})
	return tg
}

// take returns and forgets the heads that arrived so far, and the bytes each
// connection holds that do not (yet) end a head.
func (tg *wireTarget) take() (heads []wireArrival, stray []string) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	heads, tg.heads = tg.heads, nil
	for id, b := range tg.stray {
		if len(b) > 0 {
			stray = append(stray, fmt.Sprintf("connection %d: %q", id, b))
		}
	}
	slices.Sort(stray)
	return heads, stray
}

// parsedHead is a request head as the target's connection received it, split strictly
// (RFC 9112 §3, §5): "method SP target SP HTTP/1.1", then field lines "name:" OWS
// value OWS, each ending in CRLF. bad says why the bytes are not such a head.
type parsedHead struct {
	method, target, version string
	fields                  [][2]string // as received, names in their case, values without OWS
	bad                     string
}

func parseWireHead(h string) (p parsedHead) {
	body, ok := strings.CutSuffix(h, "\r\n\r\n")
	if !ok {
		return parsedHead{bad: "no blank line"}
	}
	lines := strings.Split(body, "\r\n")
	for _, l := range lines {
		if strings.ContainsAny(l, "\r\n\x00") {
			return parsedHead{bad: fmt.Sprintf("bare CR, LF or NUL in %q", l)}
		}
	}
	rl := strings.Split(lines[0], " ")
	// The target holds no space, control byte or DEL. Bytes 0x80 and above (obs-text)
	// are let through: RFC 9112 §3.2 does not allow them, but net/http's request writer
	// forwards a query's as they came (it refuses control bytes only), and so does the
	// byte-level path; they cannot end a request line.
	if len(rl) != 3 || !wireToken(rl[0]) || rl[1] == "" ||
		strings.ContainsFunc(rl[1], func(c rune) bool { return c <= ' ' || c == 0x7f }) || rl[2] != "HTTP/1.1" {
		return parsedHead{bad: fmt.Sprintf("request line %q", lines[0])}
	}
	p.method, p.target, p.version = rl[0], rl[1], rl[2]
	for _, l := range lines[1:] {
		name, value, ok := strings.Cut(l, ":")
		if !ok || !wireToken(name) {
			return parsedHead{bad: fmt.Sprintf("field line %q", l)}
		}
		value = strings.Trim(value, " \t") // OWS is not part of the value (RFC 9112 §5)
		if strings.ContainsFunc(value, func(c rune) bool { return c < ' ' && c != '\t' || c == 0x7f }) {
			return parsedHead{bad: fmt.Sprintf("control byte in %q", l)}
		}
		p.fields = append(p.fields, [2]string{name, value})
	}
	return p
}

// values returns the values of the fields named name (any case), in order.
func (p parsedHead) values(name string) []string {
	var out []string
	for _, f := range p.fields {
		if strings.EqualFold(f[0], name) {
			out = append(out, f[1])
		}
	}
	return out
}

// normal is the head after the normalization the comparison allows, and nothing more:
// field names in lower case (case-insensitive, RFC 9110 §5.1), fields sorted by name
// with each name's values kept in their order (the order of fields with different names
// carries no meaning, RFC 9110 §5.3, and net/http writes them sorted), values without
// surrounding OWS (parseWireHead). The request line, Host, every value and every
// framing field are kept exactly. The client's port never appears (both paths write the
// address only, clientIP), so X-Forwarded-For and Forwarded are compared as they are.
func (p parsedHead) normal() string {
	fs := make([][2]string, len(p.fields))
	for i, f := range p.fields {
		fs[i] = [2]string{strings.ToLower(f[0]), f[1]}
	}
	slices.SortStableFunc(fs, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s\n", p.method, p.target, p.version)
	for _, f := range fs {
		fmt.Fprintf(&b, "%s: %q\n", f[0], f[1])
	}
	return b.String()
}

// wireHopByHop are the names no forwarded request may carry: hop-by-hop (RFC 9110
// §7.6.1, and the proxy's list, h1wire.HopByHop) and the forwarding look-alikes a CGI
// target would read as the real ones.
var wireHopByHop = []string{"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
	"transfer-encoding", "upgrade", "http2-settings", "trailer",
	"x_forwarded_for", "x_forwarded_proto", "x_forwarded_host", "x_real_ip"}

// headProblems checks one forwarded head on its own, whichever server forwarded it: a
// strict head, exactly one Host equal to :authority, no hop-by-hop field, te only as
// "trailers", no Transfer-Encoding, Content-Length only as "0" and only for POST, PUT
// and PATCH (the request has no body, RFC 9110 §8.6), this hop's address last in
// X-Forwarded-For.
func headProblems(p parsedHead, method, authority string) []string {
	if p.bad != "" {
		return []string{"not a well-formed head: " + p.bad}
	}
	var out []string
	if p.method != method {
		out = append(out, fmt.Sprintf("method %q, sent %q", p.method, method))
	}
	if p.target != "*" && !strings.HasPrefix(p.target, "/") {
		out = append(out, fmt.Sprintf("request-target %q is not origin-form", p.target))
	}
	if h := p.values("host"); len(h) != 1 || h[0] != authority {
		out = append(out, fmt.Sprintf("Host %q, :authority %q", h, authority))
	}
	for _, f := range p.fields {
		n := strings.ToLower(f[0])
		for _, x := range wireHopByHop {
			if n == x || strings.Contains(n, "_") && strings.ReplaceAll(n, "-", "_") == x {
				out = append(out, fmt.Sprintf("forwarded %s: %q", f[0], f[1]))
			}
		}
		if n == "te" && f[1] != "trailers" {
			out = append(out, fmt.Sprintf("te %q", f[1]))
		}
	}
	switch cl := p.values("content-length"); {
	case len(cl) == 0 && (method == "POST" || method == "PUT" || method == "PATCH"):
		out = append(out, "no Content-Length: 0 for "+method)
	case len(cl) > 1 || len(cl) == 1 && (cl[0] != "0" || method != "POST" && method != "PUT" && method != "PATCH"):
		out = append(out, fmt.Sprintf("Content-Length %q for %s", cl, method))
	}
	if xff := p.values("x-forwarded-for"); len(xff) != 1 || !strings.HasSuffix(xff[0], "127.0.0.1") {
		out = append(out, fmt.Sprintf("X-Forwarded-For %q", xff))
	}
	return out
}

// wireOutcome is what one side did with one input: the client's outcome, the heads its
// target received and any bytes left after them.
type wireOutcome struct {
	client h2Outcome
	heads  []parsedHead
	stray  []string
}

func (o wireOutcome) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "client: %v; %d head(s)", o.client, len(o.heads))
	for _, h := range o.heads {
		if h.bad != "" {
			b.WriteString("\n  BAD: " + h.bad)
		} else {
			b.WriteString("\n  " + strings.ReplaceAll(h.normal(), "\n", "\n  "))
		}
	}
	for _, s := range o.stray {
		b.WriteString("\n  stray bytes: " + s)
	}
	return b.String()
}

// wireInput is one fuzzed request.
type wireInput struct {
	method, path, authority string
	fields                  [][2]string
}

// wireFields decodes the fuzzer's field list: fields separated by 0x1e, name and value
// by 0x1f (neither byte is valid in a name or a value, so neither is lost as an
// attack byte).
func wireFields(s string) [][2]string {
	var out [][2]string
	if s == "" {
		return nil
	}
	for _, f := range strings.Split(s, "\x1e") {
		name, value, _ := strings.Cut(f, "\x1f")
		out = append(out, [2]string{name, value})
		if len(out) == 64 {
			break
		}
	}
	return out
}

// wireAccepted reports whether std and own may differ this way, and why. The list is
// short on purpose and each entry names the input it is for. All but one are about
// whether a request is forwarded at all (one side refuses or answers it itself); the
// one difference in what reached a target from both is User-Agent's.
func wireAccepted(in wireInput, std, own wireOutcome) (string, bool) {
	has := func(name string, ok func(v string) bool) bool {
		for _, f := range in.fields {
			if f[0] == name && ok(f[1]) {
				return true
			}
		}
		return false
	}
	if len(std.heads) == 0 && len(own.heads) == 0 {
		// Neither forwarded: how each refused is FuzzH2OwnMatchesStd's comparison.
		return "neither forwarded", true
	}
	if len(std.heads) == 0 && std.client.status == "502" && len(own.heads) == 1 && has("trailer", func(string) bool { return true }) {
		// A bodiless request announcing trailers: net/http's server turns the
		// announcement into Request.Trailer keys, which its request writer then refuses
		// (an empty or invalid name) or waits for; the own server drops the hop-by-hop
		// field, as there is no body to carry trailers.
		return "trailer announced on a bodiless request: net/http's writer fails", true
	}
	if len(std.heads) == 0 && in.method == "OPTIONS" && in.path == "*" && std.client.status == "200" {
		// net/http's server answers "OPTIONS *" itself; the own server forwards it.
		return "OPTIONS * answered by net/http itself", true
	}
	if len(own.heads) == 0 && own.client.ended == "reset" && own.client.rst == http2.ErrCodeProtocol {
		switch {
		case in.path == "*" && in.method != "OPTIONS":
			return `":path" "*" without OPTIONS: malformed (RFC 9113 §8.3.1)`, true
		case h2OuterWhitespace(in.method) || h2OuterWhitespace(in.path) || h2OuterWhitespace(in.authority) ||
			slices.ContainsFunc(in.fields, func(f [2]string) bool { return h2OuterWhitespace(f[1]) }):
			return "a field value with outer whitespace: malformed (RFC 9113 §8.2.1)", true
		case has("host", func(v string) bool { return v != in.authority }):
			return "host differing from :authority: malformed (RFC 9113 §8.3.1)", true
		case has("te", func(v string) bool { return v == "" }) && !has("te", func(v string) bool { return v != "" && v != "trailers" }):
			// An empty te: net/http's server takes it as no te; the engine admits
			// "trailers" only (RFC 9113 §8.2.2) and refuses the stream. Stricter, never
			// forwarded: a design decision of the engine, not changed here.
			return "te with an empty value: the own server refuses it", true
		}
	}
	if len(own.heads) == 0 && own.client.status == "417" && len(std.heads) == 1 {
		for _, f := range in.fields {
			if f[0] == "expect" {
				// The first expect decides, as in net/http's HTTP/1.1 server and the
				// fast path: an expectation other than 100-continue is answered 417 by
				// the own server (h2forward.go route, a design decision of the previous
				// change); net/http's HTTP/2 server forwards the field, and its target
				// decides.
				if !strings.EqualFold(f[1], "100-continue") {
					return "an unknown expectation: the own server answers 417, net/http's forwards it", true
				}
				break
			}
		}
	}
	if len(own.heads) == 0 && own.client.ended == "reset" && own.client.rst == http2.ErrCodeProtocol && len(std.heads) == 1 &&
		has("content-length", func(v string) bool { return strings.Trim(v, "0123456789") != "" || v == "" }) {
		// RFC 9110 §8.6: Content-Length = 1*DIGIT. The engine refuses any other spelling
		// (" 0", "+0") as malformed; net/http's server takes what strconv reads and, the
		// request having no body, forwards none.
		return "content-length not 1*DIGIT: the own server refuses it", true
	}
	if len(std.heads) == 0 && std.client.ended == "reset" && len(own.heads) == 1 && has("content-length", func(string) bool { return true }) {
		zero := true
		for _, f := range in.fields {
			if f[0] == "content-length" {
				zero = zero && f[1] != "" && strings.Trim(f[1], "0") == ""
			}
		}
		if zero {
			// content-length "0" and "00": one decimal value, which RFC 9110 §8.6 lets a
			// recipient take; net/http's server compares the strings. The own server
			// forwards no client Content-Length anyway (forwardHead writes its own).
			return "content-length fields of one value spelt differently: net/http refuses", true
		}
	}
	if len(std.heads) == 0 && std.client.status == "400" && len(own.heads) == 1 &&
		has("te", func(v string) bool { return v == "trailers" }) && !has("te", func(v string) bool { return v != "trailers" }) {
		// te: trailers more than once: net/http's server requires exactly one te field
		// and answers 400; RFC 9113 §8.2.2 only restricts its value, so the own server
		// forwards the one "Te: trailers" it writes (forwardHead).
		return "te: trailers repeated: net/http refuses, the own server forwards one", true
	}
	if len(std.heads) == 1 && len(own.heads) == 1 && len(std.stray)+len(own.stray) == 0 {
		s, o := std.heads[0], own.heads[0]
		if ua := s.values("user-agent"); has("user-agent", func(string) bool { return true }) {
			// net/http's request writer writes one User-Agent, the first value, and none
			// when it is empty; the byte-level path forwards the client's field(s) as
			// they came, as the HTTP/1.1 fast path does.
			o.fields = slices.DeleteFunc(slices.Clone(o.fields), func(f [2]string) bool { return strings.EqualFold(f[0], "user-agent") })
			s.fields = slices.DeleteFunc(slices.Clone(s.fields), func(f [2]string) bool { return strings.EqualFold(f[0], "user-agent") })
			ov := own.heads[0].values("user-agent")
			if s.normal() == o.normal() && len(ov) > 0 && (len(ua) == 0 && ov[0] == "" || len(ua) == 1 && ua[0] == ov[0]) {
				return "User-Agent: net/http writes the first value only, none when empty", true
			}
		}
	}
	return "", false
}

// wireEnvs are the servers FuzzH2BytesWire compares: per trust setting, net/http's
// HTTP/2 server and the own one, each routed to a wire target of its own.
type wireEnvs struct {
	std, own     *env
	stdT, ownT   *wireTarget
	stdTr, ownTr *env
	stdTT, ownTT *wireTarget
}

const wireHost = "app.example.test"

func newWireEnvs(t testing.TB) *wireEnvs {
	w := &wireEnvs{}
	mk := func(impl string, trusted bool) (*env, *wireTarget) {
		tg := newWireTarget(t, wireOK)
		e := newEnv(t, func(c *Config) {
			c.stdH2 = impl == h2Std
			if trusted {
				c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
			}
		})
		e.apply([]routeSpec{{host: wireHost, backends: []string{tg.addr}}})
		return e, tg
	}
	w.std, w.stdT = mk(h2Std, false)
	w.own, w.ownT = mk(h2Own, false)
	w.stdTr, w.stdTT = mk(h2Std, true)
	w.ownTr, w.ownTT = mk(h2Own, true)
	return w
}

// wireRun sends in to one side and collects what its target received. The client's
// outcome is complete before the target's record is taken: a forwarded request's
// bytes were read by the target before it answered, and a refused one sent none.
func wireRun(t testing.TB, e *env, tg *wireTarget, in wireInput) wireOutcome {
	fields := [][2]string{{":method", in.method}, {":scheme", "http"}, {":authority", in.authority}, {":path", in.path}}
	fields = append(fields, in.fields...)
	var o wireOutcome
	o.client = h2Exchange(t, e.http, fields, nil)
	heads, stray := tg.take()
	for _, h := range heads {
		o.heads = append(o.heads, parseWireHead(h.head))
	}
	o.stray = stray
	return o
}

// wireCompare fails t unless std and own forwarded in the same request bytes (after
// normal), each well-formed on its own (headProblems), or differ as wireAccepted allows.
func wireCompare(t testing.TB, in wireInput, std, own wireOutcome) {
	t.Helper()
	for side, o := range map[string]wireOutcome{"std": std, "own": own} {
		if len(o.heads) > 1 || len(o.stray) > 0 {
			t.Errorf("%s: more than one request reached the target: %v", side, o)
		}
		for _, h := range o.heads {
			if side == "std" && in.method == "OPTIONS" && in.path == "*" {
				continue
			}
			// The reference is held to the same rules: a bad head it forwards shows up
			// rather than being copied.
			if p := headProblems(h, in.method, in.authority); len(p) > 0 {
				t.Errorf("%s forwarded a bad head for %q: %q\n%v", side, in, p, o)
			}
		}
	}
	same := len(std.heads) == len(own.heads) && len(std.stray) == 0 && len(own.stray) == 0
	for i := 0; same && i < len(std.heads); i++ {
		same = std.heads[i].bad == "" && own.heads[i].bad == "" && std.heads[i].normal() == own.heads[i].normal()
	}
	if same {
		return
	}
	if _, ok := wireAccepted(in, std, own); ok {
		return
	}
	t.Errorf("input %q\nstd: %v\nown: %v", in, std, own)
}

// FuzzH2BytesWire: fuzzed bodiless HTTP/2 requests (method, :path, :authority, extra
// fields with repeated names, cookie crumbs, te, forwarding fields; from a trusted proxy
// or not) through net/http's HTTP/2 server and the own one, each to a raw target that
// records the bytes its connection received. Each forwarded head must be well-formed
// on its own (headProblems) and both must be the same after normal; a difference
// passes only through wireAccepted. WIRE_DEBUG=1 logs both sides of every input.
func FuzzH2BytesWire(f *testing.F) {
	fl := func(kv ...string) string {
		var parts []string
		for i := 0; i+1 < len(kv); i += 2 {
			parts = append(parts, kv[i]+"\x1f"+kv[i+1])
		}
		return strings.Join(parts, "\x1e")
	}
	// Valid conversations.
	f.Add("GET", "/", wireHost, "", false)
	f.Add("GET", "/a/b?c=d&e=f", wireHost, fl("accept", "*/*", "user-agent", "fuzz/1"), false)
	f.Add("HEAD", "/x", wireHost+":80", fl("x-a", "1", "x-b", "2", "x-a", "3"), false)
	f.Add("POST", "/p", wireHost, fl("content-type", "text/plain"), false)
	f.Add("PUT", "/p", wireHost, fl("content-length", "0"), true)
	f.Add("PATCH", "/p", wireHost, "", false)
	f.Add("DELETE", "/d", wireHost, "", false)
	f.Add("OPTIONS", "/o", wireHost, "", false)
	f.Add("OPTIONS", "*", wireHost, "", false)
	f.Add("GET", "/", wireHost, fl("cookie", "a=1", "cookie", "b=2", "x-c", "y", "cookie", "c=3"), false)
	f.Add("GET", "/", wireHost, fl("te", "trailers"), false)
	f.Add("GET", "/", wireHost, fl("x-forwarded-for", "1.2.3.4", "x-forwarded-for", "5.6.7.8", "forwarded", "for=1.2.3.4",
		"x-forwarded-proto", "https", "x-forwarded-host", "h.test", "x-real-ip", "9.9.9.9"), true)
	f.Add("GET", "/", wireHost, fl("x-forwarded-for", "1.2.3.4", "forwarded", "for=1.2.3.4", "x-forwarded-proto", "https",
		"x-forwarded-host", "h.test", "x-real-ip", "9.9.9.9"), false)
	f.Add("GET", "/", "APP.Example.TEST", "", false)
	// Nasty ones.
	f.Add("GET", "/a b?c d", wireHost, "", false)
	f.Add("GET", "/a\r\nX-Smuggled: 1", wireHost, "", false)
	f.Add("GET", "/a?b\r\nX: y", wireHost, "", false)
	f.Add("GET", "/a?b HTTP/1.1\r\nHost: evil\r\n\r\nGET /x", wireHost, "", false)
	f.Add("GET", "/%zz", wireHost, "", false)
	f.Add("GET", "/caf\u00e9#frag?q#r", wireHost, "", false)
	f.Add("GET", "/a?b#c", wireHost, "", false)
	f.Add("GET", "http://evil.test/x", wireHost, "", false)
	f.Add("GET", "//evil.test/x", wireHost, "", false)
	f.Add("GET", "*", wireHost, "", false)
	f.Add("G ET", "/", wireHost, "", false)
	f.Add("GET /x HTTP/1.1\r\n", "/", wireHost, "", false)
	f.Add("get", "/", wireHost, "", false)
	f.Add("post", "/", wireHost, "", false)
	f.Add("GET", "/", "user@"+wireHost, "", false)
	f.Add("GET", "/", wireHost+":99999", "", false)
	f.Add("GET", "/", wireHost+":8o", "", false)
	f.Add("GET", "/", wireHost+"\r\nX: y", "", false)
	f.Add("GET", "/", wireHost+" x", "", false)
	f.Add("GET", "/", wireHost, fl("host", "other.test"), false)
	f.Add("GET", "/", wireHost, fl("host", wireHost+":80"), false)
	f.Add("GET", "/", wireHost, fl("x-a", "b\r\nX-Smuggled: 1"), false)
	f.Add("GET", "/", wireHost, fl("x-a", "b\nc"), false)
	f.Add("GET", "/", wireHost, fl("x-a", "b\x00c"), false)
	f.Add("GET", "/", wireHost, fl("x-a", "caf\xe9 \xff"), false)
	f.Add("GET", "/", wireHost, fl("x-a", "  padded\t "), false)
	f.Add("GET", "/", wireHost, fl("x-a", " "), false)
	f.Add("GET", "/", wireHost, fl("x-a", ""), false)
	f.Add("GET", "/", wireHost, fl("X-Upper", "1"), false)
	f.Add("GET", "/", wireHost, fl("x a", "1"), false)
	f.Add("GET", "/", wireHost, fl("x:a", "1"), false)
	f.Add("GET", "/", wireHost, fl("content-length", "5"), false)
	f.Add("GET", "/", wireHost, fl("content-length", "0"), false)
	f.Add("POST", "/", wireHost, fl("content-length", "0", "content-length", "0"), false)
	f.Add("GET", "/", wireHost, fl("transfer-encoding", "chunked"), false)
	f.Add("GET", "/", wireHost, fl("connection", "keep-alive"), false)
	f.Add("GET", "/", wireHost, fl("upgrade", "websocket"), false)
	f.Add("GET", "/", wireHost, fl("keep-alive", "1"), false)
	f.Add("GET", "/", wireHost, fl("proxy-connection", "close"), false)
	f.Add("GET", "/", wireHost, fl("te", "gzip"), false)
	f.Add("GET", "/", wireHost, fl("te", "trailers", "te", "trailers"), false)
	f.Add("GET", "/", wireHost, fl("proxy-authorization", "Basic eA==", "http2-settings", "AAA", "trailer", "x"), false)
	f.Add("GET", "/", wireHost, fl("x_forwarded_for", "6.6.6.6", "x_real_ip", "6.6.6.6", "x-forwarded_host", "e.test"), true)
	f.Add("GET", "/", wireHost, fl("expect", "100-continue"), false)
	f.Add("GET", "/", wireHost, fl("user-agent", "a", "user-agent", "b"), false)
	f.Add("GET", "/", wireHost, fl("user-agent", ""), false)
	f.Add("GET", "/", wireHost, fl(":path", "/again"), false)
	f.Add("GET", "/", wireHost, fl("cookie", "", "cookie", "a=1"), false)
	f.Add("GET", "/", wireHost, fl("forwarded", `for="[::1]";host="a\"b"`), true)
	f.Add("GET", "/", wireHost, fl("x-forwarded-host", "evil.test\r\nX: 1"), true)
	f.Add("GET", "/", wireHost, fl("expect", "100-continue", "expect", "x"), false)
	f.Add("GET", "/", wireHost, fl("expect", "x", "expect", "100-continue"), false)
	f.Add("GET", "/", wireHost, fl("expect", "100-Continue"), false)
	f.Add("GET", "/", wireHost, fl("expect", "x"), false)
	f.Add("GET", "/", wireHost, fl("content-length", "00"), false)
	f.Add("GET", "/", wireHost, fl("content-length", " 0"), false)
	f.Add("GET", "/", wireHost, fl("content-length", "+0"), false)
	f.Add("POST", "/", wireHost, fl("content-length", "0", "content-length", "00"), false)
	f.Add("GET", "/", wireHost+":0080", "", false)
	f.Add("GET", "/", wireHost+".", "", false)
	f.Add("GET", "/", "[::1]", "", false)
	f.Add("GET", "/?", wireHost, "", false)
	f.Add("GET", "/a%2f%2F%7e?%zz", wireHost, "", false)
	f.Add("GET", "/a;b=c/d,e", wireHost, "", false)
	f.Add("GET", "/\\evil.test", wireHost, "", false)
	f.Add("GET", "/", wireHost, fl("idempotency-key", "k", "x-idempotency-key", "k"), false)
	f.Add("GET", "/", wireHost, fl("x-forwarded-for", "", "forwarded", ""), true)
	w := newWireEnvs(f)
	f.Fuzz(func(t *testing.T, method, path, authority, fields string, trusted bool) {
		in := wireInput{method, path, authority, wireFields(fields)}
		se, st, oe, ot := w.std, w.stdT, w.own, w.ownT
		if trusted {
			se, st, oe, ot = w.stdTr, w.stdTT, w.ownTr, w.ownTT
		}
		std := wireRun(t, se, st, in)
		own := wireRun(t, oe, ot, in)
		if os.Getenv("WIRE_DEBUG") != "" {
			t.Logf("input %q\nstd: %v\nown: %v", in, std, own)
		}
		wireCompare(t, in, std, own)
	})
}
