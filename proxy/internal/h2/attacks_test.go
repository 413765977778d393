package h2

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/internal/testwait"
)

// Attacks on a real listener. Each one checks what the engine answers and that what
// the attacker made the server hold (handlers, goroutines, queued frames) stayed bounded
// and was released.

// waitFor waits until cond holds, failing after 10 s (testwait.Until).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 10*time.Second, what, cond)
}

// goroutinesBack waits until the goroutine count is back to (about) base.
func goroutinesBack(t testing.TB, base int) {
	t.Helper()
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= base+3 })
}

// stuckHandler counts handlers and holds each until free, ignoring cancellation: a slow
// target the attacker wants to pile work onto.
type stuckHandler struct {
	started, running, peak atomic.Int64
	release                chan struct{}
	once                   sync.Once
}

// newStuck returns a stuck handler that is freed at the latest when the test ends
// (before the server's own cleanup, which waits for the handlers), so that a test that
// fails early does not hang.
func newStuck(t *testing.T) *stuckHandler {
	h := &stuckHandler{release: make(chan struct{})}
	t.Cleanup(h.free)
	return h
}

// free lets every handler, running or to come, return.
func (h *stuckHandler) free() { h.once.Do(func() { close(h.release) }) }

func (h *stuckHandler) ServeH2(st *Stream) {
	h.started.Add(1)
	n := h.running.Add(1)
	for {
		p := h.peak.Load()
		if n <= p || h.peak.CompareAndSwap(p, n) {
			break
		}
	}
	<-h.release
	h.running.Add(-1)
	_ = st.WriteHead(200, nil, nil, true)
}

func get(p *peer, id uint32, end bool) {
	p.t.Helper()
	if err := tryGet(p, id, end); err != nil {
		p.t.Fatal(err)
	}
}

// tryGet is get for floods: a server that hung up on the flood is not a failure.
func tryGet(p *peer, id uint32, end bool) error {
	return p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.block([2]string{":method", "GET"},
		[2]string{":scheme", "http"}, [2]string{":authority", "a.example"}, [2]string{":path", "/"}), EndStream: end, EndHeaders: true})
}

// readUntilGoAway reads in the background until GOAWAY, the connection's end, or done.
func readUntilGoAway(p *peer) <-chan http2.ErrCode {
	ch := make(chan http2.ErrCode, 1)
	go func() {
		for {
			_ = p.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
			f, err := p.fr.ReadFrame()
			if err != nil {
				ch <- 0xff
				return
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				ch <- g.ErrCode
				return
			}
		}
	}()
	return ch
}

// TestRapidReset (CVE-2023-44487): streams opened and reset at once. The handlers they
// started keep their slots until they return, so at most MaxConcurrentStreams run, and
// the resets exhaust the connection's budget: GOAWAY(ENHANCE_YOUR_CALM).
func TestRapidReset(t *testing.T) {
	base := runtime.NumGoroutine()
	h := newStuck(t)
	ts := startServer(t, Config{}, h, false)
	p := newPeer(t, ts)
	goaway := readUntilGoAway(p)
	var sent int
	for id := uint32(1); id < 20000; id += 2 {
		if tryGet(p, id, true) != nil {
			break // the server hung up
		}
		if err := p.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			break // the server hung up
		}
		sent++
	}
	if code := <-goaway; code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("after %d rapid resets: GOAWAY code %v, want ENHANCE_YOUR_CALM", sent, code)
	}
	if peak := h.peak.Load(); peak > 128 {
		t.Fatalf("%d handlers ran at once, want at most 128", peak)
	}
	t.Logf("%d streams sent and reset, %d handlers started, peak %d", sent, h.started.Load(), h.peak.Load())
	h.free()
	p.nc.Close()
	goroutinesBack(t, base)
}

