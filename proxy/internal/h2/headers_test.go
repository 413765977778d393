package h2

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// headerTestLimit is MaxHeaderBytes in the header block tests.
const headerTestLimit = 8 << 10

// recordingHandler passes each request head it serves on, then answers like echoHandler.
func recordingHandler(seen chan<- Request) Handler {
	return HandlerFunc(func(st *Stream) {
		r := *st.Request()
		r.Fields = slices.Clone(r.Fields)
		seen <- r
		echoHandler(st)
	})
}

// answer reads until the server's answer to stream id: "status NNN", "RST <code>" or
// "GOAWAY <code>".
func answer(t *testing.T, p *peer, id uint32) string {
	t.Helper()
	for {
		f, err := p.next()
		if err != nil {
			t.Fatalf("waiting for the answer on stream %d: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				return "status " + f.PseudoValue("status")
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return "RST " + f.ErrCode.String()
			}
		case *http2.GoAwayFrame:
			return "GOAWAY " + f.ErrCode.String()
		}
	}
}

// oracle is what the engine answered when x/net's Framer decoded its header blocks
// (ReadMetaHeaders, MaxHeaderListSize = MaxHeaderBytes): it reads frames, as the
// client sends them, until the first header block's verdict.
func oracle(t *testing.T, wire []byte) string {
	t.Helper()
	fr := http2.NewFramer(nil, bytes.NewReader(wire))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = headerTestLimit
	for {
		f, err := fr.ReadFrame()
		var se http2.StreamError
		var ce http2.ConnectionError
		switch {
		case errors.As(err, &se):
			return "RST " + se.Code.String()
		case errors.As(err, &ce):
			return "GOAWAY " + http2.ErrCode(ce).String()
		case err != nil:
			t.Fatalf("oracle: %v", err)
		}
		if mh, ok := f.(*http2.MetaHeadersFrame); ok {
			if mh.Truncated {
				return "status 431"
			}
			return "status 200" // every well-formed case is a valid GET
		}
	}
}

