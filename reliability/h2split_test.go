package reliability

import (
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/internal/binarytest"
)

// h2Status reads a's frames until the response head of stream id and returns its
// :status; a GOAWAY, a reset of id or the connection's end fails the test.
func h2Status(t *testing.T, a *h2Attacker, id uint32) string {
	t.Helper()
	for {
		f, err := a.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the answer to stream %d: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := a.fr.WriteSettingsAck(); err != nil {
					t.Fatal(err)
				}
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				t.Fatalf("stream %d reset: %v", id, f.ErrCode)
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				return f.PseudoValue("status")
			}
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v while waiting for stream %d", f.ErrCode, id)
		}
	}
}

// TestSplitHeaderBlockAfterPark (issue 33, item 4): an idle h2c connection parks after
// 2 s; a request whose header block is split over HEADERS and a CONTINUATION that comes
// 600 ms later (after the 250 ms read deadline the HEADERS' wake-up arms) is answered,
// as nginx answers it: a header block is bounded by --read-header-timeout, not by the
// park's wake-up. (The waits are lower bounds of the binary's own deadlines: a loaded
// machine only makes the CONTINUATION later still, which is what the test wants.)
func TestSplitHeaderBlockAfterPark(t *testing.T) {
	const host = "split.rel.test"
	p, _ := standalone(t, binarytest.TableJSON(t, 1, nil, binarytest.Route(host, "", false, echoBackend(t, "split"))))
	a, err := dialH2(net.IPv4(127, 0, 0, 72), p.HTTP, "", false)
	if err != nil {
		t.Fatal(err)
	}
	defer a.c.Close()
	a.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	_ = a.c.SetDeadline(time.Now().Add(4 * waitLimit))
	block := a.headers(getFields(host, "/first")...)
	if err := a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if st := h2Status(t, a, 1); st != "200" {
		t.Fatalf("first request: status %s", st)
	}
	time.Sleep(3 * time.Second) // idle past the park (2 s after the stream ended)
	head := a.headers(":method", "GET", ":scheme", "http")
	rest := a.headers(":authority", host, ":path", "/split")
	if err := a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: head, EndStream: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // past the resumed connection's 250 ms wake-up
	if err := a.fr.WriteContinuation(3, true, rest); err != nil {
		t.Fatal(err)
	}
	if st := h2Status(t, a, 3); st != "200" {
		t.Fatalf("split header block after a park: status %s", st)
	}
}
