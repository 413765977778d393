package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/serve-zone/ingress/proxy"
)

// options are the command-line settings of `ingress` and `ingress demo` (contract §8).
type options struct {
	HTTPAddr           string
	HTTPSAddr          string
	HTTP3              bool
	PublicHTTPSPort    int
	AdminAddr          string
	StateDir           string
	Routes             string
	AllowInsecureRelay bool
	RelayCA            string
	DrainTimeout       time.Duration

	LogLevel  string
	LogFormat string
	AccessLog bool

	TrustedProxies        string
	ProxyProtocolFrom     string // balancers that send a PROXY header first (issue 36)
	ProxyProtocolTimeout  time.Duration
	DialTimeout           time.Duration
	ResponseHeaderTimeout time.Duration
	ReadHeaderTimeout     time.Duration
	IdleTimeout           time.Duration
	MaxHeaderBytes        int
	ClientBodyTimeout     time.Duration
	ClientSendTimeout     time.Duration
	// HTTP2MaxStreamsPerConn: streams an HTTP/2 connection serves before it is asked
	// to go away (issue 25).
	HTTP2MaxStreamsPerConn int
	TunnelIdleTimeout      time.Duration
	RequestBuffer          int64

	MaxConnsPerClient    int
	MaxRequestsPerClient int
	MaxTunnelsPerClient  int
	// MaxRequests and RequestBufferTotal bound all clients together (issue 33); their
	// defaults derive from the machine (proxy.DefaultMaxRequests and
	// proxy.DefaultRequestBufferTotal).
	MaxRequests        int
	RequestBufferTotal int64

	MetricsPerHost bool
	RetentionDays  int

	CPUProfile string

	// ACME are the --acme-* flags (acme.go).
	ACME acmeOptions

	// Derived by validate.
	level     zapcore.Level
	trusted   []netip.Prefix
	balancers []netip.Prefix
	addrSeen  map[string]string
}

// maxRequestBuffer bounds --request-buffer: every request in flight may hold that much
// of its body (in 32 KiB buffers).
const maxRequestBuffer = 16 << 20

// requestBuffer is --request-buffer as proxy.Config.RequestBuffer, whose zero means the
// default: 0 (off) is negative there.
func (o *options) requestBuffer() int64 {
	if o.RequestBuffer == 0 {
		return -1
	}
	return o.RequestBuffer
}

func defaultOptions() options {
	return options{
		HTTPAddr:              ":80",
		HTTPSAddr:             ":443",
		HTTP3:                 true,
		AdminAddr:             "127.0.0.1:9090",
		DrainTimeout:          30 * time.Second,
		LogLevel:              "info",
		LogFormat:             "json",
		DialTimeout:           5 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		ReadHeaderTimeout:     10 * time.Second,
		IdleTimeout:           120 * time.Second,
		MaxHeaderBytes:        64 << 10,
		ClientBodyTimeout:     30 * time.Second,
		ClientSendTimeout:     30 * time.Second,
		TunnelIdleTimeout:     5 * time.Minute,
		ProxyProtocolTimeout:  5 * time.Second,
		MaxConnsPerClient:     512,
		MaxRequestsPerClient:  512,
		MaxTunnelsPerClient:   256,
		RequestBuffer:         64 << 10,
		MaxRequests:           proxy.DefaultMaxRequests(),
		RequestBufferTotal:    proxy.DefaultRequestBufferTotal(),
		RetentionDays:         35,

		HTTP2MaxStreamsPerConn: 1000,
	}
}