// TestMadeYouReset (CVE-2025-8671): the client makes the server reset streams (here a
// WINDOW_UPDATE overflowing the stream's window) while their handlers work on. The slots
// stay taken until the handlers return, and the provoked resets are charged like
// received ones.
func TestMadeYouReset(t *testing.T) {
	base := runtime.NumGoroutine()
	h := newStuck(t)
	ts := startServer(t, Config{}, h, false)
	p := newPeer(t, ts)
	goaway := readUntilGoAway(p)
	sent := 0
	for id := uint32(1); id < 20000; id += 2 {
		if tryGet(p, id, false) != nil {
			break // the server hung up
		}
		if err := p.fr.WriteWindowUpdate(id, maxWindow); err != nil {
			break
		}
		sent++
	}
	if code := <-goaway; code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("after %d provoked resets: GOAWAY code %v, want ENHANCE_YOUR_CALM", sent, code)
	}
	if peak := h.peak.Load(); peak > 128 {
		t.Fatalf("%d handlers ran at once, want at most 128", peak)
	}
	h.free()
	p.nc.Close()
	goroutinesBack(t, base)
}

// TestStreamsBeyondLimit: a stream beyond MAX_CONCURRENT_STREAMS is refused, and a
// refused stream's handler never starts.
func TestStreamsBeyondLimit(t *testing.T) {
	h := newStuck(t)
	ts := startServer(t, Config{MaxConcurrentStreams: 4}, h, false)
	p := newPeer(t, ts)
	for id := uint32(1); id <= 7; id += 2 {
		get(p, id, true)
	}
	waitFor(t, "4 handlers", func() bool { return h.running.Load() == 4 })
	get(p, 9, true)
	if code := p.expectReset(9); code != http2.ErrCodeRefusedStream {
		t.Fatalf("5th stream reset with %v, want REFUSED_STREAM", code)
	}
	if n := h.started.Load(); n != 4 {
		t.Fatalf("%d handlers started, want 4", n)
	}
	h.free()
	// With the slots free again, a new stream is served.
	answered := map[uint32]bool{}
	for len(answered) < 4 {
		f, err := p.next()
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := f.(*http2.MetaHeadersFrame); ok {
			answered[h.StreamID] = true
		}
	}
	waitFor(t, "handlers to return", func() bool { return h.running.Load() == 0 })
	get(p, 11, true)
	if st := p.expectResponse(11); st != "200" {
		t.Fatalf("status %s", st)
	}
}

// TestContinuationFlood (CVE-2023-45288): a header block that never ends, of empty
// CONTINUATION frames or of ones carrying bytes, ends the connection after a bounded
// amount of input.
func TestContinuationFlood(t *testing.T) {
	for _, frag := range []int{0, 1000} {
		t.Run(map[int]string{0: "empty", 1000: "1000 bytes"}[frag], func(t *testing.T) {
			base := runtime.NumGoroutine()
			ts := startServer(t, Config{MaxHeaderBytes: 16 << 10}, echoHandler, false)
			p := newPeer(t, ts)
			first := p.block([2]string{":method", "GET"}, [2]string{":scheme", "http"}, [2]string{":path", "/"})
			if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first}); err != nil {
				t.Fatal(err)
			}
			// Literal fields without indexing, split across frames.
			chunk := p.block([2]string{"x-pad", strings.Repeat("a", frag)})
			if frag == 0 {
				chunk = nil
			}
			done := make(chan error, 1)
			go func() {
				for i := 0; i < 2_000_000; i++ {
					if err := p.fr.WriteContinuation(1, false, chunk); err != nil {
						done <- nil
						return
					}
				}
				done <- errors.New("the server took 2,000,000 CONTINUATION frames")
			}()
			p.expectClosed()
			p.nc.Close()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			err := <-ts.served
			if err == nil {
				t.Fatal("Serve ended without an error")
			}
			t.Logf("connection ended: %v", err)
			goroutinesBack(t, base)
		})
	}
}

// TestSlowHeaderBlock: a header block dribbled out (an empty CONTINUATION now and then,
// each well within the read timeouts) ends the connection after HeaderTimeout, and the
// stream never reaches a handler.
func TestSlowHeaderBlock(t *testing.T) {
	var reached atomic.Int64
	h := HandlerFunc(func(st *Stream) { reached.Add(1); echoHandler(st) })
	ts := startServer(t, Config{HeaderTimeout: 300 * time.Millisecond}, h, false)
	p := newPeer(t, ts)
	block := p.block([2]string{":method", "GET"}, [2]string{":scheme", "http"}, [2]string{":authority", "a"}, [2]string{":path", "/"})
	if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if p.fr.WriteContinuation(1, false, nil) != nil {
					return
				}
			}
		}
	}()
	if code := p.expectGoAway(); code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", code)
	}
	if err := <-ts.served; err == nil || !strings.Contains(err.Error(), "too slow") {
		t.Fatalf("Serve: %v", err)
	}
	if reached.Load() != 0 {
		t.Fatal("the dribbled request reached the handler")
	}
}

