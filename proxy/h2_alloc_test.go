package proxy

import (
	"bytes"
	"net"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2AllocLimit guards against regressions of the own HTTP/2 server's allocations per
// forwarded request (client, proxy and target together; the client's share is a frame
// or two). The goal of issue 13 is at most 2; the target side still goes through the
// upstream's http.Request/http.Response round trip, which is most of them.
const h2AllocLimit = 60

// TestH2HotPathAllocs: allocations per request forwarded by the own HTTP/2 server,
// measured through real loopback sockets for the whole process with a client and a
// target that allocate (almost) nothing themselves.
func TestH2HotPathAllocs(t *testing.T) {
	e := newEnv(t, withOwnH2)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{rawTarget(t)}}})
	c, err := net.Dial("tcp", e.http)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fr := http2.NewFramer(c, c)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "app.example.test"}, {":path", "/bench?q=1"}, {"user-agent", "bench"}, {"accept", "*/*"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	first := bytes.Clone(hb.Bytes())
	hb.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "app.example.test"}, {":path", "/bench?q=1"}, {"user-agent", "bench"}, {"accept", "*/*"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}) // now all indexed
	}
	block := bytes.Clone(hb.Bytes())
	_, _ = c.Write([]byte(http2.ClientPreface))
	_ = fr.WriteSettings()
	id := uint32(1)
	var failed error
	do := func() {
		if failed != nil {
			return
		}
		b := block
		if id == 1 {
			b = first
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndStream: true, EndHeaders: true}); err != nil {
			failed = err
			return
		}
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				failed = err
				return
			}
			if f.Header().StreamID == id && f.Header().Flags.Has(http2.FlagDataEndStream) {
				break
			}
			if rst, ok := f.(*http2.RSTStreamFrame); ok {
				failed = http2.StreamError{StreamID: rst.StreamID, Code: rst.ErrCode}
				return
			}
		}
		id += 2
	}
	for range 200 {
		do()
	}
	allocs := testing.AllocsPerRun(2000, do)
	if failed != nil {
		t.Fatal(failed)
	}
	t.Logf("%.1f allocations per request for client, proxy and target together", allocs)
	if allocs > h2AllocLimit {
		t.Errorf("%.1f allocations per request, want at most %d", allocs, h2AllocLimit)
	}
}
