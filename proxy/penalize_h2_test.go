package proxy

import (
	"io"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestH2PenaltyEndsHeldConns (issue 25, finding 1): when one HTTP/2 connection's flood
// gets its address penalised, the address's other HTTP/2 connections, opened before the
// verdict, are ended too (GOAWAY ENHANCE_YOUR_CALM, then closed): pre-opened
// connections must not keep flooding while the penalty only refuses new ones.
func TestH2PenaltyEndsHeldConns(t *testing.T) {
	e := newEnv(t)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{backend(t, echoInfo())}}})
	held := dialH2RawPeer(t, e.http)
	// One answered request: the held connection is in the server's set.
	if err := held.get(1, "app.example.test"); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := held.next()
		if err != nil {
			t.Fatalf("the held connection's request: %v", err)
		}
		if f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagDataEndStream) {
			break
		}
	}
	// The flood on another connection of the same address: requests reset once answered.
	p := dialH2RawPeer(t, e.http)
	_, code := lateResetFlood(p, 900) // stream ids below 1,800, as before
	if code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("the flood: GOAWAY %v, want ENHANCE_YOUR_CALM", code)
	}
	// The held connection is ended for the verdict (next fails the test after 10 s).
	for {
		f, err := held.next()
		if err != nil {
			t.Fatalf("the held connection closed without GOAWAY ENHANCE_YOUR_CALM: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeEnhanceYourCalm || g.LastStreamID != 1 {
				t.Fatalf("the held connection: GOAWAY %v last %d, want ENHANCE_YOUR_CALM last 1", g.ErrCode, g.LastStreamID)
			}
			break
		}
	}
	for {
		if _, err := held.next(); err != nil {
			break // closed
		}
	}
}

// TestH2PenaltyReachesLateConn: a connection accepted before its address was penalised,
// which sends its HTTP/2 preface only after the verdict (it was in its TLS handshake,
// or slow), is ended as soon as it is an HTTP/2 connection (GOAWAY ENHANCE_YOUR_CALM,
// its request not served): the penalty is checked when the engine takes the connection.
func TestH2PenaltyReachesLateConn(t *testing.T) {
	var served atomic.Int64
	e := newEnv(t)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
	}))}}})
	c := dialRaw(t, e.http)
	// Accepted (a request on another connection afterwards proves the listener got to
	// it: connections are accepted in order).
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + e.http + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, started := e.srv.penalties.Strike(netip.MustParseAddr("127.0.0.1")); !started {
		t.Fatal("no penalty started")
	}
	p := &h2RawPeer{t: t, c: c, fr: http2.NewFramer(c, c)}
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.henc = hpack.NewEncoder(&p.hbuf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := p.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if err := p.get(1, "app.example.test"); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := p.next()
		if err != nil {
			t.Fatalf("closed without GOAWAY ENHANCE_YOUR_CALM: %v", err)
		}
		if _, ok := f.(*http2.MetaHeadersFrame); ok {
			t.Fatal("the penalised address's request was answered")
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", g.ErrCode)
			}
			break
		}
	}
	if n := served.Load(); n != 0 {
		t.Fatalf("the target saw %d requests of the penalised connection", n)
	}
}