// TestSlowDataFrameNotCut: HeaderTimeout is for header blocks only: a DATA frame that
// arrives slowly (a slow uploader) is served.
func TestSlowDataFrameNotCut(t *testing.T) {
	ts := startServer(t, Config{HeaderTimeout: 100 * time.Millisecond}, echoHandler, false)
	p := newPeer(t, ts)
	p.headers(1, false, [2]string{":method", "POST"}, [2]string{":scheme", "http"}, [2]string{":authority", "a"}, [2]string{":path", "/"})
	var frame bytes.Buffer
	_ = http2.NewFramer(&frame, nil).WriteData(1, true, bytes.Repeat([]byte("d"), 3000))
	b := frame.Bytes()
	for i := 0; i < len(b); i += 1000 {
		if _, err := p.nc.Write(b[i:min(i+1000, len(b))]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond) // the pace of the upload, 4 pieces: longer than HeaderTimeout
	}
	if st := p.expectResponse(1); st != "200" {
		t.Fatalf("status %s", st)
	}
}

// TestHPACKBomb: one large entry in the dynamic table referenced many times decodes to
// far more than MaxHeaderBytes. The request is answered 431 without the handler, the
// connection stays usable.
func TestHPACKBomb(t *testing.T) {
	var reached atomic.Int64
	h := HandlerFunc(func(st *Stream) { reached.Add(1); echoHandler(st) })
	ts := startServer(t, Config{MaxHeaderBytes: 16 << 10}, h, false)
	p := newPeer(t, ts)
	p.hbuf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "a.example"}, {":path", "/"}} {
		_ = p.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	_ = p.henc.WriteField(hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", 4000)}) // indexed: 62
	block := p.hbuf.Bytes()
	for range 2000 {
		block = append(block, 0x80|62) // indexed field 62, 1 byte for 4 KB decoded
	}
	if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if st := p.expectResponse(1); st != "431" {
		t.Fatalf("status %s, want 431", st)
	}
	if reached.Load() != 0 {
		t.Fatal("the handler saw the oversized head")
	}
	// The decoder's state was kept: the next request (reusing the table) is served.
	p.get(3, "/after")
	if st := p.expectResponse(3); st != "200" {
		t.Fatalf("status %s after the bomb", st)
	}
	// A plain header list over the limit is 431 too.
	p.headers(5, true, [2]string{":method", "GET"}, [2]string{":scheme", "http"}, [2]string{":authority", "a.example"},
		[2]string{":path", "/"}, [2]string{"x-big", strings.Repeat("c", 10000)}, [2]string{"x-big2", strings.Repeat("c", 10000)})
	if st := p.expectResponse(5); st != "431" {
		t.Fatalf("status %s, want 431", st)
	}
}

// TestControlFloods: PING, SETTINGS, PRIORITY, WINDOW_UPDATE (beyond two per DATA frame
// sent) and empty DATA floods from a client that
// reads end with GOAWAY(ENHANCE_YOUR_CALM); a PING flood from one that does not read is
// cut off once MaxQueuedControl acknowledgements wait.
func TestControlFloods(t *testing.T) {
	floods := map[string]func(p *peer, i int) error{
		"ping":     func(p *peer, i int) error { return p.fr.WritePing(false, [8]byte{byte(i)}) },
		"settings": func(p *peer, i int) error { return p.fr.WriteSettings() },
		"priority": func(p *peer, i int) error {
			return p.fr.WritePriority(uint32(2*i+1), http2.PriorityParam{Weight: 1})
		},
		"empty data":    func(p *peer, i int) error { return p.fr.WriteData(1, false, nil) },
		"window update": func(p *peer, i int) error { return p.fr.WriteWindowUpdate(0, 1) },
	}
	for name, send := range floods {
		t.Run(name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			h := newStuck(t)
			ts := startServer(t, Config{}, h, false)
			p := newPeer(t, ts)
			goaway := readUntilGoAway(p)
			if name == "empty data" {
				get(p, 1, false)
			}
			code := sendUntilGoAway(goaway, func(i int) error { return send(p, i) })
			switch code {
			case http2.ErrCodeEnhanceYourCalm:
			case 0xff:
				// The connection ended before the GOAWAY was read: the server hangs up
				// on an abuser without draining what it sent, so the kernel resets the
				// connection and may drop the GOAWAY still queued. What the server
				// decided is in what its Serve returned.
				if err := <-ts.served; err == nil || !strings.Contains(err.Error(), "ENHANCE_YOUR_CALM") {
					t.Fatalf("connection closed before a GOAWAY; Serve ended with %v, want ENHANCE_YOUR_CALM", err)
				}
			default:
				t.Fatalf("GOAWAY code %v, want ENHANCE_YOUR_CALM", code)
			}
			h.free()
			p.nc.Close()
			goroutinesBack(t, base)
		})
	}
	t.Run("ping without reading", func(t *testing.T) {
		base := runtime.NumGoroutine()
		ts := startServer(t, Config{MaxQueuedControl: 100, JunkBurst: 1 << 30, JunkRate: 1 << 30, WriteTimeout: time.Minute}, echoHandler, false)
		p := newPeer(t, ts)
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; i < 10_000_000; i++ {
				if p.fr.WritePing(false, [8]byte{}) != nil {
					return
				}
			}
		})
		err := <-ts.served
		if err == nil || !strings.Contains(err.Error(), "queued control frames") {
			t.Fatalf("Serve ended with %v, want the control-queue cap", err)
		}
		p.nc.Close()
		wg.Wait()
		goroutinesBack(t, base)
	})
}

