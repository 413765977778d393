package proxy

import (
	"testing"

	"golang.org/x/net/http2"
)

// TestH2PenaltyEndsHeldConns (issue 25, finding 1): when one HTTP/2 connection's flood
// gets its address penalised, the address's other HTTP/2 connections, opened before the
// verdict, are ended too (GOAWAY ENHANCE_YOUR_CALM, then closed): pre-opened
// connections must not keep flooding while the penalty only refuses new ones.
func TestH2PenaltyEndsHeldConns(t *testing.T) {
	e := newEnv(t)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{backend(t, echoInfo())}}})
	held := dialH2Peer(t, e.http)
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
	p := dialH2Peer(t, e.http)
	var code http2.ErrCode = 0xff
flood:
	for id := uint32(1); id < 1800; id += 2 {
		if p.get(id, "app.example.test") != nil {
			break
		}
		for {
			f, err := p.next()
			if err != nil {
				break flood
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				code = g.ErrCode
				break flood
			}
			if f.Header().StreamID == id && f.Header().Flags.Has(http2.FlagDataEndStream) {
				break
			}
		}
		if p.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
			break
		}
	}
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
