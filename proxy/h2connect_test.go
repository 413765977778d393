package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// extendedConnect opens an RFC 8441 extended CONNECT (":protocol" proto) for host and path
// over a new prior-knowledge h2c connection to addr, speaking frames itself (x/net's
// Framer and hpack): Go's own clients take no ":protocol" field from Go 1.27 on. It waits
// for the server's SETTINGS (which must enable the protocol) before it asks, and
// returns the answer (status, and a body that ends with an error unless the stream ended
// cleanly) and a writer for the tunnel's client-to-server bytes (Close ends the stream).
// extra are field name and value pairs.
func extendedConnect(t *testing.T, addr, host, path, proto string, extra ...string) (*http.Response, io.WriteCloser) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second)) // a hang fails, it does not stall the run
	cl := &h2TestConn{c: c, fr: http2.NewFramer(c, c)}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := cl.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for enabled := false; !enabled; {
		f, err := cl.fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for the server's SETTINGS: %v", err)
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			continue
		}
		v, _ := sf.Value(http2.SettingEnableConnectProtocol)
		if v != 1 {
			t.Fatal("the server does not enable extended CONNECT")
		}
		enabled = true
		if err := cl.fr.WriteSettingsAck(); err != nil {
			t.Fatal(err)
		}
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	fields := []string{":method", "CONNECT", ":protocol", proto, ":scheme", "http", ":path", path, ":authority", host}
	fields = append(fields, extra...)
	for i := 0; i+1 < len(fields); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	status := make(chan int, 1)
	pr, pw := io.Pipe()
	go cl.read(status, pw)
	st, ok := <-status
	if !ok {
		_, err := pr.Read(nil)
		t.Fatalf("no answer to the CONNECT: %v", err)
	}
	res := &http.Response{StatusCode: st, Proto: "HTTP/2.0", ProtoMajor: 2, Body: &h2TestBody{pr, c}}
	return res, &h2TestWriter{cl}
}

// h2TestConn is one client connection of extendedConnect; writes are serialised.
type h2TestConn struct {
	c  net.Conn
	fr *http2.Framer
	mu sync.Mutex
}

func (cl *h2TestConn) write(f func(*http2.Framer) error) error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return f(cl.fr)
}

// read answers the connection's control frames, sends stream 1's status once and its
// DATA into pw, keeping both windows open.
func (cl *h2TestConn) read(status chan<- int, pw *io.PipeWriter) {
	dec := hpack.NewDecoder(4096, nil)
	sent := false
	defer func() {
		if !sent {
			close(status)
		}
	}()
	for {
		f, err := cl.fr.ReadFrame()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // the connection ended, the stream did not
			}
			pw.CloseWithError(err)
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = cl.write(func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = cl.write(func(fr *http2.Framer) error { return fr.WritePing(true, f.Data) })
			}
		case *http2.HeadersFrame:
			if f.StreamID != 1 || sent {
				continue // trailers, or another stream: not used here
			}
			hf, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			for _, h := range hf {
				if h.Name == ":status" {
					n, _ := strconv.Atoi(h.Value)
					status <- n
					sent = true
				}
			}
			if f.StreamEnded() {
				pw.Close()
			}
		case *http2.DataFrame:
			if n := len(f.Data()); n > 0 {
				if _, err := pw.Write(f.Data()); err != nil {
					return
				}
				_ = cl.write(func(fr *http2.Framer) error {
					if err := fr.WriteWindowUpdate(0, uint32(n)); err != nil {
						return err
					}
					return fr.WriteWindowUpdate(1, uint32(n))
				})
			}
			if f.StreamEnded() {
				pw.Close()
			}
		case *http2.RSTStreamFrame:
			pw.CloseWithError(fmt.Errorf("stream reset: %v", f.ErrCode))
			return
		case *http2.GoAwayFrame:
			if f.LastStreamID < 1 {
				pw.CloseWithError(fmt.Errorf("GOAWAY before the stream: %v", f.ErrCode))
				return
			}
		}
	}
}

// h2TestBody is the tunnel's server-to-client side; Close ends the connection.
type h2TestBody struct {
	*io.PipeReader
	c net.Conn
}

func (b *h2TestBody) Close() error {
	b.PipeReader.Close()
	return b.c.Close()
}

// h2TestWriter sends the tunnel's client-to-server bytes as DATA on stream 1.
type h2TestWriter struct{ cl *h2TestConn }

func (w *h2TestWriter) Write(p []byte) (int, error) {
	err := w.cl.write(func(fr *http2.Framer) error { return fr.WriteData(1, false, p) })
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *h2TestWriter) Close() error {
	return w.cl.write(func(fr *http2.Framer) error { return fr.WriteData(1, true, nil) })
}
