package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/serve-zone/ingress/routetable"
)

// TestHTTP3ResumedSessions: as on TCP (TestResumedSessions), a QUIC session ticket
// resumes only for the server name it was issued for, and a resumed connection still
// coalesces within its certificate.
func TestHTTP3ResumedSessions(t *testing.T) {
	e := newEnv(t, withHTTP3)
	be := backend(t, echoInfo())
	e.apply([]routeSpec{
		{host: "tls.test", tls: &routetable.RouteTLS{CertificateID: "one"}, backends: []string{be}},
		{host: "alt.test", tls: &routetable.RouteTLS{CertificateID: "one"}, backends: []string{be}},
		{host: "other.test", tls: &routetable.RouteTLS{CertificateID: "other"}, backends: []string{be}},
	}, certSpec{"one", []string{"tls.test", "alt.test"}}, certSpec{"other", []string{"other.test"}})
	udp := e.srv.HTTP3Addr().String()
	cache := &anyNameCache{}
	do := func(sni, host string) (resumed bool, status int) {
		t.Helper()
		var qc *quic.Conn
		tr := &http3.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: sni, ClientSessionCache: cache},
			Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
				c, err := quic.DialAddr(ctx, udp, tlsCfg, cfg)
				qc = c
				return c, err
			},
		}
		defer tr.Close()
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		res, err := c.Get("https://" + host + "/")
		if err != nil {
			t.Fatalf("%s/%s: %v", sni, host, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return qc.ConnectionState().TLS.DidResume, res.StatusCode
	}
	if resumed, st := do("tls.test", "tls.test"); resumed || st != 200 {
		t.Fatalf("first connection: resumed %v, status %d", resumed, st)
	}
	// The ticket comes after the handshake; the first request's answer follows it on the
	// same connection, so it is in the cache by now.
	if cache.cs == nil {
		t.Fatal("no session ticket arrived")
	}
	if resumed, st := do("tls.test", "alt.test"); !resumed || st != 200 {
		t.Errorf("resumed connection for a name on the same certificate: resumed %v, status %d, want a resumption and 200", resumed, st)
	}
	if resumed, _ := do("other.test", "other.test"); resumed {
		t.Errorf("a ticket issued for tls.test resumed a QUIC connection for other.test")
	}
}