// wireFrames writes frames with a fresh HPACK encoder (the server's decoder is fresh on
// each connection too).
func wireFrames(write func(fr *http2.Framer, enc func(...string) []byte)) []byte {
	var b, hb bytes.Buffer
	henc := hpack.NewEncoder(&hb)
	enc := func(kv ...string) []byte {
		hb.Reset()
		for i := 0; i+1 < len(kv); i += 2 {
			_ = henc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return bytes.Clone(hb.Bytes())
	}
	fr := http2.NewFramer(&b, nil)
	fr.AllowIllegalWrites = true
	write(fr, enc)
	return b.Bytes()
}

var getPseudos = []string{":method", "GET", ":scheme", "http", ":authority", "a.example", ":path", "/"}

func withGet(kv ...string) []string { return append(slices.Clone(getPseudos), kv...) }

// TestHeaderBlockAssembly: the engine decodes header blocks itself (headers.go); each
// block gets the answer it got when x/net's Framer decoded it (the same stream or
// connection error, 431 when truncated), and a block split across CONTINUATIONs
// decodes as it does in one HEADERS frame.
func TestHeaderBlockAssembly(t *testing.T) {
	big := strings.Repeat("b", 3<<10)
	one := func(kv ...string) func(fr *http2.Framer, enc func(...string) []byte) {
		return func(fr *http2.Framer, enc func(...string) []byte) {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(kv...), EndStream: true, EndHeaders: true})
		}
	}
	// split sends the block in pieces of n bytes, the last one with END_HEADERS.
	split := func(n int, kv ...string) func(fr *http2.Framer, enc func(...string) []byte) {
		return func(fr *http2.Framer, enc func(...string) []byte) {
			block := enc(kv...)
			first := min(n, len(block))
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:first], EndStream: true, EndHeaders: first == len(block)})
			for i := first; i < len(block); i += n {
				_ = fr.WriteContinuation(1, i+n >= len(block), block[i:min(i+n, len(block))])
			}
		}
	}
	cases := []struct {
		name  string
		write func(fr *http2.Framer, enc func(...string) []byte)
		want  string
	}{
		{"one frame", one(withGet("x-a", "1", "x-b", "2")...), "status 200"},
		{"1-byte CONTINUATIONs", split(1, withGet("x-a", "1", "x-b", "2")...), "status 200"},
		{"7-byte CONTINUATIONs", split(7, withGet("x-a", "1", "cookie", "c=1", "cookie", "d=2")...), "status 200"},
		{"empty CONTINUATIONs between", func(fr *http2.Framer, enc func(...string) []byte) {
			block := enc(getPseudos...)
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:2], EndStream: true})
			_ = fr.WriteContinuation(1, false, nil)
			_ = fr.WriteContinuation(1, false, block[2:])
			_ = fr.WriteContinuation(1, true, nil)
		}, "status 200"},
		{"padded HEADERS and priority", func(fr *http2.Framer, enc func(...string) []byte) {
			block := enc(getPseudos...)
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:3], EndStream: true, PadLength: 20,
				Priority: http2.PriorityParam{StreamDep: 0, Weight: 5}})
			_ = fr.WriteContinuation(1, true, block[3:])
		}, "status 200"},
		{"over the limit in one frame", one(withGet("x-big1", big, "x-big2", big, "x-big3", big)...), "status 431"},
		{"over the limit in the last CONTINUATION", split(6<<10, withGet("x-big1", big, "x-big2", big, "x-big3", big)...), "status 431"},
		{"CONTINUATION after the limit", split(4<<10, withGet("x-big1", big, "x-big2", big, "x-big3", big, "x-big4", big)...), "GOAWAY PROTOCOL_ERROR"},
		{"upper-case name", one(withGet("X-Upper", "1")...), "RST PROTOCOL_ERROR"},
		{"empty name", one(withGet("", "1")...), "RST PROTOCOL_ERROR"},
		{"name with a space", one(withGet("x y", "1")...), "RST PROTOCOL_ERROR"},
		{"value with NUL", one(withGet("x-a", "a\x00b")...), "RST PROTOCOL_ERROR"},
		{"value with LF", one(withGet("x-a", "a\nb")...), "RST PROTOCOL_ERROR"},
		{"pseudo value with CR", one(":method", "GET", ":scheme", "http", ":authority", "a\rb", ":path", "/"), "RST PROTOCOL_ERROR"},
		{"pseudo after regular", one(":method", "GET", ":scheme", "http", "x-a", "1", ":authority", "a.example", ":path", "/"), "RST PROTOCOL_ERROR"},
		{"duplicate pseudo", one(withGet(":path", "/again")...), "RST PROTOCOL_ERROR"},
		{"duplicate pseudo after regular", one(withGet("x-a", "1", ":path", "/again")...), "RST PROTOCOL_ERROR"},
		{"unknown pseudo", one(withGet(":foo", "1")...), "RST PROTOCOL_ERROR"},
		{"response pseudo", one(":status", "200", ":method", "GET", ":scheme", "http", ":path", "/"), "RST PROTOCOL_ERROR"},
		{"invalid field split across CONTINUATIONs", split(3, withGet("X-Upper", "1")...), "RST PROTOCOL_ERROR"},
		{"CONTINUATION after an invalid field", func(fr *http2.Framer, enc func(...string) []byte) {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(withGet("X-Upper", "1")...), EndStream: true})
			_ = fr.WriteContinuation(1, true, enc("x-a", "1"))
		}, "GOAWAY PROTOCOL_ERROR"},
		{"truncated field", func(fr *http2.Framer, enc func(...string) []byte) {
			block := enc(withGet("x-a", "12345")...)
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:len(block)-2], EndStream: true, EndHeaders: true})
		}, "GOAWAY COMPRESSION_ERROR"},
		{"index out of range", func(fr *http2.Framer, enc func(...string) []byte) {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: append(enc(getPseudos...), 0x80|0x7f, 0x10), EndStream: true, EndHeaders: true})
		}, "GOAWAY COMPRESSION_ERROR"},
		{"DATA inside a block", func(fr *http2.Framer, enc func(...string) []byte) {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(getPseudos...), EndStream: true})
			_ = fr.WriteData(1, true, []byte("x"))
		}, "GOAWAY PROTOCOL_ERROR"},
		{"CONTINUATION on another stream", func(fr *http2.Framer, enc func(...string) []byte) {
			block := enc(getPseudos...)
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:2], EndStream: true})
			_ = fr.WriteContinuation(3, true, block[2:])
		}, "GOAWAY PROTOCOL_ERROR"},
		{"CONTINUATION without HEADERS", func(fr *http2.Framer, enc func(...string) []byte) {
			_ = fr.WriteContinuation(1, true, enc(getPseudos...))
		}, "GOAWAY PROTOCOL_ERROR"},
	}
	seen := make(chan Request, len(cases))
	ts := startServer(t, Config{MaxHeaderBytes: headerTestLimit}, recordingHandler(seen), false)
	var oneFrame Request
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wire := wireFrames(c.write)
			if want := oracle(t, wire); want != c.want {
				t.Fatalf("x/net's Framer answers %q, the case expects %q", want, c.want)
			}
			p := newPeer(t, ts)
			if _, err := p.nc.Write(wire); err != nil {
				t.Fatal(err)
			}
			if got := answer(t, p, 1); got != c.want {
				t.Fatalf("answer %q, want %q", got, c.want)
			}
			if c.want != "status 200" {
				return
			}
			r := <-seen
			switch c.name {
			case "one frame":
				oneFrame = r
			case "1-byte CONTINUATIONs":
				if fmt.Sprint(r) != fmt.Sprint(oneFrame) {
					t.Fatalf("split across CONTINUATIONs: %+v\nin one frame: %+v", r, oneFrame)
				}
			case "7-byte CONTINUATIONs":
				if v, _ := r.Get("cookie"); v != "c=1; d=2" || len(r.Fields) != 2 {
					t.Fatalf("fields %q", r.Fields)
				}
			}
		})
	}
}

