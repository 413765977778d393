package relaysim

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/serve-zone/ingress/relay"
)

// Fault injection for reliability tests: a relay that answers with errors of its choosing,
// sends frames no peer should send, or dies without a closing handshake.

// FrameFault is what a faulty session sends instead of speaking the protocol.
type FrameFault int

const (
	// FrameGarbage answers the ingress's first message with frames that are no envelope
	// (binary junk, text that is no JSON, a cut-off envelope, an envelope of an unknown
	// type), then closes the socket with status 1002 (protocol error).
	FrameGarbage FrameFault = iota + 1
	// FrameOversized answers the first message with one text frame of OversizedBytes,
	// larger than any message the ingress accepts.
	FrameOversized
)

// OversizedBytes is the size of FrameOversized's frame: one byte over relay's default
// message limit.
const OversizedBytes = relay.DefaultMaxMessageBytes + 1

// SetFrameFault makes the next count sessions (count < 0: until cleared, 0 clears) be
// served by fault instead of the protocol. Calls they carry are not recorded.
func (s *Server) SetFrameFault(fault FrameFault, count int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frameFault = set(fault, count)
}

// FailCalls answers the next count calls of method (count < 0: until cleared, 0 clears)
// with an error envelope carrying text and data as given (data nil: {}), so tests can
// make the relay echo anything back, secrets included.
func (s *Server) FailCalls(method, text string, data json.RawMessage, count int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if count == 0 {
		delete(s.fails, method)
		return
	}
	if data == nil {
		data = json.RawMessage(`{}`)
	}
	s.fails[method] = set(&relay.RemoteError{Text: text, Data: append(json.RawMessage(nil), data...)}, count)
}

// Kill stops the relay as a crash would: the listener closes and every connection,
// sessions included, is reset without a closing handshake. It waits for every session
// goroutine, like Close; the Server cannot start again (start a new one on the same
// address).
func (s *Server) Kill() error {
	s.mu.Lock()
	s.closed = true
	srv := s.httpSrv
	conns := make([]net.Conn, 0, len(s.raw))
	for c := range s.raw {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	var err error
	if srv != nil {
		err = srv.Close() // the listener and connections not hijacked
	}
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
	s.cancel()
	s.wg.Wait()
	return err
}

type rawConnKey struct{}

// connContext remembers each accepted TCP connection so that Kill can reset it after the
// WebSocket upgrade hijacked it.
func (s *Server) connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, rawConnKey{}, c)
}

// trackRaw records r's TCP connection for Kill until the returned func is called.
func (s *Server) trackRaw(r *http.Request) func() {
	c, ok := r.Context().Value(rawConnKey{}).(net.Conn)
	if !ok {
		return func() {}
	}
	s.mu.Lock()
	s.raw[c] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.raw, c)
		s.mu.Unlock()
	}
}

// serveFrameFault runs one faulty session on an accepted socket.
func (s *Server) serveFrameFault(w http.ResponseWriter, r *http.Request, fault FrameFault) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(-1)
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	if _, _, err := c.Read(ctx); err != nil {
		return
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	switch fault {
	case FrameGarbage:
		for _, f := range []struct {
			typ  websocket.MessageType
			data string
		}{
			{websocket.MessageBinary, "\x00\xff\xfe garbage \x01"},
			{websocket.MessageText, "this is no JSON"},
			{websocket.MessageText, `{"type":"answer","correlation":{"id":`},
			{websocket.MessageText, `{"type":"no-such-type","method":"registerClusterIngress"}`},
			{websocket.MessageText, `[1,2,3]`},
		} {
			if c.Write(wctx, f.typ, []byte(f.data)) != nil {
				return
			}
		}
		_ = c.Close(websocket.StatusProtocolError, "relaysim: garbage sent")
		return
	case FrameOversized:
		big := make([]byte, OversizedBytes)
		for i := range big {
			big[i] = 'x'
		}
		if c.Write(wctx, websocket.MessageText, big) != nil {
			return
		}
	}
	// Silent until the ingress closes the socket (or the relay stops).
	for {
		if _, _, err := c.Read(ctx); err != nil {
			return
		}
	}
}