// flagSet binds o to a new FlagSet named name, writing usage to out.
func (o *options) flagSet(name string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.HTTPAddr, "http-addr", o.HTTPAddr, "plain HTTP listener (HTTP/1.1 and prior-knowledge h2c); empty disables it")
	fs.StringVar(&o.HTTPSAddr, "https-addr", o.HTTPSAddr, "TLS listener (h2, http/1.1); empty disables it")
	fs.BoolVar(&o.HTTP3, "http3", o.HTTP3, "also serve HTTP/3 on UDP at --https-addr")
	fs.IntVar(&o.PublicHTTPSPort, "public-https-port", o.PublicHTTPSPort, "the port clients reach --https-addr at, when a port map, NAT or load balancer makes it differ from the bound one (docker run -p 8443:443 ...): announced in Alt-Svc for HTTP/3 (UDP) and used in redirects to https; 0 means the bound port")
	fs.StringVar(&o.AdminAddr, "admin-addr", o.AdminAddr, "admin listener: /metrics, /healthz, /readyz, /v1/traffic-statistics; empty disables it")
	fs.StringVar(&o.StateDir, "state-dir", o.StateDir, "directory keeping the last applied route table and the statistics across restarts")
	fs.StringVar(&o.Routes, "routes", o.Routes, "standalone mode: serve the route table in this file instead of registering with a relay")
	fs.BoolVar(&o.AllowInsecureRelay, "allow-insecure-relay", o.AllowInsecureRelay, "accept an http:// relay origin on a non-loopback host")
	fs.StringVar(&o.RelayCA, "relay-ca", o.RelayCA, "PEM file of CA certificates trusted for the relay, in addition to the system roots")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", o.DrainTimeout, "how long a graceful stop lets in-flight requests finish")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "debug, info, warn or error")
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "json or console")
	fs.BoolVar(&o.AccessLog, "access-log", o.AccessLog, "log one line per request")
	fs.StringVar(&o.TrustedProxies, "trusted-proxies", o.TrustedProxies, "comma-separated CIDRs whose X-Forwarded-*/Forwarded headers are extended instead of replaced")
	fs.StringVar(&o.ProxyProtocolFrom, "proxy-protocol-from", o.ProxyProtocolFrom, "comma-separated CIDRs of TCP load balancers whose connections (plain and TLS) must begin with a PROXY protocol header (v1 or v2): its client address then counts for the per-client budgets and penalty, X-Forwarded-For/Forwarded and the logs; a LOCAL header (health check) is the balancer's own, in no budget; other sources are served as without it. HTTP/3 is unaffected")
	fs.DurationVar(&o.ProxyProtocolTimeout, "proxy-protocol-timeout", o.ProxyProtocolTimeout, "how long a --proxy-protocol-from connection's PROXY header may take to arrive; then the connection is closed")
	fs.DurationVar(&o.DialTimeout, "dial-timeout", o.DialTimeout, "timeout for connecting to a target")
	fs.DurationVar(&o.ResponseHeaderTimeout, "response-header-timeout", o.ResponseHeaderTimeout, "timeout for a target's response headers")
	fs.DurationVar(&o.ReadHeaderTimeout, "read-header-timeout", o.ReadHeaderTimeout, "timeout for reading a client's request headers")
	fs.DurationVar(&o.IdleTimeout, "idle-timeout", o.IdleTimeout, "how long an idle client keep-alive connection is kept")
	fs.IntVar(&o.MaxHeaderBytes, "max-header-bytes", o.MaxHeaderBytes, "largest request header block accepted")
	fs.DurationVar(&o.ClientBodyTimeout, "client-body-timeout", o.ClientBodyTimeout, "a request body must deliver at least 1 KiB (or its rest) in every window of this length, else 408")
	fs.DurationVar(&o.ClientSendTimeout, "client-send-timeout", o.ClientSendTimeout, "each write of response bytes to a client must complete within this time, else the response is cut")
	fs.IntVar(&o.HTTP2MaxStreamsPerConn, "http2-max-streams-per-conn", o.HTTP2MaxStreamsPerConn, "streams (requests) one HTTP/2 connection serves; then it is asked to go away (GOAWAY), finishes them and closes, and the client reconnects (nginx's keepalive_requests)")
	fs.DurationVar(&o.TunnelIdleTimeout, "tunnel-idle-timeout", o.TunnelIdleTimeout, "a WebSocket tunnel (HTTP/1.1, HTTP/2, HTTP/3) with no byte either way for this long is closed; longer than nginx's proxy_read_timeout and AWS ALB (60s) and Cloudflare (100s), so what stays alive behind those stays alive here")
	fs.IntVar(&o.MaxConnsPerClient, "max-conns-per-client", o.MaxConnsPerClient, "open connections one client address (IPv6: its /64) may have, TCP and QUIC together; one more is refused at accept; 0: no limit")
	fs.IntVar(&o.MaxRequestsPerClient, "max-requests-per-client", o.MaxRequestsPerClient, "requests (HTTP/2, HTTP/3 streams) one client address may have in flight; one more gets REFUSED_STREAM (HTTP/2) or 503 with Retry-After; 0: no limit")
	fs.IntVar(&o.MaxTunnelsPerClient, "max-tunnels-per-client", o.MaxTunnelsPerClient, "WebSocket tunnels one client address may have open; one more gets 503 with Retry-After; 0: no limit")
	fs.Int64Var(&o.RequestBuffer, "request-buffer", o.RequestBuffer, "bytes of a request body read before a target is chosen: a body that ends within them is checked whole first (a malformed one never reaches a target), a larger one streams after them; 0 turns this off")
	fs.IntVar(&o.MaxRequests, "max-requests", o.MaxRequests, "requests and WebSocket tunnels in flight over all clients together (as nginx's worker_connections); one more gets REFUSED_STREAM (HTTP/2) or 503 with Retry-After; the default is one per 4 MiB of the machine's memory (its cgroup's limit when lower), at most half the descriptor limit, at least 1024; 0: no limit")
	fs.Int64Var(&o.RequestBufferTotal, "request-buffer-total", o.RequestBufferTotal, "bytes of request bodies all requests together hold before their targets are chosen (--request-buffer each, in 32 KiB buffers); past them a body streams to its target without being held first; the default is a 128th of the machine's memory (its cgroup's limit when lower), at least 16 MiB; 0: no limit")
	fs.BoolVar(&o.MetricsPerHost, "metrics-per-host", o.MetricsPerHost, "export per-hostname metric series (bounded by the route table)")
	fs.IntVar(&o.RetentionDays, "stats-retention-days", o.RetentionDays, "days of traffic statistics kept, today included (at least 35)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", o.CPUProfile, "write a Go CPU profile (pprof) of the whole run to this file, completed at a graceful stop")
	o.acmeFlags(fs)
	return fs
}

