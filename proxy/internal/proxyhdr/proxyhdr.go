// Package proxyhdr reads the PROXY protocol header (versions 1 and 2, as HAProxy's
// proxy-protocol.txt defines them) that a trusted load balancer sends before the first
// byte of a relayed TCP connection, and says whom the connection is for.
//
// The header is read exactly: never a byte past its end, so that what follows (a TLS
// ClientHello, the first HTTP request, both perhaps in the same segment) is still the
// connection's to read, also for a reader that bypasses Go's Read (the proxy's raw
// HTTP/1.1 loop reads the descriptor itself). [Frame] finds where a header ends in the
// bytes seen so far without reading any; [Read] takes exactly those bytes from the
// socket (on Linux it peeks first, MSG_PEEK, as nginx does; elsewhere it reads no more
// than [Frame] says the header still needs); [Parse] decodes them with
// github.com/pires/go-proxyproto (the parser Caddy and Traefik use) and refuses what
// that leaves open (TLVs that overrun the header, datagram address families).
//
// It knows nothing of routes, budgets or listeners. Nothing here is on a request's hot
// path: a connection from a balancer pays one peek, one read and one parse, once.
package proxyhdr

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/pires/go-proxyproto"
)

const (
	// MinLen is the shortest header, version 1's "PROXY UNKNOWN\r\n": no valid header
	// ends before it, so it can be read before anything is known.
	MinLen = 15
	// MaxV1 is the longest version 1 line, CRLF included (the specification's bound).
	MaxV1 = 107
	// MaxV2Payload bounds what a version 2 header may declare after its 16 fixed bytes
	// (addresses and TLVs; go-proxyproto's default limit): a client certificate TLV
	// fits, and a balancer cannot make a connection hold 64 KiB before its first byte.
	MaxV2Payload = 4096

	v2Fixed = 16
)

const (
	sigV1 = "PROXY "
	sigV2 = "\r\n\r\n\x00\r\nQUIT\n"
)

// The error vocabulary. Every refusal wraps ErrInvalid with the violation it found
// (the wrapped text names it), or is ErrTruncated or ErrEmpty; a timeout is the
// connection's own error (os.ErrDeadlineExceeded).
var (
	// ErrInvalid: the bytes are not a valid PROXY protocol header.
	ErrInvalid = errors.New("invalid PROXY protocol header")
	// ErrTruncated: the connection ended inside the header.
	ErrTruncated = errors.New("the connection ended inside its PROXY protocol header")
	// ErrEmpty: the connection ended before its first byte (a balancer's TCP check).
	ErrEmpty = errors.New("the connection ended before its PROXY protocol header")
)

func invalid(what string) error { return fmt.Errorf("%w: %s", ErrInvalid, what) }

var (
	errSignature = invalid("no PROXY protocol signature")
	errV1Byte    = invalid("version 1: a byte that is not printable ASCII")
	errV1LineEnd = invalid("version 1: a CR or LF that is not the closing CRLF")
	errV1TooLong = invalid("version 1: no CRLF within 107 bytes")
	errV1Short   = invalid("version 1: a line shorter than PROXY UNKNOWN")
	errV2Version = invalid("version 2: unknown version")
	errV2Command = invalid("version 2: unknown command")
	errV2Family  = invalid("version 2: unknown address family or transport")
	errV2TooLong = invalid(fmt.Sprintf("version 2: longer than %d bytes after the fixed 16", MaxV2Payload))
	errV2Length  = invalid("version 2: the length is too short for the address family")
	errDatagram  = invalid("a datagram address family on a stream connection")
	errNotOne    = invalid("the bytes are not exactly one header")
)

// Header is what a PROXY protocol header says about a connection.
type Header struct {
	// Version is 1 or 2.
	Version uint8
	// Local: the balancer's own connection (version 2's LOCAL command, version 1's
	// UNKNOWN, or a UNIX-socket source): no client address; the connection's own
	// endpoints stand (the specification's rule). Health checks send these.
	Local bool
	// Source and Dest are the relayed connection's client and the address it reached
	// (IPv4-mapped IPv6 addresses unmapped); zero when Local.
	Source, Dest netip.AddrPort
	// Len is the header's length on the wire.
	Len int
}

// Frame looks at b, the first bytes of a connection, without consuming anything: n > 0
// is the header's length (b[:n] is the header, and b[n:] is not the header's); n == 0
// with need > 0: b is the start of a header that needs at least need more bytes, and
// every byte of b is the header's; err: b cannot start a valid header, whatever
// follows.
func Frame(b []byte) (n, need int, err error) {
	if len(b) == 0 {
		return 0, MinLen, nil
	}
	switch b[0] {
	case sigV1[0]:
		return frameV1(b)
	case sigV2[0]:
		return frameV2(b)
	}
	return 0, 0, errSignature
}

func frameV1(b []byte) (int, int, error) {
	k := min(len(b), len(sigV1))
	if string(b[:k]) != sigV1[:k] {
		return 0, 0, errSignature
	}
	for i := k; i < min(len(b), MaxV1); i++ {
		switch c := b[i]; {
		case c == '\n':
			if b[i-1] != '\r' {
				return 0, 0, errV1LineEnd
			}
			if i+1 < MinLen {
				return 0, 0, errV1Short
			}
			return i + 1, 0, nil
		case c == '\r':
			if i+1 < len(b) && b[i+1] != '\n' {
				return 0, 0, errV1LineEnd
			}
		case c < 0x20 || c > 0x7e:
			return 0, 0, errV1Byte
		}
	}
	switch {
	case len(b) >= MaxV1:
		return 0, 0, errV1TooLong
	case len(b) < MinLen:
		return 0, MinLen - len(b), nil
	case b[len(b)-1] == '\r':
		return 0, 1, nil
	}
	return 0, 2, nil
}

