package h2

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// peer is a hand-driven HTTP/2 client on a raw connection, for the protocol and attack
// tests.
type peer struct {
	t    testing.TB
	nc   net.Conn
	fr   *http2.Framer
	henc *hpack.Encoder
	hbuf bytes.Buffer
}

// newPeer connects, sends the preface and an empty SETTINGS, and reads the server's
// SETTINGS.
func newPeer(t testing.TB, ts *testServer) *peer {
	t.Helper()
	p := rawPeer(t, ts)
	if _, err := p.nc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := p.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return p
}

// rawPeer connects without sending anything.
func rawPeer(t testing.TB, ts *testServer) *peer {
	t.Helper()
	nc := ts.dial(t)
	p := &peer{t: t, nc: nc, fr: http2.NewFramer(nc, nc)}
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.henc = hpack.NewEncoder(&p.hbuf)
	return p
}

func (p *peer) block(fields ...[2]string) []byte {
	p.hbuf.Reset()
	for _, f := range fields {
		_ = p.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return bytes.Clone(p.hbuf.Bytes())
}

func (p *peer) headers(id uint32, end bool, fields ...[2]string) {
	p.t.Helper()
	if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.block(fields...), EndStream: end, EndHeaders: true}); err != nil {
		p.t.Fatal(err)
	}
}

func (p *peer) get(id uint32, path string) {
	p.t.Helper()
	p.headers(id, true, [2]string{":method", "GET"}, [2]string{":scheme", "http"}, [2]string{":authority", "a.example"}, [2]string{":path", path})
}

// next reads the next frame, failing after 10 s.
func (p *peer) next() (http2.Frame, error) {
	_ = p.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	return p.fr.ReadFrame()
}

// expectReset reads until RST_STREAM on id (or fails on GOAWAY or EOF).
func (p *peer) expectReset(id uint32) http2.ErrCode {
	p.t.Helper()
	for {
		f, err := p.next()
		if err != nil {
			p.t.Fatalf("waiting for RST_STREAM %d: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return f.ErrCode
			}
		case *http2.GoAwayFrame:
			p.t.Fatalf("GOAWAY %v while waiting for RST_STREAM %d", f.ErrCode, id)
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				p.t.Fatalf("response on stream %d, want a reset", id)
			}
		}
	}
}

// expectResponse reads until the response head on id; it returns :status.
func (p *peer) expectResponse(id uint32) string {
	p.t.Helper()
	for {
		f, err := p.next()
		if err != nil {
			p.t.Fatalf("waiting for the response on %d: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				return f.PseudoValue("status")
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				p.t.Fatalf("stream %d reset: %v", id, f.ErrCode)
			}
		case *http2.GoAwayFrame:
			p.t.Fatalf("GOAWAY %v while waiting for stream %d", f.ErrCode, id)
		}
	}
}

// expectGoAway reads until GOAWAY and returns its code; the connection must close after.
func (p *peer) expectGoAway() http2.ErrCode {
	p.t.Helper()
	for {
		f, err := p.next()
		if err != nil {
			p.t.Fatalf("waiting for GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			return g.ErrCode
		}
	}
}

// expectClosed reads (and drops) until the server closes the connection; it fails if
// that takes 10 s.
func (p *peer) expectClosed() {
	p.t.Helper()
	_ = p.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, p.nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		p.t.Fatal("the server did not close the connection")
	}
}
