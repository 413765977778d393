package h2

import (
	"io"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestFullDuplexWaits: a handler that waits in Write for the client's window while
// another goroutine of it waits in Read for the request body (a full-duplex stream, or
// a request body still being sent when the answer starts) gets both wake-ups: the
// WINDOW_UPDATE lets the Write go on, the DATA the Read, whichever waiter the engine
// signals first.
func TestFullDuplexWaits(t *testing.T) {
	const respLen = 100_000 // beyond the initial 65,535-byte window
	wrote := make(chan error, 1)
	read := make(chan string, 1)
	h := HandlerFunc(func(st *Stream) {
		go func() {
			b, err := io.ReadAll(st)
			if err != nil {
				read <- "error: " + err.Error()
				return
			}
			read <- string(b)
		}()
		if err := st.WriteHead(200, nil, nil, false); err != nil {
			wrote <- err
			return
		}
		_, err := st.Write(make([]byte, respLen))
		body := <-read // the handler owns its reader: it returns after it
		read <- body
		if err == nil {
			err = st.Close(nil)
		}
		wrote <- err
	})
	ts := startServer(t, Config{}, h, false)
	p := newPeer(t, ts)
	p.headers(1, false, [2]string{":method", "POST"}, [2]string{":scheme", "http"}, [2]string{":authority", "a.example"}, [2]string{":path", "/"})
	// Take what the initial window lets out: the writer then waits for a window.
	got := 0
	for got < 65535 {
		f, err := p.next()
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := f.(*http2.DataFrame); ok && d.StreamID == 1 {
			got += len(d.Data())
		}
	}
	// Both wait now. A window for the writer first, then the body for the reader.
	time.Sleep(50 * time.Millisecond) // part of the test: both goroutines get to their waits
	_ = p.fr.WriteWindowUpdate(0, respLen)
	_ = p.fr.WriteWindowUpdate(1, respLen)
	_ = p.fr.WriteData(1, true, []byte("body"))
	for got < respLen {
		f, err := p.next()
		if err != nil {
			t.Fatalf("after %d response bytes: %v", got, err)
		}
		if d, ok := f.(*http2.DataFrame); ok && d.StreamID == 1 {
			got += len(d.Data())
		}
	}
	if err := <-wrote; err != nil {
		t.Fatalf("Write: %v", err)
	}
	if b := <-read; b != "body" {
		t.Fatalf("Read: %q", b)
	}
}
