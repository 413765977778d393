package floodtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Held bodies (issue 33, item 3): clients from many addresses that each send the start of
// request bodies and then wait, so that a server that holds bodies before it chooses a
// target holds them all. Over h2c each connection opens Streams POSTs and sends Body
// bytes of each, obeying the server's flow control; over HTTP/1.1 each connection sends
// one POST's head and Body bytes. Every request announces a Content-Length above Body,
// so none of them ends.

// HoldSpec is one held-bodies run.
type HoldSpec struct {
	// Addr is the server's plain listener; Host its route.
	Addr, Host string
	// From are the source addresses; Conns connections are opened from each.
	From  []net.IP
	Conns int
	// H2 speaks h2c with prior knowledge, Streams requests per connection; else
	// HTTP/1.1, one request per connection.
	H2      bool
	Streams int
	// Body bytes are sent of each request, whose Content-Length is Length.
	Body, Length int
}

// Holders are the clients of a held-bodies run.
type Holders struct {
	spec HoldSpec
	// Sent counts requests whose Body bytes were all written; Refused those the
	// server refused (REFUSED_STREAM or a 503 answer), Answered those it answered
	// otherwise, Failed the connections that could not be opened or ended early.
	Sent, Refused, Answered, Failed atomic.Int64

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// Hold opens spec's connections and sends their requests on goroutines of their own; it
// returns at once. Close ends them.
func Hold(ctx context.Context, spec HoldSpec) *Holders {
	h := &Holders{spec: spec}
	for _, from := range spec.From {
		for range spec.Conns {
			h.wg.Go(func() {
				if err := h.one(ctx, from); err != nil {
					h.Failed.Add(1)
				}
			})
		}
	}
	return h
}

// Requests is how many requests the run makes in all.
func (h *Holders) Requests() int64 {
	n := int64(len(h.spec.From) * h.spec.Conns)
	if h.spec.H2 {
		n *= int64(h.spec.Streams)
	}
	return n
}

// Settled reports whether every request was sent, refused or answered, or its
// connection failed.
func (h *Holders) Settled() bool {
	per := int64(1)
	if h.spec.H2 {
		per = int64(h.spec.Streams)
	}
	return h.Sent.Load()+h.Refused.Load()+h.Answered.Load()+h.Failed.Load()*per >= h.Requests()
}

func (h *Holders) String() string {
	return fmt.Sprintf("%d requests: %d bodies sent and waiting, %d refused, %d answered, %d connections failed",
		h.Requests(), h.Sent.Load(), h.Refused.Load(), h.Answered.Load(), h.Failed.Load())
}

// Close closes every connection and waits for the clients' goroutines.
func (h *Holders) Close() {
	h.mu.Lock()
	for _, c := range h.conns {
		c.Close()
	}
	h.conns = nil
	h.mu.Unlock()
	h.wg.Wait()
}

// one is one connection: it returns once the server or Close ended it.
func (h *Holders) one(ctx context.Context, from net.IP) error {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from}, Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", h.spec.Addr)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.conns = append(h.conns, c)
	h.mu.Unlock()
	defer c.Close()
	if h.spec.H2 {
		return h.h2(c)
	}
	return h.h1(c)
}

// h1 sends one POST's head and Body bytes and waits for an answer or the end.
func (h *Holders) h1(c net.Conn) error {
	head := "POST /held HTTP/1.1\r\nHost: " + h.spec.Host + "\r\nContent-Length: " + strconv.Itoa(h.spec.Length) + "\r\n\r\n"
	if _, err := c.Write(append([]byte(head), bytes.Repeat([]byte("b"), h.spec.Body)...)); err != nil {
		return err
	}
	h.Sent.Add(1)
	var b [512]byte
	n, _ := io.ReadAtLeast(c, b[:], 12)
	switch {
	case n >= 12 && string(b[9:12]) == "503":
		h.Refused.Add(1)
	case n >= 12:
		h.Answered.Add(1)
	}
	_, _ = io.Copy(io.Discard, c)
	return nil
}

// h2 opens Streams POSTs over c (h2c with prior knowledge), sends Body bytes of each
// within the server's windows, and reads until the connection ends.
func (h *Holders) h2(c net.Conn) error {
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return err
	}
	if err := fr.WriteSettings(); err != nil {
		return err
	}
	var (
		mu       sync.Mutex
		cond     = sync.Cond{L: &mu}
		connWin  = int64(65535)
		initWin  = int64(65535)
		settled  bool
		ended    bool
		maxFrame = 16384
		left     = make(map[uint32]int)   // body bytes still to send, by stream
		win      = make(map[uint32]int64) // send window, by stream
	)
	ids := make([]uint32, h.spec.Streams)
	for i := range ids {
		ids[i] = uint32(2*i + 1)
		left[ids[i]] = h.spec.Body
	}
	readErr := make(chan error, 1)
	go func() {
		err := func() error {
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					return err
				}
				mu.Lock()
				switch f := f.(type) {
				case *http2.SettingsFrame:
					if !f.IsAck() {
						if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
							for id := range win {
								win[id] += int64(v) - initWin
							}
							initWin = int64(v)
						}
						if v, ok := f.Value(http2.SettingMaxFrameSize); ok {
							maxFrame = min(int(v), 16384) // the frames written are 16 KiB at most
						}
						settled = true
					}
				case *http2.WindowUpdateFrame:
					if f.StreamID == 0 {
						connWin += int64(f.Increment)
					} else {
						win[f.StreamID] += int64(f.Increment)
					}
				case *http2.RSTStreamFrame:
					if left[f.StreamID] >= 0 {
						if f.ErrCode == http2.ErrCodeRefusedStream {
							h.Refused.Add(1)
						} else {
							h.Answered.Add(1)
						}
					}
					left[f.StreamID] = -1
				case *http2.MetaHeadersFrame:
					if left[f.StreamID] >= 0 {
						if f.PseudoValue("status") == "503" {
							h.Refused.Add(1)
						} else {
							h.Answered.Add(1)
						}
					}
					left[f.StreamID] = -1
				case *http2.GoAwayFrame:
					ended = true
				}
				cond.Broadcast()
				mu.Unlock()
			}
		}()
		mu.Lock()
		ended = true
		cond.Broadcast()
		mu.Unlock()
		readErr <- err
	}()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	data := bytes.Repeat([]byte("b"), 16384)
	mu.Lock()
	for !settled && !ended {
		cond.Wait()
	}
	for _, id := range ids {
		win[id] += initWin
	}
	mu.Unlock()
	for _, id := range ids {
		hb.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", h.spec.Host}, {":path", "/held"},
			{"content-length", strconv.Itoa(h.spec.Length)}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			return err
		}
	}
	for {
		mu.Lock()
		sent, pending := false, false
		for _, id := range ids {
			n := min(left[id], maxFrame, int(min(win[id], connWin)))
			if left[id] > 0 {
				pending = true
			}
			if n <= 0 {
				continue
			}
			left[id] -= n
			win[id] -= int64(n)
			connWin -= int64(n)
			done := left[id] == 0
			mu.Unlock()
			if err := fr.WriteData(id, false, data[:n]); err != nil {
				return err
			}
			if done {
				h.Sent.Add(1)
			}
			mu.Lock()
			sent = true
		}
		if !pending || ended {
			mu.Unlock()
			break
		}
		if !sent {
			cond.Wait()
		}
		mu.Unlock()
	}
	<-readErr // the server or Close ended the connection
	return nil
}