// sendUntilGoAway calls send until it fails or a GOAWAY arrives (at most 1,000,000
// times) and returns the GOAWAY's code.
func sendUntilGoAway(goaway <-chan http2.ErrCode, send func(i int) error) http2.ErrCode {
	for i := 0; i < 1_000_000; i++ {
		if send(i) != nil {
			break
		}
		if i%1000 == 0 {
			select {
			case code := <-goaway:
				return code
			default:
			}
		}
	}
	return <-goaway
}

// TestZeroWindowStall: a client that never opens a stream's window gets that stream
// reset after WriteTimeout, and the handler's Write fails instead of waiting forever;
// meanwhile the stream queued no more than a frame's worth.
func TestZeroWindowStall(t *testing.T) {
	errs := make(chan error, 1)
	var queued atomic.Int64
	h := HandlerFunc(func(st *Stream) {
		if err := st.WriteHead(200, nil, nil, false); err != nil {
			errs <- err
			return
		}
		buf := make([]byte, 32<<10)
		for {
			n, err := st.Write(buf)
			queued.Add(int64(n))
			if err != nil {
				errs <- err
				return
			}
		}
	})
	ts := startServer(t, Config{WriteTimeout: 300 * time.Millisecond}, h, false)
	p := rawPeer(t, ts)
	_, _ = p.nc.Write([]byte(http2.ClientPreface))
	_ = p.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	get(p, 1, true)
	// The head goes (HEADERS are not flow-controlled), then the stalled stream is reset.
	for {
		f, err := p.next()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := f.(*http2.DataFrame); ok {
			t.Fatal("DATA sent into a zero window")
		}
		if rst, ok := f.(*http2.RSTStreamFrame); ok {
			if rst.StreamID != 1 || rst.ErrCode != http2.ErrCodeInternal {
				t.Fatalf("RST_STREAM %d %v, want 1 INTERNAL_ERROR", rst.StreamID, rst.ErrCode)
			}
			break
		}
	}
	if err := <-errs; !errors.Is(err, ErrWriteStalled) {
		t.Fatalf("handler's Write: %v, want ErrWriteStalled", err)
	}
	if n := queued.Load(); n > minStreamBuffer {
		t.Fatalf("%d bytes queued for a stream whose window is shut, want at most %d", n, minStreamBuffer)
	}
	// The connection itself is fine.
	if err := p.fr.WritePing(false, [8]byte{7}); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := p.next()
		if err != nil {
			t.Fatal(err)
		}
		if pf, ok := f.(*http2.PingFrame); ok && pf.IsAck() && pf.Data[0] == 7 {
			break
		}
	}
}

