package h2

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// Config are a connection's limits and timeouts. Zero values mean the defaults below.
type Config struct {
	// MaxConcurrentStreams is advertised and enforced (default 128). A stream counts
	// until its handler has returned, even after a reset.
	MaxConcurrentStreams uint32
	// MaxHeaderBytes bounds a decoded header list (names, values and 32 bytes per field,
	// RFC 9113 §6.5.2); default 64 KiB. A larger request head is answered 431.
	MaxHeaderBytes uint32
	// StreamWindow and ConnWindow are the receive windows for request bodies (default
	// 1 MiB and 4 MiB): what one stream and the whole connection may have buffered.
	StreamWindow, ConnWindow int32
	// StreamBuffer bounds response bytes queued per stream before Stream.Write waits for
	// the writer (default 64 KiB); a stream queues no more than its flow-control window
	// (and the connection's) allows, or 16 KiB when that is less.
	StreamBuffer int
	// WriteBufferSize is the connection's write buffer (default 32 KiB), kept while the
	// connection has streams and returned to a pool when it has none.
	WriteBufferSize int
	// PrefaceTimeout bounds receiving the client preface and its SETTINGS (default 10s).
	PrefaceTimeout time.Duration
	// HeaderTimeout bounds one header block (HEADERS and its CONTINUATION frames) from
	// its first byte (default 10s): a head dribbled out a byte or an empty CONTINUATION
	// at a time ends the connection.
	HeaderTimeout time.Duration
	// IdleTimeout closes a connection without streams for this long (default 120s).
	IdleTimeout time.Duration
	// ReadIdleTimeout sends a PING when nothing was read for this long; PingTimeout
	// closes the connection when nothing arrives after it (defaults 30s and 15s).
	ReadIdleTimeout, PingTimeout time.Duration
	// WriteTimeout bounds write progress (default 30s): a socket write that does not
	// complete within it closes the connection; a Stream.Write that cannot queue within
	// it (the client keeps the stream's window shut) resets the stream.
	WriteTimeout time.Duration
	// BodyTimeout bounds a Stream.Read waiting for request body bytes (default 30s);
	// then the stream is reset.
	BodyTimeout time.Duration
	// MaxQueuedControl caps control frames (SETTINGS and PING acknowledgements,
	// RST_STREAM, WINDOW_UPDATE) waiting for the writer (default 5000); a client that
	// provokes more without reading is disconnected. It is above JunkBurst, so that a
	// client that reads is stopped by the junk budget, with a GOAWAY, first.
	MaxQueuedControl int
	// ResetBurst and ResetRate bound stream resets, sent or received, refused streams
	// and request heads over MaxHeaderBytes (each counts as oversizeHeadResets): a bucket of ResetBurst tokens refilled at ResetRate per second (defaults
	// 2*MaxConcurrentStreams and 100). When empty the connection ends with
	// ENHANCE_YOUR_CALM (CVE-2023-44487, CVE-2025-8671).
	//
	// A reset the client sends costs one token whenever it arrives: while the stream's
	// handler works, after it returned, or after the stream closed (lateframes.go). So
	// does the first frame that arrives on a stream after the engine reset it (request
	// trailers or body in flight, ignored as RFC 9113 §5.1 says), and a request above
	// the last stream id of a GOAWAY the engine sent (ignored, RFC 9113 §6.8; a request
	// head over MaxHeaderBytes costs oversizeHeadResets wherever it goes). A browser sends at
	// most one such frame per stream, when a cancel crosses the answer, and never has
	// more than MaxConcurrentStreams streams to cancel at once: the default burst is
	// every stream cancelled twice in a row, the rate far above any page's cancels.
	// Without this, HEADERS then RST_STREAM after the answer cost the client nothing
	// while every stream was a full request to the target (issue 25).
	ResetBurst, ResetRate int
	// JunkBurst and JunkRate bound frames that make no progress (PING, SETTINGS,
	// PRIORITY, empty DATA, unknown types), likewise (defaults 1000 and 500 per second).
	JunkBurst, JunkRate int
	// MaxStreams is how many streams a connection may open in all (default 1000, as
	// nginx's keepalive_requests). The stream that reaches it is served, and with it
	// goes a GOAWAY(NO_ERROR) naming it as the last: later streams are ignored (RFC 9113
	// §6.8), the streams in progress finish, then the connection closes. An honest
	// client reconnects; a flood over pre-opened connections loses its lever, since a
	// new connection meets the listener's checks (the caller's penalty) again.
	MaxStreams uint32
	// OnAbuse, when set, is told once, from the read loop, that the connection is being
	// ended for abuse (a budget above exhausted: GOAWAY ENHANCE_YOUR_CALM), with a fixed
	// text saying which. The engine's budgets are per connection and a client can
	// reconnect; the caller, which knows the listener and the client's address, can make
	// the verdict outlive the connection (proxy: a penalty per client address).
	OnAbuse func(nc net.Conn, reason string)
	// OnPanic, when set, is told about a handler that panicked (its stream was reset with
	// INTERNAL_ERROR) instead of the panic going on and ending the process.
	OnPanic func(v any, stack []byte)
	// ParkAfter, when positive, parks a connection that had no stream and nothing to
	// write for this long (park.go): Serve or Resume returns ErrParked, and the
	// connection holds no goroutine and no buffer until the caller calls Resume. Zero:
	// connections never park.
	ParkAfter time.Duration
	// ParkSoon, when positive and shorter than ParkAfter, replaces it for an idle period
	// that began while Crowded reported true (the caller's measure of how many
	// goroutines wait at once: each idle connection that has not parked holds two).
	ParkSoon time.Duration
	Crowded  func() bool
	// AwakeMax, when positive, lets a connection whose client keeps a pace (park.Pace:
	// the gaps between the starts of its busy periods) wait awake for twice its longer
	// recent gap plus ParkSoon, up to AwakeMax, before it parks, whatever ParkAfter and
	// ParkSoon say: a request in the pace then finds it awake instead of paying a park
	// and a wake.
	AwakeMax time.Duration
	// EncoderTableSize is the response encoder's HPACK dynamic table (default 4096, the
	// most RFC 7541 allows without the client's leave, and the client's
	// SETTINGS_HEADER_TABLE_SIZE lowers it further). A smaller table costs bytes on the
	// wire and saves per-connection memory; -1 means none (0 is the default).
	EncoderTableSize int
	// EnableConnectProtocol advertises SETTINGS_ENABLE_CONNECT_PROTOCOL and accepts
	// extended CONNECT (RFC 8441) requests.
	EnableConnectProtocol bool
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defInt := func(d *int, v int) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = 128
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 64 << 10
	}
	if c.StreamWindow < initialWindow {
		c.StreamWindow = 1 << 20
	}
	if c.ConnWindow < initialWindow {
		c.ConnWindow = 4 << 20
	}
	defInt(&c.StreamBuffer, 64<<10)
	if c.EncoderTableSize == 0 || c.EncoderTableSize > defaultEncoderTable {
		c.EncoderTableSize = defaultEncoderTable
	}
	defInt(&c.WriteBufferSize, defaultWriteBuffer)
	def(&c.PrefaceTimeout, 10*time.Second)
	def(&c.HeaderTimeout, 10*time.Second)
	def(&c.IdleTimeout, 120*time.Second)
	def(&c.ReadIdleTimeout, 30*time.Second)
	def(&c.PingTimeout, 15*time.Second)
	def(&c.WriteTimeout, 30*time.Second)
	def(&c.BodyTimeout, 30*time.Second)
	defInt(&c.MaxQueuedControl, 5000)
	defInt(&c.ResetBurst, 2*int(c.MaxConcurrentStreams))
	defInt(&c.ResetRate, 100)
	defInt(&c.JunkBurst, 1000)
	defInt(&c.JunkRate, 500)
	if c.MaxStreams == 0 {
		c.MaxStreams = 1000
	}
}

