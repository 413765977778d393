package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h1 is an HTTP/1.1 keep-alive connection (plain or TLS) with a minimal client: one
// request written at once, the answer read by its Content-Length, so that the load side
// spends little per request.
type h1 struct {
	c       net.Conn
	br      *bufio.Reader
	req     []byte
	timeout time.Duration
}

func newH1(c net.Conn, cfg *config) *h1 {
	return &h1{c: c, br: bufio.NewReaderSize(c, 16<<10), timeout: cfg.timeout,
		req: []byte("GET " + cfg.path + " HTTP/1.1\r\nHost: " + cfg.host + "\r\nUser-Agent: thinkload\r\n\r\n")}
}

func (h *h1) Close() error { return h.c.Close() }

// errClosed: the answer came whole, and the proxy ends the connection after it
// (Connection: close, GOAWAY); the request counts as answered, and a new connection is
// opened for the next.
var errClosed = errors.New("thinkload: the proxy closed the connection after its answer")

func (h *h1) get() error {
	_ = h.c.SetDeadline(time.Now().Add(h.timeout))
	if _, err := h.c.Write(h.req); err != nil {
		return err
	}
	line, err := h.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		return fmt.Errorf("thinkload: %q", bytes.TrimSpace(line))
	}
	length, closing := -1, false
	for {
		line, err := h.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return fmt.Errorf("thinkload: bad field line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return fmt.Errorf("thinkload: bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Connection")) && bytes.EqualFold(value, []byte("close")):
			closing = true
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return errors.New("thinkload: a chunked answer (the target sends Content-Length)")
		}
	}
	if length < 0 {
		return errors.New("thinkload: an answer without Content-Length")
	}
	if _, err := h.br.Discard(length); err != nil {
		return err
	}
	if closing {
		return errClosed
	}
	return nil
}

// h2 is an HTTP/2 connection with one stream at a time: HEADERS with END_STREAM, then
// frames until the stream's END_STREAM, answering SETTINGS and PING on the way. The
// windows are opened wide at the start and the connection's topped up as data comes.
type h2 struct {
	c        net.Conn
	bw       *bufio.Writer
	fr       *http2.Framer
	enc      *hpack.Encoder
	hbuf     bytes.Buffer
	next     uint32
	consumed uint32
	goaway   bool // the server sent GOAWAY: the stream in flight is the last
	cfg      *config
}

const h2Window = 1 << 30

func newH2(c net.Conn, cfg *config) (*h2, error) {
	h := &h2{c: c, bw: bufio.NewWriterSize(c, 4<<10), next: 1, cfg: cfg}
	h.fr = http2.NewFramer(h.bw, bufio.NewReaderSize(c, 16<<10))
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.enc = hpack.NewEncoder(&h.hbuf)
	if _, err := h.bw.WriteString(http2.ClientPreface); err != nil {
		return nil, err
	}
	if err := h.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2Window},
		http2.Setting{ID: http2.SettingEnablePush, Val: 0}); err != nil {
		return nil, err
	}
	if err := h.fr.WriteWindowUpdate(0, h2Window-65535); err != nil {
		return nil, err
	}
	return h, h.bw.Flush()
}

func (h *h2) Close() error { return h.c.Close() }

func (h *h2) get() error {
	_ = h.c.SetDeadline(time.Now().Add(h.cfg.timeout))
	id := h.next
	h.next += 2
	h.hbuf.Reset()
	for _, f := range [...]hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: h.cfg.host}, {Name: ":path", Value: h.cfg.path}, {Name: "user-agent", Value: "thinkload"}} {
		_ = h.enc.WriteField(f)
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hbuf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		return err
	}
	if err := h.bw.Flush(); err != nil {
		return err
	}
	status := ""
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return err
		}
		end := false
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				err = h.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				err = h.fr.WritePing(true, f.Data)
			}
		case *http2.GoAwayFrame:
			if f.LastStreamID < id {
				return fmt.Errorf("thinkload: GOAWAY %v before stream %d", f.ErrCode, id)
			}
			h.goaway = true
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return fmt.Errorf("thinkload: RST_STREAM %v", f.ErrCode)
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				if status == "" {
					status = f.PseudoValue("status")
				}
				end = f.StreamEnded()
			}
		case *http2.DataFrame:
			if n := uint32(f.Length); n > 0 {
				h.consumed += n
				if h.consumed >= 1<<20 {
					err = h.fr.WriteWindowUpdate(0, h.consumed)
					h.consumed = 0
				}
			}
			end = f.StreamID == id && f.StreamEnded()
		}
		if err == nil && h.bw.Buffered() > 0 {
			err = h.bw.Flush()
		}
		if err != nil {
			return err
		}
		if end {
			if status != "200" {
				return fmt.Errorf("thinkload: status %q", status)
			}
			if h.goaway {
				return errClosed
			}
			return nil
		}
	}
}

var _ io.Closer = (*h2)(nil)