// TestSlowReader: a client that stops reading its socket while it has opened every
// window is cut off by the write timeout; the handlers' writes fail.
func TestSlowReader(t *testing.T) {
	base := runtime.NumGoroutine()
	errs := make(chan error, 8)
	h := HandlerFunc(func(st *Stream) {
		_ = st.WriteHead(200, nil, nil, false)
		buf := make([]byte, 64<<10)
		for {
			if _, err := st.Write(buf); err != nil {
				errs <- err
				return
			}
		}
	})
	ts := startServer(t, Config{WriteTimeout: 300 * time.Millisecond}, h, false)
	p := rawPeer(t, ts)
	_, _ = p.nc.Write([]byte(http2.ClientPreface))
	_ = p.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: maxWindow})
	_ = p.fr.WriteWindowUpdate(0, maxWindow-initialWindow)
	for id := uint32(1); id <= 7; id += 2 {
		get(p, id, true)
	}
	// Nothing is read from here on.
	if err := <-ts.served; err == nil {
		t.Fatal("Serve ended cleanly, want a write timeout")
	}
	for range 4 {
		if err := <-errs; err == nil {
			t.Fatal("a handler's Write succeeded on a dead connection")
		}
	}
	p.nc.Close()
	goroutinesBack(t, base)
}

// TestPrefaceNeverFinished: a client that sends part of the preface and stops is
// closed after PrefaceTimeout; so is one that sends nothing.
func TestPrefaceNeverFinished(t *testing.T) {
	for _, sent := range []string{"", "PRI * HTTP/2.0\r\n"} {
		ts := startServer(t, Config{PrefaceTimeout: 200 * time.Millisecond}, echoHandler, false)
		p := rawPeer(t, ts)
		_, _ = p.nc.Write([]byte(sent))
		p.expectClosed()
		if err := <-ts.served; err == nil {
			t.Fatalf("after %q: Serve ended without an error", sent)
		}
	}
}

// TestGracefulShutdown: GOAWAY(NO_ERROR) with the last stream id, the stream in
// progress completes, a newer stream is ignored, then the connection closes.
func TestGracefulShutdown(t *testing.T) {
	h := newStuck(t)
	ts := startServer(t, Config{}, h, false)
	p := newPeer(t, ts)
	get(p, 1, true)
	waitFor(t, "the handler", func() bool { return h.running.Load() == 1 })
	ts.shutdown()
	for {
		f, err := p.next()
		if err != nil {
			t.Fatal(err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
				t.Fatalf("GOAWAY %v last %d, want NO_ERROR last 1", g.ErrCode, g.LastStreamID)
			}
			break
		}
	}
	get(p, 3, true) // above the last stream id: ignored
	h.free()
	if st := p.expectResponse(1); st != "200" {
		t.Fatalf("status %s", st)
	}
	p.expectClosed()
	if err := <-ts.served; err != nil {
		t.Fatalf("Serve after a drain: %v", err)
	}
	if n := h.started.Load(); n != 1 {
		t.Fatalf("%d handlers started, want 1", n)
	}
}

// TestIdleTimeout: a connection without streams gets GOAWAY and is closed.
func TestIdleTimeout(t *testing.T) {
	ts := startServer(t, Config{IdleTimeout: 200 * time.Millisecond}, echoHandler, false)
	p := newPeer(t, ts)
	p.get(1, "/")
	p.expectResponse(1)
	if code := p.expectGoAway(); code != http2.ErrCodeNo {
		t.Fatalf("GOAWAY %v", code)
	}
	p.expectClosed()
}

// TestReadIdlePing: a silent connection with a stream open is pinged, and closed when
// the PING goes unanswered.
func TestReadIdlePing(t *testing.T) {
	h := HandlerFunc(func(st *Stream) { <-st.Context().Done() })
	ts := startServer(t, Config{ReadIdleTimeout: 100 * time.Millisecond, PingTimeout: 100 * time.Millisecond}, h, false)
	p := newPeer(t, ts)
	get(p, 1, true)
	for {
		f, err := p.next()
		if err != nil {
			t.Fatal(err)
		}
		if pf, ok := f.(*http2.PingFrame); ok && !pf.IsAck() {
			break
		}
	}
	// Not answered: the connection ends.
	_, _ = io.Copy(io.Discard, p.nc)
	if err := <-ts.served; err == nil || !strings.Contains(err.Error(), "PING") {
		t.Fatalf("Serve: %v, want a PING timeout", err)
	}
}