func frameV2(b []byte) (int, int, error) {
	k := min(len(b), len(sigV2))
	if string(b[:k]) != sigV2[:k] {
		return 0, 0, errSignature
	}
	if len(b) > 12 {
		if b[12]>>4 != 2 {
			return 0, 0, errV2Version
		}
		if cmd := b[12] & 0x0f; cmd > 1 {
			return 0, 0, errV2Command
		}
	}
	if len(b) > 13 && !knownFamily(b[13]) {
		return 0, 0, errV2Family
	}
	if len(b) < v2Fixed {
		return 0, v2Fixed - len(b), nil
	}
	l := int(binary.BigEndian.Uint16(b[14:16]))
	if l > MaxV2Payload {
		return 0, 0, errV2TooLong
	}
	if b[12]&0x0f == 1 && l < addrLen(b[13]) {
		return 0, 0, errV2Length // a PROXY command's addresses must fit (LOCAL ignores them)
	}
	if total := v2Fixed + l; len(b) < total {
		return 0, total - len(b), nil
	}
	return v2Fixed + l, 0, nil
}

// knownFamily: the address family and transport bytes the specification defines.
func knownFamily(f byte) bool {
	switch proxyproto.AddressFamilyAndProtocol(f) {
	case proxyproto.UNSPEC, proxyproto.TCPv4, proxyproto.UDPv4, proxyproto.TCPv6, proxyproto.UDPv6,
		proxyproto.UnixStream, proxyproto.UnixDatagram:
		return true
	}
	return false
}

// addrLen is the length of family f's address block.
func addrLen(f byte) int {
	switch f >> 4 {
	case 1:
		return 12
	case 2:
		return 36
	case 3:
		return 216
	}
	return 0
}

// parser is go-proxyproto's reader over one header's bytes, pooled.
type parser struct {
	r  bytes.Reader
	br *bufio.Reader
}

// 128 bytes hold a whole version 1 line, which go-proxyproto wants buffered at once.
var parsers = sync.Pool{New: func() any { return &parser{br: bufio.NewReaderSize(nil, 128)} }}

// Parse decodes b, which must be exactly one header (as Frame found it).
func Parse(b []byte) (Header, error) {
	if n, _, err := Frame(b); err != nil {
		return Header{}, err
	} else if n != len(b) {
		return Header{}, errNotOne
	}
	p := parsers.Get().(*parser)
	p.r.Reset(b)
	p.br.Reset(&p.r)
	h, err := proxyproto.Read(p.br)
	left := p.br.Buffered() + p.r.Len()
	p.r.Reset(nil)
	p.br.Reset(nil)
	parsers.Put(p)
	if err != nil {
		return Header{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if left != 0 {
		return Header{}, errNotOne
	}
	if _, err := h.TLVs(); err != nil {
		return Header{}, fmt.Errorf("%w: version 2 TLVs: %w", ErrInvalid, err)
	}
	out := Header{Version: h.Version, Len: len(b)}
	if h.Command.IsLocal() {
		out.Local = true
		return out, nil
	}
	switch h.TransportProtocol {
	case proxyproto.TCPv4, proxyproto.TCPv6:
		src, dst, ok := h.TCPAddrs()
		if !ok {
			return Header{}, invalid("no TCP addresses")
		}
		out.Source, out.Dest = addrPort(src), addrPort(dst)
		return out, nil
	case proxyproto.UnixStream:
		out.Local = true // relayed from a UNIX socket: no client address to name
		return out, nil
	}
	return Header{}, errDatagram
}

func addrPort(a *net.TCPAddr) netip.AddrPort {
	ip, _ := netip.AddrFromSlice(a.IP)
	return netip.AddrPortFrom(ip.Unmap(), uint16(a.Port))
}

// Read reads the header at the start of c exactly, under c's read deadline, and
// parses it. The error is ErrInvalid's, ErrTruncated, ErrEmpty, or c's own (a timeout:
// os.ErrDeadlineExceeded; a reset).
func Read(c net.Conn) (Header, error) {
	if sc, ok := c.(syscall.Conn); ok && canPeek {
		if rc, err := sc.SyscallConn(); err == nil {
			return readPeek(rc)
		}
	}
	return ReadFrom(c)
}

// ReadFrom reads a header from r without peeking: each read asks for no more than
// Frame says the header still needs (a version 1 line takes a read per byte or two
// past its first 15), so nothing past the header is taken.
func ReadFrom(r io.Reader) (Header, error) {
	buf := make([]byte, 0, 128)
	for {
		n, need, err := Frame(buf)
		if err != nil {
			return Header{}, err
		}
		if n > 0 {
			return Parse(buf[:n])
		}
		if len(buf)+need > cap(buf) {
			buf = append(make([]byte, 0, len(buf)+need), buf...)
		}
		m, err := io.ReadFull(r, buf[len(buf):len(buf)+need])
		buf = buf[:len(buf)+m]
		switch {
		case err == nil:
		case len(buf) == 0 && err == io.EOF:
			return Header{}, ErrEmpty
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			if _, _, ferr := Frame(buf); ferr != nil {
				return Header{}, ferr
			}
			return Header{}, ErrTruncated
		default:
			return Header{}, err
		}
	}
}