// TestOuterWhitespaceRefused: a field value that starts or ends with SP or HTAB makes
// the request malformed (RFC 9113 §8.2.1), pseudo-headers included; whitespace inside a
// value does not. Here the engine is stricter than x/net's Framer (which accepts them),
// so there is no oracle.
func TestOuterWhitespaceRefused(t *testing.T) {
	cases := []struct {
		name string
		kv   []string
		want string
	}{
		{"leading space", withGet("x-a", " 1"), "RST PROTOCOL_ERROR"},
		{"trailing space", withGet("x-a", "1 "), "RST PROTOCOL_ERROR"},
		{"leading tab", withGet("x-a", "\t1"), "RST PROTOCOL_ERROR"},
		{"trailing tab", withGet("x-a", "1\t"), "RST PROTOCOL_ERROR"},
		{"only a space", withGet("x-a", " "), "RST PROTOCOL_ERROR"},
		{"authority with a trailing space", []string{":method", "GET", ":scheme", "http", ":authority", "a.example ", ":path", "/"}, "RST PROTOCOL_ERROR"},
		{"cookie crumb with a leading space", withGet("cookie", "a=1", "cookie", " b=2"), "RST PROTOCOL_ERROR"},
		{"space inside", withGet("x-a", "1 2\t3"), "status 200"},
		{"empty value", withGet("x-a", ""), "status 200"},
	}
	seen := make(chan Request, len(cases))
	ts := startServer(t, Config{MaxHeaderBytes: headerTestLimit}, recordingHandler(seen), false)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wire := wireFrames(func(fr *http2.Framer, enc func(...string) []byte) {
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(c.kv...), EndStream: true, EndHeaders: true})
			})
			p := newPeer(t, ts)
			if _, err := p.nc.Write(wire); err != nil {
				t.Fatal(err)
			}
			if got := answer(t, p, 1); got != c.want {
				t.Fatalf("answer %q, want %q", got, c.want)
			}
			if c.want == "status 200" {
				r := <-seen
				if v, _ := r.Get("x-a"); v != c.kv[len(c.kv)-1] {
					t.Fatalf("x-a reached the handler as %q, want %q", v, c.kv[len(c.kv)-1])
				}
			}
		})
	}
}

// TestOversizeBlockKeepsTableInSync: a header block over MaxHeaderBytes is answered 431
// and is still decoded to its end, so that the entries it adds to the HPACK dynamic
// table are there for the next block: a request naming one of them by index decodes
// to its value.
func TestOversizeBlockKeepsTableInSync(t *testing.T) {
	seen := make(chan Request, 2)
	ts := startServer(t, Config{MaxHeaderBytes: headerTestLimit}, recordingHandler(seen), false)
	for _, frames := range []int{1, 3} {
		t.Run(fmt.Sprint(frames, " frames"), func(t *testing.T) {
			p := newPeer(t, ts)
			big := strings.Repeat("b", 3<<10)
			// The last field is added to the dynamic table past the limit: index 62.
			block := p.block([2]string{":method", "GET"}, [2]string{":scheme", "http"}, [2]string{":authority", "a.example"}, [2]string{":path", "/big"},
				[2]string{"x-big1", big}, [2]string{"x-big2", big}, [2]string{"x-big3", big}, [2]string{"x-after", "kept in the table"})
			n := (len(block) + frames - 1) / frames
			if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:n], EndStream: true, EndHeaders: frames == 1}); err != nil {
				t.Fatal(err)
			}
			for i := n; i < len(block); i += n {
				if err := p.fr.WriteContinuation(1, i+n >= len(block), block[i:min(i+n, len(block))]); err != nil {
					t.Fatal(err)
				}
			}
			if got := answer(t, p, 1); got != "status 431" {
				t.Fatalf("oversized block: %q, want status 431", got)
			}
			// :method GET, :scheme http, :path /, :authority a literal not indexed
			// (the dynamic table is left as it is), then the dynamic entry 62: the
			// newest, x-after.
			next := []byte{0x82, 0x86, 0x84, 0x01, 9, 'a', '.', 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0x80 | 62}
			if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: next, EndStream: true, EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			if got := answer(t, p, 3); got != "status 200" {
				t.Fatalf("next request: %q, want status 200", got)
			}
			r := <-seen
			if v, ok := r.Get("x-after"); !ok || v != "kept in the table" {
				t.Fatalf("next request's fields %q: the dynamic table is out of sync", r.Fields)
			}
		})
	}
}

