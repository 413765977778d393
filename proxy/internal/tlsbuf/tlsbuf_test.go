package tlsbuf

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"unsafe"

	"github.com/serve-zone/ingress/internal/testcert"
)

// TestFieldsKnown: the tls.Conn fields the package uses exist in this Go release.
func TestFieldsKnown(t *testing.T) {
	if !Known() {
		t.Fatal("crypto/tls's tls.Conn has no rawInput and hand (bytes.Buffer) and input (bytes.Reader) fields any more: parked TLS connections keep their buffers; see proxy/internal/tlsbuf")
	}
}

// pair is a handshaken TLS server and client over a pipe, the server having read "ping".
func pair(t *testing.T) (srv, cli *tls.Conn) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	cp, kp, err := testcert.Generate("tlsbuf.example.test")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair([]byte(cp), []byte(kp))
	if err != nil {
		t.Fatal(err)
	}
	srv = tls.Server(a, &tls.Config{Certificates: []tls.Certificate{cert}})
	cli = tls.Client(b, &tls.Config{ServerName: "tlsbuf.example.test", InsecureSkipVerify: true})
	go func() { _ = cli.Handshake(); _, _ = cli.Write([]byte("ping")) }()
	buf := make([]byte, 4)
	if _, err := io.ReadFull(srv, buf); err != nil {
		t.Fatal(err)
	}
	return srv, cli
}

// TestTLSBuffersDropped: a connection's empty buffers are dropped, one holding part of
// a record keeps it (and Held says so), and crypto/tls reads on with fresh ones.
func TestTLSBuffersDropped(t *testing.T) {
	TestFieldsKnown(t)
	srv, cli := pair(t)
	raw := (*bytes.Buffer)(unsafe.Add(unsafe.Pointer(srv), fields.rawInput))
	hand := (*bytes.Buffer)(unsafe.Add(unsafe.Pointer(srv), fields.hand))
	if raw.Cap() == 0 || hand.Cap() == 0 {
		t.Fatalf("after a handshake and a record: rawInput %d bytes, hand %d bytes of room; want both grown", raw.Cap(), hand.Cap())
	}
	if held, ok := Held(srv); held || !ok {
		t.Fatalf("Held with nothing in: %v, %v; want false, true", held, ok)
	}
	raw.WriteByte(0x17) // as if part of a record were in
	if held, ok := Held(srv); !held || !ok {
		t.Fatalf("Held with part of a record in: %v, %v; want true, true", held, ok)
	}
	if Drop(srv) || raw.Len() != 1 {
		t.Fatal("dropped the buffers of a connection with part of a record in")
	}
	raw.Reset()
	if !Drop(srv) || raw.Cap() != 0 || hand.Cap() != 0 {
		t.Fatalf("empty buffers kept: rawInput %d, hand %d bytes of room", raw.Cap(), hand.Cap())
	}
	go func() { _, _ = cli.Write([]byte("pong")) }()
	buf := make([]byte, 4)
	if _, err := io.ReadFull(srv, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("after the drop: %q, %v", buf, err)
	}
}

// TestForget: with the fields forgotten nothing is dropped or known, and the undo
// restores them; a nil connection is never touched.
func TestForget(t *testing.T) {
	srv, _ := pair(t)
	undo := Forget()
	if Known() || Drop(srv) {
		t.Fatal("forgotten fields still used")
	}
	if _, ok := Held(srv); ok {
		t.Fatal("Held answers with the fields forgotten")
	}
	undo()
	if !Known() || Drop(nil) {
		t.Fatal("the undo did not restore the fields, or a nil connection was dropped")
	}
	if _, ok := Held(nil); ok {
		t.Fatal("Held answers for a nil connection")
	}
}
