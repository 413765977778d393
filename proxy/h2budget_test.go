package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2RawPeer is a raw h2c client for the budget tests: frames written and read by hand.
type h2RawPeer struct {
	t    *testing.T
	c    net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	henc *hpack.Encoder
}

func dialH2RawPeer(t *testing.T, addr string) *h2RawPeer {
	t.Helper()
	c := dialRaw(t, addr)
	p := &h2RawPeer{t: t, c: c, fr: http2.NewFramer(c, c)}
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.henc = hpack.NewEncoder(&p.hbuf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := p.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return p
}

// get sends a GET for host's / on stream id; it reports a write error (the server may
// have hung up).
func (p *h2RawPeer) get(id uint32, host string) error {
	p.hbuf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", host}, {":path", "/"}} {
		_ = p.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.hbuf.Bytes(), EndStream: true, EndHeaders: true})
}

// next reads a frame; io.EOF once the server closed the connection.
func (p *h2RawPeer) next() (http2.Frame, error) {
	_ = p.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := p.fr.ReadFrame()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		p.t.Fatal("the server neither answered nor closed the connection")
	}
	return f, err
}

// TestH2MaxStreamsPerConnConfig: Config.HTTP2MaxStreamsPerConn reaches the engine: with 3,
// the third stream is answered along with GOAWAY(NO_ERROR) naming it as the last, the
// fourth is ignored, and the connection closes after the last answer.
func TestH2MaxStreamsPerConnConfig(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.HTTP2MaxStreamsPerConn = 3 })
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{backend(t, echoInfo())}}})
	p := dialH2RawPeer(t, e.http)
	for id := uint32(1); id <= 7; id += 2 {
		if err := p.get(id, "app.example.test"); err != nil {
			t.Fatal(err)
		}
	}
	ended := map[uint32]bool{}
	var goaway *http2.GoAwayFrame
	for {
		f, err := p.next()
		if err != nil {
			break // closed
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			goaway = f
		case *http2.RSTStreamFrame:
			t.Fatalf("stream %d reset: %v", f.StreamID, f.ErrCode)
		}
		if f.Header().StreamID > 5 {
			t.Fatalf("a %v frame on stream %d, past the third stream", f.Header().Type, f.Header().StreamID)
		}
		if f.Header().StreamID != 0 && f.Header().Flags.Has(http2.FlagDataEndStream) {
			ended[f.Header().StreamID] = true
		}
	}
	if goaway == nil || goaway.ErrCode != http2.ErrCodeNo || goaway.LastStreamID != 5 {
		t.Fatalf("GOAWAY %+v, want NO_ERROR with last stream 5", goaway)
	}
	if len(ended) != 3 {
		t.Fatalf("streams answered: %v, want 1, 3 and 5", ended)
	}
}

// TestH2LateResetFloodPenalised (issue 25, finding 1): a client that sends request after
// request and resets each once its answer came ends with GOAWAY(ENHANCE_YOUR_CALM) within
// the engine's reset budget, and its address is penalised. Before, such resets cost
// nothing: the flood went on for as long as the connection did.
func TestH2LateResetFloodPenalised(t *testing.T) {
	e := newEnv(t)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{backend(t, echoInfo())}}})
	p := dialH2RawPeer(t, e.http)
	sent, code := lateResetFlood(p, 900) // within the 1,000 streams of a connection
	if code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("after %d requests reset once answered: GOAWAY %v, want ENHANCE_YOUR_CALM", sent, code)
	}
	t.Logf("cut after %d late resets", sent)
	waitFor(t, "the abuse counted", func() bool { return e.totals.Snapshot().ClientAbuse == 1 })
	// h2Abuse counts the verdict before it penalises the address: wait for both.
	waitFor(t, "the flooding address penalised", func() bool {
		ok, _ := e.srv.penalties.Penalized(netip.MustParseAddr("127.0.0.1"))
		return ok
	})
}

// lateResetFlood makes up to n requests on p, each reset by the client once its answer
// is complete, until the proxy sends a GOAWAY or the connection ends; it returns how
// many it reset and the GOAWAY's code (0xff: none came).
func lateResetFlood(p *h2RawPeer, n int) (sent int, code http2.ErrCode) {
	code = 0xff
	for id := uint32(1); sent < n; id += 2 {
		if p.get(id, "app.example.test") != nil {
			return sent, code
		}
		for {
			f, err := p.next()
			if err != nil {
				return sent, code
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				return sent, g.ErrCode
			}
			if f.Header().StreamID == id && f.Header().Flags.Has(http2.FlagDataEndStream) {
				break
			}
		}
		if p.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
			return sent, code
		}
		sent++
	}
	return sent, code
}