// validate judges every setting and returns every problem, one error each.
func (o *options) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	o.addrSeen = map[string]string{}
	checkAddr := func(flagName, addr string) {
		if addr == "" {
			return
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			bad("--%s %q must be host:port or :port", flagName, addr)
			return
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			bad("--%s %q must have a port from 0 to 65535", flagName, addr)
			return
		}
		if host != "" {
			if _, err := netip.ParseAddr(host); err != nil && host != "localhost" {
				bad("--%s %q must use an IP address or localhost as host", flagName, addr)
				return
			}
		}
		if port != "0" {
			if other, dup := o.addrSeen[addr]; dup {
				bad("--%s and --%s both use %q", other, flagName, addr)
			}
			o.addrSeen[addr] = flagName
		}
	}
	checkAddr("http-addr", o.HTTPAddr)
	checkAddr("https-addr", o.HTTPSAddr)
	checkAddr("admin-addr", o.AdminAddr)
	if o.HTTPAddr == "" && o.HTTPSAddr == "" {
		bad("--http-addr and --https-addr are both empty: nothing would be served")
	}

	if err := o.level.Set(o.LogLevel); err != nil || o.LogLevel == "" {
		bad("--log-level %q must be debug, info, warn or error", o.LogLevel)
	}
	switch o.LogFormat {
	case "json", "console":
	default:
		bad("--log-format %q must be json or console", o.LogFormat)
	}
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			bad("--%s must be positive, got %s", name, d)
		}
	}
	positive("drain-timeout", o.DrainTimeout)
	positive("dial-timeout", o.DialTimeout)
	positive("response-header-timeout", o.ResponseHeaderTimeout)
	positive("read-header-timeout", o.ReadHeaderTimeout)
	positive("idle-timeout", o.IdleTimeout)
	positive("client-body-timeout", o.ClientBodyTimeout)
	positive("client-send-timeout", o.ClientSendTimeout)
	positive("tunnel-idle-timeout", o.TunnelIdleTimeout)
	positive("proxy-protocol-timeout", o.ProxyProtocolTimeout)
	if o.PublicHTTPSPort < 0 || o.PublicHTTPSPort > 65535 {
		bad("--public-https-port must be from 1 to 65535 (0: the bound port), got %d", o.PublicHTTPSPort)
	}
	if o.MaxHeaderBytes < 4096 || o.MaxHeaderBytes > 16<<20 {
		bad("--max-header-bytes must be from 4096 to 16777216, got %d", o.MaxHeaderBytes)
	}
	if o.HTTP2MaxStreamsPerConn < 1 || o.HTTP2MaxStreamsPerConn > 1<<30 {
		bad("--http2-max-streams-per-conn must be from 1 to 1073741824, got %d", o.HTTP2MaxStreamsPerConn)
	}
	for _, b := range []struct {
		name string
		v    int
	}{{"max-conns-per-client", o.MaxConnsPerClient}, {"max-requests-per-client", o.MaxRequestsPerClient}, {"max-tunnels-per-client", o.MaxTunnelsPerClient}} {
		if b.v < 0 {
			bad("--%s must be 0 (no limit) or more, got %d", b.name, b.v)
		}
	}
	if o.MaxRequests < 0 {
		bad("--max-requests must be 0 (no limit) or more, got %d", o.MaxRequests)
	}
	if o.RequestBufferTotal < 0 {
		bad("--request-buffer-total must be 0 (no limit) or more, got %d", o.RequestBufferTotal)
	}
	if o.RequestBuffer < 0 || o.RequestBuffer > maxRequestBuffer {
		bad("--request-buffer must be from 0 (off) to %d, got %d", maxRequestBuffer, o.RequestBuffer)
	}
	if o.RetentionDays < 35 || o.RetentionDays > 3660 {
		bad("--stats-retention-days must be from 35 to 3660, got %d", o.RetentionDays)
	}
	o.trusted = parseCIDRs("trusted-proxies", o.TrustedProxies, bad)
	o.balancers = parseCIDRs("proxy-protocol-from", o.ProxyProtocolFrom, bad)
	if o.Routes != "" && o.RelayCA != "" {
		bad("--relay-ca has no use with --routes (standalone mode has no relay)")
	}
	o.validateACME(bad)
	return errors.Join(errs...)
}

// parseCIDRs parses flag name's comma-separated CIDRs (a bare address is its own /32
// or /128), masked; each one that is not a CIDR is reported to bad.
func parseCIDRs(name, v string, bad func(string, ...any)) []netip.Prefix {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil
	}
	var out []netip.Prefix
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		p, err := netip.ParsePrefix(part)
		if err != nil {
			if a, aerr := netip.ParseAddr(part); aerr == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			} else {
				bad("--%s: %q is not a CIDR", name, part)
				continue
			}
		}
		out = append(out, p.Masked())
	}
	return out
}

// requestBufferTotal is --request-buffer-total as proxy.Config.RequestBufferTotal,
// whose zero means the default: 0 (no limit) is negative there.
func (o *options) requestBufferTotal() int64 {
	if o.RequestBufferTotal == 0 {
		return -1
	}
	return o.RequestBufferTotal
}

// budgetFlag is a --max-*-per-client value as proxy.Config takes it: the flag's 0 (no
// limit) is the Config's negative (its 0 is the default).
func budgetFlag(v int) int {
	if v == 0 {
		return -1
	}
	return v
}