const (
	initialWindow   = 65535 // RFC 9113 §6.9.2
	maxWindow       = 1<<31 - 1
	defaultMaxFrame = 16384
	// defaultEncoderTable is HPACK's initial dynamic table size (RFC 7541 §4.2).
	defaultEncoderTable = 4096
)

// Errors a handler sees from Stream methods.
var (
	// ErrStreamReset: the stream was reset, by the client or by the engine.
	ErrStreamReset = errors.New("h2: stream reset")
	// ErrMalformedBody: the engine reset the stream with PROTOCOL_ERROR because its DATA
	// did not add up to its content-length (a malformed request, RFC 9113 §8.1.1). It
	// is an ErrStreamReset too (errors.Is).
	ErrMalformedBody = fmt.Errorf("%w: its DATA differ from its content-length", ErrStreamReset)
	// ErrConnClosed: the connection is gone.
	ErrConnClosed = errors.New("h2: connection closed")
	// ErrWriteStalled: the client kept the stream's window shut for WriteTimeout.
	ErrWriteStalled = errors.New("h2: client did not take response data in time")
	// ErrBodyTimeout: the client sent no request body bytes for BodyTimeout.
	ErrBodyTimeout = errors.New("h2: request body stalled")
	// ErrResponseDone: a write after Close or Reset.
	ErrResponseDone = errors.New("h2: response already complete")
	// ErrReadClosed: Read after CloseRead.
	ErrReadClosed = errors.New("h2: request body reading closed by the handler")
)