// TestHeaderBlockAbuseVerdict: a block that goes on past the limit is a verdict of abuse
// (reasonHeaderBlockOverLimit) when it is long in bytes, as when the Framer read the
// whole block in one call; a refused CONTINUATION of a short block is an ordinary
// protocol error.
func TestHeaderBlockAbuseVerdict(t *testing.T) {
	cases := []struct {
		name  string
		write func(p *peer)
		want  []string
	}{
		{"long block past the limit", func(p *peer) {
			big := strings.Repeat("b", 3<<10)
			block := p.block([2]string{":method", "GET"}, [2]string{":scheme", "http"}, [2]string{":authority", "a"}, [2]string{":path", "/"},
				[2]string{"x-big1", big}, [2]string{"x-big2", big}, [2]string{"x-big3", big})
			_ = p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true})
			_ = p.fr.WriteContinuation(1, true, p.block([2]string{"x-more", "1"}))
		}, []string{reasonHeaderBlockOverLimit}},
		{"short block after an invalid field", func(p *peer) {
			_ = p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: p.block([2]string{"X-Upper", "1"}), EndStream: true})
			_ = p.fr.WriteContinuation(1, true, p.block([2]string{"x-more", "1"}))
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var log abuseLog
			ts := startServer(t, Config{MaxHeaderBytes: headerTestLimit, OnAbuse: log.onAbuse}, echoHandler, false)
			p := newPeer(t, ts)
			c.write(p)
			if got := answer(t, p, 1); got != "GOAWAY PROTOCOL_ERROR" {
				t.Fatalf("answer %q, want GOAWAY PROTOCOL_ERROR", got)
			}
			p.nc.Close()
			<-ts.served
			if got := log.get(); !slices.Equal(got, c.want) {
				t.Fatalf("OnAbuse told %q, want %q", got, c.want)
			}
		})
	}
}

// TestTrailersAssembled: trailers (a second header block on an open stream) go through
// the same assembly: split across CONTINUATIONs they reach the handler; an invalid one
// resets the stream, as when x/net's Framer decoded them.
func TestTrailersAssembled(t *testing.T) {
	ts := startServer(t, Config{MaxHeaderBytes: headerTestLimit}, echoHandler, false)
	post := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "a.example"}, {":path", "/"}}
	t.Run("split", func(t *testing.T) {
		p := newPeer(t, ts)
		p.headers(1, false, post...)
		if err := p.fr.WriteData(1, false, []byte("body")); err != nil {
			t.Fatal(err)
		}
		tr := p.block([2]string{"x-trailer", "one"}, [2]string{"x-other", "two"})
		if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: tr[:2], EndStream: true}); err != nil {
			t.Fatal(err)
		}
		for i := 2; i < len(tr); i += 2 {
			if err := p.fr.WriteContinuation(1, i+2 >= len(tr), tr[i:min(i+2, len(tr))]); err != nil {
				t.Fatal(err)
			}
		}
		for {
			f, err := p.next()
			if err != nil {
				t.Fatal(err)
			}
			if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamID == 1 && h.StreamEnded() {
				want := []hpack.HeaderField{{Name: "x-trailer", Value: "one"}, {Name: "x-other", Value: "two"}}
				if !slices.Equal(h.Fields, want) {
					t.Fatalf("trailers echoed: %v, want %v", h.Fields, want)
				}
				return
			}
			if r, ok := f.(*http2.RSTStreamFrame); ok {
				t.Fatalf("stream reset: %v", r.ErrCode)
			}
		}
	})
	t.Run("invalid", func(t *testing.T) {
		p := newPeer(t, ts)
		p.headers(1, false, post...)
		tr := p.block([2]string{"X-Trailer", "one"})
		if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: tr[:1], EndStream: true}); err != nil {
			t.Fatal(err)
		}
		if err := p.fr.WriteContinuation(1, true, tr[1:]); err != nil {
			t.Fatal(err)
		}
		if code := p.expectReset(1); code != http2.ErrCodeProtocol {
			t.Fatalf("reset %v, want PROTOCOL_ERROR", code)
		}
		// The connection goes on.
		p.get(3, "/")
		if st := p.expectResponse(3); st != "200" {
			t.Fatalf("status %s", st)
		}
	})
}
