package proxyhdr

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/pires/go-proxyproto"
)

// The bytes a client sends after the header: they must stay unread.
const rest = "GET / HTTP/1.1\r\nHost: a.example\r\n\r\nGET /2 HTTP/1.1\r\nHost: a.example\r\n\r\n"

// v2 builds a version 2 header with go-proxyproto's writer.
func v2(t testing.TB, cmd proxyproto.ProtocolVersionAndCommand, fam proxyproto.AddressFamilyAndProtocol, src, dst net.Addr, tlvs ...proxyproto.TLV) []byte {
	t.Helper()
	h := &proxyproto.Header{Version: 2, Command: cmd, TransportProtocol: fam, SourceAddr: src, DestinationAddr: dst}
	if len(tlvs) > 0 {
		if err := h.SetTLVs(tlvs); err != nil {
			t.Fatal(err)
		}
	}
	b, err := h.Format()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func tcp(s string) *net.TCPAddr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

// valid is one well-formed header and what it says.
type valid struct {
	name string
	b    []byte
	want Header
}

func validHeaders(t testing.TB) []valid {
	ap := netip.MustParseAddrPort
	big := proxyproto.TLV{Type: proxyproto.PP2_TYPE_MIN_CUSTOM, Value: bytes.Repeat([]byte{'c'}, 300)}
	vs := []valid{
		{"v1 TCP4", []byte("PROXY TCP4 198.51.100.7 203.0.113.1 56324 443\r\n"),
			Header{Version: 1, Source: ap("198.51.100.7:56324"), Dest: ap("203.0.113.1:443")}},
		{"v1 TCP6", []byte("PROXY TCP6 2001:db8::7 2001:db8::1 1 65535\r\n"),
			Header{Version: 1, Source: ap("[2001:db8::7]:1"), Dest: ap("[2001:db8::1]:65535")}},
		{"v1 TCP6 mapped", []byte("PROXY TCP6 ::ffff:198.51.100.7 ::ffff:203.0.113.1 80 80\r\n"),
			Header{Version: 1, Source: ap("198.51.100.7:80"), Dest: ap("203.0.113.1:80")}},
		{"v1 UNKNOWN", []byte("PROXY UNKNOWN\r\n"), Header{Version: 1, Local: true}},
		{"v1 UNKNOWN with addresses", []byte("PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n"), Header{Version: 1, Local: true}},
		{"v1 longest", []byte("PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"),
			Header{Version: 1, Source: ap("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"), Dest: ap("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535")}},
		{"v2 TCPv4", v2(t, proxyproto.PROXY, proxyproto.TCPv4, tcp("198.51.100.7:56324"), tcp("203.0.113.1:443")),
			Header{Version: 2, Source: ap("198.51.100.7:56324"), Dest: ap("203.0.113.1:443")}},
		{"v2 TCPv6", v2(t, proxyproto.PROXY, proxyproto.TCPv6, tcp("[2001:db8::7]:1"), tcp("[2001:db8::1]:443")),
			Header{Version: 2, Source: ap("[2001:db8::7]:1"), Dest: ap("[2001:db8::1]:443")}},
		{"v2 TCPv4 with TLVs", v2(t, proxyproto.PROXY, proxyproto.TCPv4, tcp("198.51.100.7:1"), tcp("203.0.113.1:443"),
			proxyproto.TLV{Type: proxyproto.PP2_TYPE_AUTHORITY, Value: []byte("a.example")},
			proxyproto.TLV{Type: proxyproto.PP2_TYPE_NOOP, Value: []byte{0, 0, 0}}),
			Header{Version: 2, Source: ap("198.51.100.7:1"), Dest: ap("203.0.113.1:443")}},
		{"v2 longer than the first peek", v2(t, proxyproto.PROXY, proxyproto.TCPv4, tcp("198.51.100.7:1"), tcp("203.0.113.1:443"), big),
			Header{Version: 2, Source: ap("198.51.100.7:1"), Dest: ap("203.0.113.1:443")}},
		{"v2 LOCAL", v2(t, proxyproto.LOCAL, proxyproto.UNSPEC, nil, nil), Header{Version: 2, Local: true}},
		{"v2 LOCAL with addresses", v2(t, proxyproto.LOCAL, proxyproto.TCPv4, tcp("10.0.0.1:1"), tcp("10.0.0.2:2")), Header{Version: 2, Local: true}},
		{"v2 LOCAL, family without its addresses", append([]byte(sigV2), 0x20, 0x11, 0, 3, 1, 2, 3), Header{Version: 2, Local: true}},
		{"v2 UNIX stream", v2(t, proxyproto.PROXY, proxyproto.UnixStream, &net.UnixAddr{Net: "unix", Name: "/a"}, &net.UnixAddr{Net: "unix", Name: "/b"}),
			Header{Version: 2, Local: true}},
	}
	for i := range vs {
		vs[i].want.Len = len(vs[i].b)
	}
	return vs
}

// invalidCase is one adversarial input: a header that must be refused.
type invalidCase struct {
	name string
	b    []byte
	want error // ErrInvalid or ErrTruncated
}

func invalidHeaders(t testing.TB) []invalidCase {
	sig := []byte(sigV2)
	v4 := v2(t, proxyproto.PROXY, proxyproto.TCPv4, tcp("198.51.100.7:1"), tcp("203.0.113.1:443"))
	with := func(b []byte, i int, v byte) []byte { b = bytes.Clone(b); b[i] = v; return b }
	withLen := func(b []byte, l uint16) []byte { b = bytes.Clone(b); binary.BigEndian.PutUint16(b[14:16], l); return b }
	overrun := append(withLen(v4, 12+3), 0x01, 0x00, 0x09) // a TLV of 9 bytes with none after it
	overrun2 := append(withLen(v4, 12+5), 0x01, 0x00, 0x09, 'a', 'b')
	tlvHead := append(withLen(v4, 12+2), 0x01, 0x00) // a TLV whose length is cut
	return []invalidCase{
		{"HTTP request", []byte("GET / HTTP/1.1\r\n\r\n"), ErrInvalid},
		{"TLS ClientHello", []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}, ErrInvalid},
		{"lower case", []byte("proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n"), ErrInvalid},
		{"v1 without space", []byte("PROXYTCP4 1.2.3.4 5.6.7.8 1 2\r\n"), ErrInvalid},
		{"v1 bare LF", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"), ErrInvalid},
		{"v1 bare CR", []byte("PROXY TCP4 1.2.3.4\r5.6.7.8 1 2\r\n"), ErrInvalid},
		{"v1 control byte", []byte("PROXY TCP4 1.2.3.4\x005.6.7.8 1 2\r\n"), ErrInvalid},
		{"v1 high byte", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\xff\r\n"), ErrInvalid},
		{"v1 too long", []byte("PROXY UNKNOWN " + strings.Repeat("f", 100) + "\r\n"), ErrInvalid},
		{"v1 endless", []byte("PROXY " + strings.Repeat("1", 200)), ErrInvalid},
		{"v1 unknown protocol", []byte("PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n"), ErrInvalid},
		{"v1 family mismatch", []byte("PROXY TCP4 2001:db8::1 5.6.7.8 1 2\r\n"), ErrInvalid},
		{"v1 IPv4 in TCP6", []byte("PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n"), ErrInvalid},
		{"v1 zone", []byte("PROXY TCP6 fe80::1%eth0 fe80::2 1 2\r\n"), ErrInvalid},
		{"v1 port too large", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n"), ErrInvalid},
		{"v1 port leading zero", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n"), ErrInvalid},
		{"v1 port sign", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 +80 2\r\n"), ErrInvalid},
		{"v1 missing port", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 80\r\n"), ErrInvalid},
		{"v1 extra field", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 80 81 82\r\n"), ErrInvalid},
		{"v1 double space", []byte("PROXY TCP4  1.2.3.4 5.6.7.8 80 81\r\n"), ErrInvalid},
		{"v1 address with leading zeros", []byte("PROXY TCP4 01.2.3.4 5.6.7.8 80 81\r\n"), ErrInvalid},
		{"v1 no protocol", []byte("PROXY \r\n"), ErrInvalid},
		{"v1 truncated", []byte("PROXY TCP4 1.2.3.4 5.6."), ErrTruncated},
		{"v1 truncated at CR", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r"), ErrTruncated},
		{"v2 bad signature", with(v4, 11, 'X'), ErrInvalid},
		{"v2 version 1", with(v4, 12, 0x11), ErrInvalid},
		{"v2 version 3", with(v4, 12, 0x31), ErrInvalid},
		{"v2 unknown command", with(v4, 12, 0x22), ErrInvalid},
		{"v2 unknown family", with(v4, 13, 0x41), ErrInvalid},
		{"v2 unknown transport", with(v4, 13, 0x13), ErrInvalid},
		{"v2 PROXY UNSPEC", append(append(bytes.Clone(sig), 0x21, 0x00), 0, 0), ErrInvalid},
		{"v2 family longer than its length", withLen(v4, 11), ErrInvalid},
		{"v2 IPv6 in an IPv4 length", with(v4, 13, 0x21), ErrInvalid},
		{"v2 UNIX in a short length", with(v4, 13, 0x31), ErrInvalid},
		{"v2 datagram", v2(t, proxyproto.PROXY, proxyproto.UDPv4, &net.UDPAddr{IP: net.IPv4(1, 2, 3, 4), Port: 1}, &net.UDPAddr{IP: net.IPv4(5, 6, 7, 8), Port: 2}), ErrInvalid},
		{"v2 TLV overruns the header", overrun, ErrInvalid},
		{"v2 TLV overruns by more", overrun2, ErrInvalid},
		{"v2 TLV head cut", tlvHead, ErrInvalid},
		{"v2 longer than its limit", append(withLen(v4, MaxV2Payload+1), make([]byte, MaxV2Payload+1-12)...), ErrInvalid},
		{"v2 the longest length", withLen(v4, 0xffff), ErrInvalid},
		{"v2 truncated in the signature", sig[:7], ErrTruncated},
		{"v2 truncated in the addresses", v4[:20], ErrTruncated},
		{"v2 truncated TLVs", withLen(v4, 12+10), ErrTruncated},
	}
}

// TestParseValid: each well-formed header says what it says, through Parse, through
// ReadFrom a byte at a time, and through Read on a socket (followed by a request in
// the same write), and nothing after it is taken.
func TestParseValid(t *testing.T) {
	for _, v := range validHeaders(t) {
		t.Run(v.name, func(t *testing.T) {
			n, _, err := Frame(append(bytes.Clone(v.b), rest...))
			if err != nil || n != len(v.b) {
				t.Fatalf("Frame: %d, %v; want %d", n, err, len(v.b))
			}
			h, err := Parse(v.b)
			if err != nil || h != v.want {
				t.Fatalf("Parse: %+v, %v; want %+v", h, err, v.want)
			}
			r := bytes.NewReader(append(bytes.Clone(v.b), rest...))
			if h, err := ReadFrom(iotest.OneByteReader(r)); err != nil || h != v.want {
				t.Fatalf("ReadFrom: %+v, %v; want %+v", h, err, v.want)
			}
			if left, _ := io.ReadAll(r); string(left) != rest {
				t.Fatalf("ReadFrom left %q, want %q", left, rest)
			}
			srv, cli := socketPair(t)
			write(t, cli, append(bytes.Clone(v.b), rest...))
			if h, err := Read(srv); err != nil || h != v.want {
				t.Fatalf("Read: %+v, %v; want %+v", h, err, v.want)
			}
			expectRest(t, srv, rest)
		})
	}
}

// TestRefusesAdversarial: every malformed, truncated or overlong header is refused
// with the right error by Parse, ReadFrom and Read on a socket; none hangs, and a
// malformed one is refused as soon as its first wrong byte is seen (no wait for more).
func TestRefusesAdversarial(t *testing.T) {
	for _, c := range invalidHeaders(t) {
		t.Run(c.name, func(t *testing.T) {
			n, _, ferr := Frame(c.b)
			if ferr == nil && n > 0 {
				if _, err := Parse(c.b[:n]); !errors.Is(err, c.want) {
					t.Fatalf("Parse: %v; want %v", err, c.want)
				}
			} else if c.want == ErrInvalid && ferr == nil {
				t.Fatalf("Frame wants more of a malformed header (need more after %d bytes)", len(c.b))
			}
			if _, err := ReadFrom(bytes.NewReader(c.b)); !errors.Is(err, c.want) {
				t.Fatalf("ReadFrom: %v; want %v", err, c.want)
			}
			srv, cli := socketPair(t)
			write(t, cli, c.b)
			if c.want == ErrTruncated {
				_ = cli.(*net.TCPConn).CloseWrite()
			}
			// Malformed: refused from what came, without waiting for more (the
			// deadline is far); truncated: at the FIN.
			_ = srv.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := Read(srv); !errors.Is(err, c.want) {
				t.Fatalf("Read: %v; want %v", err, c.want)
			}
		})
	}
}

// TestReadEnds: a connection that ends before its first byte is ErrEmpty (a
// balancer's TCP check, not a refusal); a header that stops coming is the deadline's.
func TestReadEnds(t *testing.T) {
	srv, cli := socketPair(t)
	_ = cli.Close()
	if _, err := Read(srv); !errors.Is(err, ErrEmpty) {
		t.Fatalf("closed at once: %v; want ErrEmpty", err)
	}
	if _, err := ReadFrom(bytes.NewReader(nil)); !errors.Is(err, ErrEmpty) {
		t.Fatalf("ReadFrom, nothing: %v; want ErrEmpty", err)
	}
	for _, part := range []string{"", "PROXY TCP4 1.2.3.4 ", sigV2[:5]} {
		srv, cli := socketPair(t)
		write(t, cli, []byte(part))
		_ = srv.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := Read(srv); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%q then nothing: %v; want the deadline", part, err)
		}
	}
}

// socketPair returns both ends of a loopback TCP connection.
func socketPair(t *testing.T) (srv, cli net.Conn) { return socketPairB(t) }

func socketPairB(t testing.TB) (srv, cli net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cli, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); cli.Close() })
	_ = srv.SetDeadline(time.Now().Add(10 * time.Second))
	return srv, cli
}

func write(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

// expectRest reads want from c.
func expectRest(t *testing.T, c net.Conn, want string) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
		t.Fatalf("after the header: %q, %v; want %q", got, err, want)
	}
}

// stricter are the refusals of headers go-proxyproto accepts: version 1 bytes that
// are not printable ASCII or a lone CR (it ignores an UNKNOWN line's contents),
// datagram address families on a stream, TLVs that do not fit.
func stricter(err error) bool {
	return errors.Is(err, errV1Byte) || errors.Is(err, errV1LineEnd) || errors.Is(err, errDatagram) ||
		errors.Is(err, ErrInvalid) && strings.Contains(err.Error(), "TLVs")
}

// FuzzHeader holds the reader to go-proxyproto, the reference implementation, on any
// input (a header and what follows it): what Frame and Parse accept, go-proxyproto
// accepts with the same addresses and the same length; what go-proxyproto accepts,
// Parse accepts unless it is one of the stricter refusals; ReadFrom reads exactly the
// header and agrees with Parse. Nothing panics. Seeded with valid v1 and v2 headers
// and the adversarial corpus.
func FuzzHeader(f *testing.F) {
	for _, v := range validHeaders(f) {
		f.Add(append(bytes.Clone(v.b), rest...))
		f.Add(append(bytes.Clone(v.b), 0x16, 0x03, 0x01))
	}
	for _, c := range invalidHeaders(f) {
		f.Add(c.b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		n, need, ferr := Frame(in)
		var ours Header
		var perr error
		switch {
		case ferr != nil:
			perr = ferr
		case n == 0:
			if need <= 0 {
				t.Fatalf("Frame: incomplete with need %d", need)
			}
			perr = ErrTruncated
		default:
			if n > len(in) {
				t.Fatalf("Frame: %d bytes of %d", n, len(in))
			}
			ours, perr = Parse(in[:n])
			if perr == nil && ours.Len != n {
				t.Fatalf("Parse: Len %d, framed %d", ours.Len, n)
			}
		}

		r := bytes.NewReader(in)
		got, rerr := ReadFrom(r)
		if (rerr == nil) != (perr == nil) || rerr == nil && got != ours {
			t.Fatalf("ReadFrom: %+v, %v; Frame and Parse: %+v, %v", got, rerr, ours, perr)
		}
		if rerr == nil && r.Len() != len(in)-n {
			t.Fatalf("ReadFrom left %d bytes, want %d", r.Len(), len(in)-n)
		}

		lr := bytes.NewReader(in)
		lb := bufio.NewReaderSize(lr, 1<<17)
		lh, lerr := proxyproto.Read(lb)
		consumed := len(in) - lb.Buffered() - lr.Len()
		switch {
		case perr == nil && lerr != nil:
			t.Fatalf("accepted %+v; go-proxyproto: %v", ours, lerr)
		case perr == nil:
			if consumed != n {
				t.Fatalf("header of %d bytes; go-proxyproto read %d", n, consumed)
			}
			if lh.Version != ours.Version || lh.Command.IsLocal() != ours.Local && lh.TransportProtocol != proxyproto.UnixStream {
				t.Fatalf("%+v; go-proxyproto: %+v", ours, lh)
			}
			if src, dst, ok := lh.TCPAddrs(); ok && !ours.Local && (addrPort(src) != ours.Source || addrPort(dst) != ours.Dest) {
				t.Fatalf("%+v; go-proxyproto: %v -> %v", ours, src, dst)
			}
		case lerr == nil && !stricter(perr) && !(errors.Is(perr, ErrTruncated) && consumed > len(in)):
			t.Fatalf("refused (%v) what go-proxyproto accepts: %+v", perr, lh)
		}
	})
}
