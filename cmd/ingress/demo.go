package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/serve-zone/ingress/env"
	"github.com/serve-zone/ingress/internal/testcert"
	"github.com/serve-zone/ingress/relaysim"
	"github.com/serve-zone/ingress/routetable"
)

// The demo's hostnames. They resolve nowhere: the curl lines pin them to 127.0.0.1.
const (
	demoApp    = "app.demo.test"    // two backends, TLS, plain HTTP served too
	demoSecure = "secure.demo.test" // TLS with redirectHttp: plain HTTP answers 308
	demoPlain  = "plain.demo.test"  // plain HTTP only
	demoWild   = "*.apps.demo.test" // wildcard route
	demoBearer = "demo-bearer-not-a-secret"

	// The demo's listeners unless its flags say otherwise (its -h and the README say so).
	demoHTTPAddr  = "127.0.0.1:8080"
	demoHTTPSAddr = "127.0.0.1:8443"
	demoAdminAddr = "127.0.0.1:9090"
	demoNode      = "demo-node"
)

// runDemo starts, in this process and on loopback, the development relay, two demo
// backends and the ingress registered with that relay; it prints the curl lines that
// show routing, TLS and statistics and runs until ctx ends.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := defaultOptions()
	o.HTTPAddr, o.HTTPSAddr, o.AdminAddr = demoHTTPAddr, demoHTTPSAddr, demoAdminAddr
	o.LogFormat = "console"
	fs := o.flagSet("ingress demo", stderr)
	if err := parseFlags(fs, "demo", args, nil); err != nil {
		return err
	}
	var problems []error
	if err := o.validate(); err != nil {
		problems = append(problems, err)
	}
	if o.Routes != "" || o.RelayCA != "" || o.AllowInsecureRelay {
		problems = append(problems, errors.New("--routes, --relay-ca and --allow-insecure-relay have no use with ingress demo (it runs its own relay and route table)"))
	}
	log, stop, err := startProcess(o, problems, stderr)
	if err != nil {
		return err
	}
	defer stop()

	d, err := startDemo(ctx, o, log)
	if err != nil {
		return err
	}
	defer d.close()
	if err := d.waitReady(ctx, 10*time.Second); err != nil {
		if ctx.Err() != nil {
			return d.wait() // stopped (Ctrl-C) before it was ready: still a graceful stop
		}
		return err
	}
	d.printHelp(stdout)
	return d.wait()
}

// demo is a running demo: relay, backends and ingress. The backends' servers and the
// ingress run in one errgroup: the first to fail stops the ingress (gracefully), and the
// backends close once it has drained.
type demo struct {
	relay    *relaysim.Server
	backends []*http.Server
	in       *instance
	g        *errgroup.Group
	done     chan struct{} // closed when the ingress's run has returned
	cancel   context.CancelFunc
}

// wait waits until the ingress and the backends have stopped and returns the group's
// first error; it may be called any number of times.
func (d *demo) wait() error {
	return d.g.Wait()
}

// startDemo starts everything; the ingress runs until ctx ends or close is called.
func startDemo(ctx context.Context, o options, log *zap.Logger) (*demo, error) {
	d := &demo{done: make(chan struct{})}
	gctx, cancel := context.WithCancel(ctx)
	d.cancel = cancel
	d.g, gctx = errgroup.WithContext(gctx)
	ok := false
	defer func() {
		if !ok {
			d.close()
		}
	}()
	var addrs []string
	for _, name := range []string{"backend-a", "backend-b"} {
		srv, ln, err := demoBackend(name)
		if err != nil {
			return nil, err
		}
		d.backends = append(d.backends, srv)
		addrs = append(addrs, ln.Addr().String())
		d.g.Go(func() error {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("demo %s: %w", name, err)
			}
			return nil
		})
	}
	table, err := demoTable(addrs)
	if err != nil {
		return nil, err
	}
	d.relay = relaysim.New(relaysim.Options{Logger: log.Named("relaysim")})
	origin, err := d.relay.Start("127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo relay: %w", err)
	}
	d.relay.ExpectedBearer(demoBearer)
	d.relay.SetTable(table, 1)

	in, err := newInstance(o, instanceDeps{
		env: env.Config{Bearer: env.NewBearer(demoBearer), RelayOrigin: origin, NodeID: demoNode},
		log: log,
	})
	if err != nil {
		return nil, err
	}
	d.in = in
	d.g.Go(func() error {
		defer close(d.done)
		err := in.run(gctx)
		d.closeBackends() // after the drain: in-flight requests reached them
		return err
	})
	ok = true
	return d, nil
}

