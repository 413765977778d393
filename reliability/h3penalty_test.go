package reliability

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
)

// h3Host is the TLS route TestPenalisedHTTP3Refused asks for over HTTP/3.
const h3Host = "h3.rel.test"

// h3Client is an HTTP/3 client whose QUIC packets leave from the address from (a UDP
// socket bound to it) for the binary's HTTP/3 address h3addr, whatever the URL names.
// Its socket and connections close at cleanup.
func h3Client(t *testing.T, from net.IP, h3addr string) *http.Client {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: from})
	if err != nil {
		t.Fatal(err)
	}
	qt := &quic.Transport{Conn: udp}
	raddr, err := net.ResolveUDPAddr("udp", h3addr)
	if err != nil {
		t.Fatal(err)
	}
	rt := &http3.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: h3Host},
		Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			return qt.DialEarly(ctx, raddr, tlsCfg, cfg)
		},
	}
	t.Cleanup(func() {
		_ = rt.Close()
		_ = qt.Close()
		_ = udp.Close()
	})
	return &http.Client{Transport: rt, Timeout: 5 * time.Second}
}

// h3Get sends GET https://h3Host/path over c and returns the status and body.
func h3Get(c *http.Client, path string) (int, string, error) {
	resp, err := c.Get("https://" + h3Host + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.ProtoMajor != 3 {
		return resp.StatusCode, string(b), fmt.Errorf("answered over %s, want HTTP/3", resp.Proto)
	}
	return resp.StatusCode, string(b), err
}

// TestPenalisedHTTP3Refused: an abuse verdict penalises the address on every protocol
// (issue 25), HTTP/3 included. An HTTP/2 rapid-reset flood over h2c from 127.0.0.70
// gets its address penalised (ingress_client_abuse_total counts the verdict and its
// next TCP connections are refused at accept); while it is, an HTTP/3 request from the
// same address is refused at the QUIC handshake (CONNECTION_REFUSED, counted as
// ingress_refusals_total{kind="http3-penalty"}), and one from 127.0.0.1 is answered
// 200 over HTTP/3 by the same listener.
func TestPenalisedHTTP3Refused(t *testing.T) {
	backend := echoBackend(t, "h3")
	certPEM, keyPEM := keyPair(t, h3Host)
	p, _ := standalone(t, binarytest.TableJSON(t, 1, []routetable.Certificate{{ID: "c", CertificatePEM: certPEM, PrivateKeyPEM: keyPEM}},
		binarytest.Route(floodLegit, "", false, backend), binarytest.Route(h3Host, "c", false, backend)),
		"--http3=true")
	started := p.FindLine(0, func(m map[string]any) bool { return m["msg"] == "ingress started" })
	h3addr, _ := started["http3"].(string)
	if _, _, err := net.SplitHostPort(h3addr); err != nil {
		t.Fatalf("the ingress started line names no HTTP/3 address (%q): is HTTP/3 on?", h3addr)
	}

	// HTTP/3 works from the attacker's address before the flood: a later refusal is
	// the penalty's doing, not a client that cannot speak HTTP/3 from there.
	attacker := net.IPv4(127, 0, 0, 70)
	if code, body, err := h3Get(h3Client(t, attacker, h3addr), "/before"); err != nil || code != http.StatusOK {
		t.Fatalf("HTTP/3 from %s before the flood: %d %q %v; want 200", attacker, code, body, err)
	}

	// The flood goes on (redialling when cut off) until the HTTP/3 checks are done, so
	// that the address stays penalised: each penalty that ends lets one connection
	// through, whose flood is judged again at once.
	before := scrape(t, p.Admin)
	ctx, cancel := context.WithCancel(context.Background())
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		h2Flood(ctx, attacker, p.HTTP, "", 2, true, nil, rapidReset)
	}()
	defer func() { cancel(); <-flooded }()
	testwait.UntilWhy(t, waitLimit, "the flood judged abusive and its address refused at accept", func() (bool, string) {
		m := scrape(t, p.Admin)
		abuse := m.get("ingress_client_abuse_total") - before.get("ingress_client_abuse_total")
		refused := m.get(`ingress_refusals_total{kind="penalty"}`) - before.get(`ingress_refusals_total{kind="penalty"}`)
		return abuse > 0 && refused > 0, fmt.Sprintf("%.0f abuse verdicts, %.0f TCP connections refused", abuse, refused)
	})

	// A fresh client (no QUIC connection from before) from the penalised address: its
	// handshake is refused. An attempt may fall in the few milliseconds between one
	// penalty's end and the next verdict, so a success is retried within the bound; a
	// binary that does not refuse penalised QUIC connections never refuses one.
	var refusal error
	testwait.UntilWhy(t, waitLimit, "an HTTP/3 request from the penalised address refused at the handshake", func() (bool, string) {
		code, _, err := h3Get(h3Client(t, attacker, h3addr), "/during")
		if err == nil {
			return false, fmt.Sprintf("answered %d", code)
		}
		refusal = err
		return true, err.Error()
	})
	var te *quic.TransportError
	if !errors.As(refusal, &te) || te.ErrorCode != quic.ConnectionRefused || !te.Remote {
		t.Fatalf("HTTP/3 from the penalised address failed with %v; want the server's CONNECTION_REFUSED", refusal)
	}
	if code, body, err := h3Get(h3Client(t, net.IPv4(127, 0, 0, 1), h3addr), "/bystander"); err != nil || code != http.StatusOK || body != "h3 /bystander" {
		t.Fatalf("HTTP/3 from 127.0.0.1 during the penalty: %d %q %v; want 200 %q", code, body, err, "h3 /bystander")
	}
	testwait.UntilWhy(t, waitLimit, `the refusal counted as ingress_refusals_total{kind="http3-penalty"}`, func() (bool, string) {
		n := scrape(t, p.Admin).get(`ingress_refusals_total{kind="http3-penalty"}`)
		return n >= 1, fmt.Sprintf("%.0f counted", n)
	})
	cancel()
	<-flooded
}
