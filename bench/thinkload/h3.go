package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// h3c is one HTTP/3 connection from its own UDP socket, bound to its client address.
type h3c struct {
	udp *net.UDPConn
	qt  *quic.Transport
	tr  *http3.Transport
	url string
	cfg *config
}

func dialH3(ctx context.Context, cfg *config, src net.IP) (client, error) {
	raddr, err := net.ResolveUDPAddr("udp", cfg.addr)
	if err != nil {
		return nil, err
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: src})
	if err != nil {
		return nil, err
	}
	h := &h3c{udp: udp, qt: &quic.Transport{Conn: udp}, url: "https://" + cfg.host + cfg.path, cfg: cfg}
	h.tr = &http3.Transport{
		TLSClientConfig: &tls.Config{ServerName: cfg.host, RootCAs: cfg.roots, CurvePreferences: []tls.CurveID{tls.X25519}},
		QUICConfig:      &quic.Config{MaxIdleTimeout: time.Minute, KeepAlivePeriod: 0},
		Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			return h.qt.Dial(ctx, raddr, tlsCfg, qc)
		},
	}
	if err := h.get(); err != nil {
		_ = h.Close()
		return nil, err
	}
	return h, nil
}

func (h *h3c) Close() error {
	_ = h.tr.Close()
	_ = h.qt.Close()
	return h.udp.Close()
}

func (h *h3c) get() error {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url, nil)
	if err != nil {
		return err
	}
	req.Header["User-Agent"] = []string{"thinkload"}
	resp, err := h.tr.RoundTrip(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	switch {
	case err != nil:
		return err
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("thinkload: status %d", resp.StatusCode)
	}
	return nil
}