func (d *demo) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for !d.in.ready() {
		if time.Now().After(deadline) {
			return errors.New("demo: the ingress did not become ready")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.done:
			return fmt.Errorf("demo: the ingress stopped: %v", d.wait())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// close stops the ingress (waiting for its graceful stop), the relay and the backends.
// It may be called after the ingress stopped on its own (Ctrl-C).
func (d *demo) close() {
	d.cancel()
	if d.in == nil { // the ingress never ran: nothing else closes the backends
		d.closeBackends()
	}
	_ = d.wait()
	if d.relay != nil {
		_ = d.relay.Close()
	}
}

func (d *demo) closeBackends() {
	for _, b := range d.backends {
		_ = b.Close()
	}
}

func (d *demo) printHelp(w io.Writer) {
	httpAddr, httpsAddr := d.in.proxy.Addrs()
	hp, sp := port(httpAddr), port(httpsAddr)
	admin := d.in.adminAddr()
	today := time.Now().UTC().Format(time.DateOnly)
	fmt.Fprintf(w, `
The ingress demo is running: a development relay, two backends and the ingress, all on loopback.
Try these (Ctrl-C stops everything):

  # plain HTTP, balanced over two backends (run it twice)
  curl -s -H 'Host: %[1]s' http://127.0.0.1:%[4]s/hello

  # TLS with the demo certificate (self-signed, hence -k), HTTP/2
  curl -sk --http2 --resolve %[1]s:%[5]s:127.0.0.1 https://%[1]s:%[5]s/hello

  # HTTP/3 on UDP at the same port (needs a curl built with HTTP/3)
  curl -sk --http3-only --resolve %[1]s:%[5]s:127.0.0.1 https://%[1]s:%[5]s/hello

  # a TLS route that redirects plain HTTP (308)
  curl -si -H 'Host: %[2]s' http://127.0.0.1:%[4]s/path?q=1

  # a plain-only route, and a wildcard route
  curl -s -H 'Host: %[3]s' http://127.0.0.1:%[4]s/
  curl -sk --resolve any.apps.demo.test:%[5]s:127.0.0.1 https://any.apps.demo.test:%[5]s/

  # server-sent events, streamed through the ingress
  curl -sN -H 'Host: %[1]s' http://127.0.0.1:%[4]s/events

  # an unknown host (404), then the traffic statistics and the metrics
  curl -si -H 'Host: nope.demo.test' http://127.0.0.1:%[4]s/
  curl -s 'http://%[6]s/v1/traffic-statistics?fromDayUtc=%[7]s&toDayUtc=%[7]s&limit=100'
  curl -s http://%[6]s/metrics | grep '^ingress_'

`, demoApp, demoSecure, demoPlain, hp, sp, addrString{admin}, today)
}

func port(a net.Addr) string {
	if a == nil {
		return "off"
	}
	_, p, _ := net.SplitHostPort(a.String())
	return p
}

// demoTable builds revision 1 of the demo's route table over the backends' addresses.
func demoTable(backends []string) (json.RawMessage, error) {
	certPEM, keyPEM, err := testcert.Generate("*.demo.test", "*.apps.demo.test")
	if err != nil {
		return nil, err
	}
	var targets []routetable.Target
	for i, b := range backends {
		host, p, _ := net.SplitHostPort(b)
		n, _ := strconv.Atoi(p)
		targets = append(targets, routetable.Target{LeaseID: "lease-demo-" + strconv.Itoa(i+1), Address: host, Port: n})
	}
	// The contract orders targets by address (as a string), then port.
	slices.SortFunc(targets, func(a, b routetable.Target) int {
		return cmp.Or(strings.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port))
	})
	tlsOn := func(redirect bool) *routetable.RouteTLS {
		return &routetable.RouteTLS{CertificateID: "cert-demo", RedirectHTTP: redirect}
	}
	t := routetable.Table{
		Revision: 1,
		Routes: []routetable.Route{ // strictly ordered by hostname
			{Hostname: demoWild, Targets: targets[:1], TLS: tlsOn(false)},
			{Hostname: demoApp, Targets: targets, TLS: tlsOn(false)},
			{Hostname: demoPlain, Targets: targets[1:], TLS: nil},
			{Hostname: demoSecure, Targets: targets[:1], TLS: tlsOn(true)},
		},
		Certificates: []routetable.Certificate{{ID: "cert-demo", CertificatePEM: certPEM, PrivateKeyPEM: keyPEM}},
	}
	return json.Marshal(t)
}

// demoBackend binds a small workload on 127.0.0.1 for the caller to serve: "/" names the
// backend, "/events" streams server-sent events and "/ws" echoes WebSocket messages.
func demoBackend(name string) (*http.Server, net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "hello from %s: %s %s%s (%s, forwarded for %s)\n",
			name, r.Method, r.Host, r.URL.RequestURI(), r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-For"))
	})
	mux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := 1; i <= 5; i++ {
			fmt.Fprintf(w, "data: event %d from %s\n\n", i, name)
			_ = rc.Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, msg); err != nil {
				return
			}
		}
	})
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln, nil
}
