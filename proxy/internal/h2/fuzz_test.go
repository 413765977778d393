package h2

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FuzzEngine feeds arbitrary bytes after the client preface to a connection: whatever
// they are, the engine must not panic, and Serve must return (every handler with it)
// once the client has hung up. Seeds are valid conversations: requests with and
// without bodies, trailers, resets, window updates, pings.
func FuzzEngine(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		cli, srv := net.Pipe()
		c := NewConn(srv, Config{PrefaceTimeout: time.Second, WriteTimeout: time.Second, BodyTimeout: time.Second}, echoHandler)
		done := make(chan error, 1)
		go func() { done <- c.Serve(context.Background()) }()
		go func() { _, _ = io.Copy(io.Discard, cli) }()
		_ = cli.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = cli.Write([]byte(http2.ClientPreface))
		_, _ = cli.Write(in)
		cli.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return after the client hung up")
		}
	})
}

func fuzzSeeds() [][]byte {
	var seeds [][]byte
	conv := func(write func(fr *http2.Framer, enc func(...string) []byte)) {
		var b bytes.Buffer
		var hb bytes.Buffer
		henc := hpack.NewEncoder(&hb)
		enc := func(kv ...string) []byte {
			hb.Reset()
			for i := 0; i+1 < len(kv); i += 2 {
				_ = henc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
			}
			return bytes.Clone(hb.Bytes())
		}
		fr := http2.NewFramer(&b, nil)
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
		write(fr, enc)
		seeds = append(seeds, b.Bytes())
	}
	req := []string{":method", "GET", ":scheme", "https", ":authority", "a.example", ":path", "/"}
	post := []string{":method", "POST", ":scheme", "https", ":authority", "a.example", ":path", "/p", "content-length", "5"}
	conv(func(fr *http2.Framer, enc func(...string) []byte) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(req...), EndStream: true, EndHeaders: true})
	})
	conv(func(fr *http2.Framer, enc func(...string) []byte) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(post...), EndHeaders: true})
		_ = fr.WriteData(1, false, []byte("hel"))
		_ = fr.WriteData(1, true, []byte("lo"))
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: enc(req...), EndStream: true, EndHeaders: true})
		_ = fr.WritePing(false, [8]byte{1})
	})
	conv(func(fr *http2.Framer, enc func(...string) []byte) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(":method", "PUT", ":scheme", "http", ":authority", "a", ":path", "/t"), EndHeaders: true})
		_ = fr.WriteData(1, false, []byte("abc"))
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc("x-trailer", "1"), EndStream: true, EndHeaders: true})
		_ = fr.WriteWindowUpdate(0, 1000)
		_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
	})
	conv(func(fr *http2.Framer, enc func(...string) []byte) {
		block := enc(req...)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:3], EndStream: true})
		_ = fr.WriteContinuation(1, true, block[3:])
		_ = fr.WritePriority(3, http2.PriorityParam{StreamDep: 1, Weight: 10})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: enc(":method", "CONNECT", ":protocol", "websocket", ":scheme", "https", ":authority", "a", ":path", "/ws"), EndHeaders: true})
		_ = fr.WriteData(5, false, []byte{0x81, 0x80, 1, 2, 3, 4})
		_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	})
	return seeds
}
