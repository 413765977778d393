package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestFlagsValidate(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string // one substring per expected problem; none means valid
	}{
		{name: "defaults"},
		{name: "all set", args: []string{"--http-addr", "127.0.0.1:8080", "--https-addr", ":8443", "--admin-addr", "127.0.0.1:0",
			"--drain-timeout", "5s", "--log-level", "debug", "--log-format", "console", "--trusted-proxies", "10.0.0.0/8, 192.168.1.1",
			"--proxy-protocol-from", "10.1.0.0/16,2001:db8::/32, 192.0.2.7", "--proxy-protocol-timeout", "2s",
			"--max-header-bytes", "8192", "--stats-retention-days", "40", "--http3=false", "--access-log", "--metrics-per-host",
			"--client-body-timeout", "10s", "--client-send-timeout", "1m", "--http2-max-streams-per-conn", "100", "--request-buffer", "0",
			"--max-conns-per-client", "0", "--max-requests-per-client", "64", "--max-tunnels-per-client", "8",
			"--max-requests", "0", "--request-buffer-total", "1048576"}},
		{name: "bad http addr", args: []string{"--http-addr", "nonsense"}, want: []string{"--http-addr"}},
		{name: "bad port", args: []string{"--https-addr", ":99999"}, want: []string{"--https-addr"}},
		{name: "hostname addr", args: []string{"--admin-addr", "example.com:9090"}, want: []string{"--admin-addr"}},
		{name: "same addr twice", args: []string{"--http-addr", ":8080", "--admin-addr", ":8080"}, want: []string{"both use"}},
		{name: "nothing served", args: []string{"--http-addr", "", "--https-addr", ""}, want: []string{"nothing would be served"}},
		{name: "log level", args: []string{"--log-level", "loud"}, want: []string{"--log-level"}},
		{name: "log format", args: []string{"--log-format", "xml"}, want: []string{"--log-format"}},
		{name: "drain timeout", args: []string{"--drain-timeout", "0s"}, want: []string{"--drain-timeout"}},
		{name: "dial timeout", args: []string{"--dial-timeout", "-1s"}, want: []string{"--dial-timeout"}},
		{name: "response header timeout", args: []string{"--response-header-timeout", "0s"}, want: []string{"--response-header-timeout"}},
		{name: "read header timeout", args: []string{"--read-header-timeout", "0s"}, want: []string{"--read-header-timeout"}},
		{name: "idle timeout", args: []string{"--idle-timeout", "0s"}, want: []string{"--idle-timeout"}},
		{name: "client body timeout", args: []string{"--client-body-timeout", "0s"}, want: []string{"--client-body-timeout"}},
		{name: "client send timeout", args: []string{"--client-send-timeout", "-5s"}, want: []string{"--client-send-timeout"}},
		{name: "client budgets", args: []string{"--max-conns-per-client", "-1", "--max-requests-per-client", "-2", "--max-tunnels-per-client", "-3"},
			want: []string{"--max-conns-per-client", "--max-requests-per-client", "--max-tunnels-per-client"}},
		{name: "global bounds", args: []string{"--max-requests", "-1", "--request-buffer-total", "-1"},
			want: []string{"--max-requests", "--request-buffer-total"}},
		{name: "request buffer negative", args: []string{"--request-buffer", "-1"}, want: []string{"--request-buffer"}},
		{name: "request buffer too large", args: []string{"--request-buffer", "17000000"}, want: []string{"--request-buffer"}},
		{name: "max header bytes", args: []string{"--max-header-bytes", "10"}, want: []string{"--max-header-bytes"}},
		{name: "http2 streams per connection", args: []string{"--http2-max-streams-per-conn", "0"}, want: []string{"--http2-max-streams-per-conn"}},
		{name: "retention", args: []string{"--stats-retention-days", "7"}, want: []string{"--stats-retention-days"}},
		{name: "trusted proxies", args: []string{"--trusted-proxies", "10.0.0.0/8,banana"}, want: []string{"banana"}},
		{name: "proxy protocol from", args: []string{"--proxy-protocol-from", "10.0.0.0/8,10.0.0.300"}, want: []string{"--proxy-protocol-from: \"10.0.0.300\""}},
		{name: "proxy protocol timeout", args: []string{"--proxy-protocol-timeout", "0s"}, want: []string{"--proxy-protocol-timeout"}},
		{name: "relay ca with routes", args: []string{"--routes", "x.json", "--relay-ca", "ca.pem"}, want: []string{"--relay-ca"}},
		{name: "several at once", args: []string{"--log-level", "x", "--log-format", "y", "--drain-timeout", "0s"},
			want: []string{"--log-level", "--log-format", "--drain-timeout"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := defaultOptions()
			var out bytes.Buffer
			if err := o.flagSet("ingress", &out).Parse(tc.args); err != nil {
				t.Fatalf("parse: %v", err)
			}
			err := o.validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected problems: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want problems %q, got none", tc.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("want %d problems, got %q", len(tc.want), lines)
			}
			for i, w := range tc.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("problem %d = %q, want %q in it", i, lines[i], w)
				}
			}
		})
	}
}

// TestRequestBufferFlag: --request-buffer's 0 turns holding off (a negative
// proxy.Config.RequestBuffer, whose zero is the default), any other value goes as it is.
func TestRequestBufferFlag(t *testing.T) {
	for _, tc := range []struct {
		flag, want int64
	}{{0, -1}, {1, 1}, {64 << 10, 64 << 10}} {
		o := options{RequestBuffer: tc.flag}
		if got := o.requestBuffer(); got != tc.want {
			t.Errorf("--request-buffer %d gives Config.RequestBuffer %d, want %d", tc.flag, got, tc.want)
		}
	}
}

func TestFlagDefaultsMatchContract(t *testing.T) {
	o := defaultOptions()
	if o.HTTPAddr != ":80" || o.HTTPSAddr != ":443" || o.AdminAddr != "127.0.0.1:9090" || !o.HTTP3 ||
		o.DrainTimeout != 30*time.Second || o.StateDir != "" || o.Routes != "" || o.AllowInsecureRelay {
		t.Fatalf("defaults differ from contract §8: %+v", o)
	}
	if o.DialTimeout != 5*time.Second || o.ResponseHeaderTimeout != 60*time.Second ||
		o.ReadHeaderTimeout != 10*time.Second || o.IdleTimeout != 120*time.Second || o.MaxHeaderBytes != 64<<10 ||
		o.ClientBodyTimeout != 30*time.Second || o.ClientSendTimeout != 30*time.Second || o.HTTP2MaxStreamsPerConn != 1000 ||
		o.RequestBuffer != 64<<10 {
		t.Fatalf("data-plane defaults differ from the brief: %+v", o)
	}
	if o.MaxConnsPerClient != 512 || o.MaxRequestsPerClient != 512 || o.MaxTunnelsPerClient != 256 ||
		budgetFlag(0) >= 0 || budgetFlag(7) != 7 {
		t.Fatalf("per-client budgets differ from issue 25's defaults: %+v", o)
	}
}
