package proxyhdr

import (
	"net/netip"
	"testing"

	"github.com/pires/go-proxyproto"
)

// The cost of a balancer's connection, once per connection (nothing per request).

func BenchmarkParse(b *testing.B) {
	for _, c := range []struct {
		name string
		hdr  []byte
	}{
		{"v1", []byte("PROXY TCP4 198.51.100.7 203.0.113.1 56324 443\r\n")},
		{"v2", v2(b, proxyproto.PROXY, proxyproto.TCPv4, tcp("198.51.100.7:56324"), tcp("203.0.113.1:443"))},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(c.hdr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadSocket: the header written on a loopback connection and read from the
// other end (the client's write included).
func BenchmarkReadSocket(b *testing.B) {
	for _, c := range []struct {
		name string
		hdr  []byte
	}{
		{"v1", []byte("PROXY TCP4 198.51.100.7 203.0.113.1 56324 443\r\n")},
		{"v2", v2(b, proxyproto.PROXY, proxyproto.TCPv4, tcp("198.51.100.7:56324"), tcp("203.0.113.1:443"))},
	} {
		b.Run(c.name, func(b *testing.B) {
			srv, cli := socketPairB(b)
			want := netip.MustParseAddrPort("198.51.100.7:56324")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cli.Write(c.hdr); err != nil {
					b.Fatal(err)
				}
				h, err := Read(srv)
				if err != nil || h.Source != want {
					b.Fatal(h, err)
				}
			}
		})
	}
}
