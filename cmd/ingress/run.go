package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/serve-zone/ingress/acme"
	"github.com/serve-zone/ingress/env"
	"github.com/serve-zone/ingress/internal/redact"
	"github.com/serve-zone/ingress/proxy"
	"github.com/serve-zone/ingress/register"
	"github.com/serve-zone/ingress/relay"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// capabilities is what this ingress states at registration: sorted and unique (contract
// §4); http3 only while it is served.
func capabilities(http3 bool) []string {
	if http3 {
		return []string{"http1", "http2", "http3", "tls-termination", "traffic-statistics", "websocket"}
	}
	return []string{"http1", "http2", "tls-termination", "traffic-statistics", "websocket"}
}

// runIngress judges flags and environment, then runs the ingress until ctx ends.
func runIngress(ctx context.Context, args []string, stderr io.Writer, lookup func(string) (string, bool)) error {
	o := defaultOptions()
	fs := o.flagSet("ingress", stderr)
	if err := parseFlags(fs, "", args, lookup); err != nil {
		return err
	}
	steadyGC := startGC(lookup) // until the first table (routes file, last-known-good) is applied
	defer steadyGC()
	var problems []error
	if err := o.validate(); err != nil {
		problems = append(problems, err)
	}
	var ec env.Config
	if o.Routes == "" {
		var err error
		if ec, err = env.Read(lookup, env.Options{AllowInsecureRelay: o.AllowInsecureRelay}); err != nil {
			problems = append(problems, err, errors.New(withoutRelay))
		}
	} else if node, ok := lookup(env.VarNodeID); ok && env.IsID(node) {
		ec.NodeID = node // standalone statistics still name the node when it is known
	}
	var relayTLS *tls.Config
	if o.Routes == "" && o.ACME.Storage != "" {
		problems = append(problems, errors.New("--acme-storage has no use in relay mode (the relay hands out the certificates; ACME routes are standalone: --routes)"))
	}
	if o.RelayCA != "" {
		var err error
		if relayTLS, err = loadRelayCA(o.RelayCA); err != nil {
			problems = append(problems, err)
		}
	}
	var routes *routetable.PreparedFile
	if o.Routes != "" {
		// Judge the file now so that its violations join the other problems; the
		// instance's watcher applies what was judged here without reading it again.
		var err error
		if routes, err = routetable.PrepareFile(o.Routes); err != nil {
			problems = append(problems, fmt.Errorf("--routes %s refused:\n%w", o.Routes, err))
		} else if v := acmeCheck(o)(routes.Table()); len(v) > 0 {
			problems = append(problems, fmt.Errorf("--routes %s refused:\n%s", o.Routes, strings.Join(v, "\n")))
		}
	}
	if err := o.loadACMERoots(); err != nil {
		problems = append(problems, err)
	}
	log, stop, err := startProcess(o, problems, stderr)
	if err != nil {
		return err
	}
	defer stop()

	in, err := newInstance(o, instanceDeps{env: ec, relayTLS: relayTLS, log: log, routes: routes})
	if err != nil {
		return err
	}
	routes = nil // applied: the watcher holds what it needs
	steadyGC()
	return in.run(ctx)
}

// withoutRelay ends the refusal of an ingress that has neither a relay's variables nor
// --routes: the ways to run it without a relay.
const withoutRelay = "without a relay: ingress demo (a demo on loopback), ingress proxy --from HOST --to ADDR (one route), " +
	"or ingress --routes FILE (a route file); ingress -h lists every command and flag"

// startProcess ends a command's checks: problems (the command line's, joined) refuse it
// with a configError; otherwise the CPU profile and the process logger start, and stop
// syncs the logger and completes the profile.
func startProcess(o options, problems []error, stderr io.Writer) (log *zap.Logger, stop func(), err error) {
	var stopProfile func()
	if len(problems) == 0 {
		if stopProfile, err = startCPUProfile(o.CPUProfile); err != nil {
			problems = append(problems, err)
		}
	}
	if err := errors.Join(problems...); err != nil {
		return nil, nil, configError{err}
	}
	log = newLogger(o.LogFormat, o.level, stderr)
	return log, func() { _ = log.Sync(); stopProfile() }, nil
}

func loadRelayCA(path string) (*tls.Config, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--relay-ca: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--relay-ca %s holds no PEM certificate", path)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// instanceDeps is what an instance needs beyond its options.
type instanceDeps struct {
	env      env.Config  // relay identity (relay mode) or just NodeID (standalone)
	relayTLS *tls.Config // nil: system roots
	log      *zap.Logger
	// routesDoc, when set, is the standalone table `ingress proxy` serves (with o.Routes
	// empty): loaded like a routes file, its certificate files watched.
	routesDoc []byte
	// routes, when set, is the --routes file as runIngress judged it: the watcher's first
	// load applies it.
	routes *routetable.PreparedFile
}

// instance is one running ingress: every component, wired, listeners bound.
type instance struct {
	opts  options
	log   *zap.Logger
	stats *stats.Registry
	store *routetable.Store
	proxy *proxy.Server

	adminLn  net.Listener
	adminSrv *http.Server

	session *register.Session
	watcher *routetable.FileSource
	acme    *acme.Manager // standalone mode with a state directory (acme.go)

	draining atomic.Bool // a graceful stop has begun: /readyz says so
}

// newInstance builds and wires the components and binds every listener, so that an
// unusable state directory or a bind error is reported (exit 2) before anything runs or
// any route table is applied.
func newInstance(o options, d instanceDeps) (*instance, error) {
	log := d.log
	in := &instance{opts: o, log: log}
	nodeID := d.env.NodeID
	if nodeID == "" {
		nodeID = "standalone"
	}
	in.stats = stats.NewRegistry(stats.Options{
		NodeID:        nodeID,
		RetentionDays: o.RetentionDays,
		StateDir:      o.StateDir,
		Logger:        log.Named("stats"),
	})
	if err := prepareStateDir(o.StateDir); err != nil {
		return nil, configError{err}
	}
	if err := in.stats.Load(); err != nil {
		log.Warn("statistics snapshot ignored", zap.Error(err))
	}
	mode := routetable.ModeRelay
	if o.Routes != "" || d.routesDoc != nil {
		mode = routetable.ModeStandalone
	}
	// Tables come from the relay, which may echo the bearer or a private key into them:
	// the store scrubs its violations and warnings. Unlike the relay's other texts (which
	// the session logs by fingerprint only), violations keep the values they quote: the
	// table is the relay's configuration, whose hostnames and ids are logged and exported
	// as metric labels by design once applied, so withholding them from violations would
	// close no channel and leave a refused table undiagnosable.
	storeLog := log.Named("routetable")
	if o.Routes != "" {
		storeLog = storeLog.With(zap.String("file", o.Routes)) // every refusal names the file
	}
	in.store = routetable.NewStore(routetable.StoreOptions{
		Stats: in.stats, StateDir: o.StateDir, Logger: storeLog, Mode: mode,
		Redact: redact.Chain(d.env.Bearer.Scrubber()), Check: acmeCheck(o),
	})
	if mode == routetable.ModeStandalone {
		var err error
		if in.acme, err = newACME(o, in.store, log); err != nil {
			return nil, configError{err}
		}
	}

	totals := new(stats.Totals)
	var access *zap.Logger
	if o.AccessLog {
		access = accessLogger(log).Named("access")
	}
	p, err := proxy.New(proxy.Config{
		HTTPAddr:              o.HTTPAddr,
		HTTPSAddr:             o.HTTPSAddr,
		HTTP3:                 o.HTTP3,
		Tables:                in.store,
		Totals:                totals,
		Logger:                log.Named("proxy"),
		TrustedProxies:        o.trusted,
		ProxyProtocolFrom:     o.balancers,
		ProxyProtocolTimeout:  o.ProxyProtocolTimeout,
		DialTimeout:           o.DialTimeout,
		ResponseHeaderTimeout: o.ResponseHeaderTimeout,
		ReadHeaderTimeout:     o.ReadHeaderTimeout,
		IdleTimeout:           o.IdleTimeout,
		MaxHeaderBytes:        o.MaxHeaderBytes,
		ClientBodyTimeout:     o.ClientBodyTimeout,
		ClientSendTimeout:     o.ClientSendTimeout,
		TunnelIdleTimeout:     o.TunnelIdleTimeout,
		MaxConnsPerClient:     budgetFlag(o.MaxConnsPerClient),
		MaxRequestsPerClient:  budgetFlag(o.MaxRequestsPerClient),
		MaxTunnelsPerClient:   budgetFlag(o.MaxTunnelsPerClient),
		RequestBuffer:         o.requestBuffer(),
		MaxRequests:           budgetFlag(o.MaxRequests),
		RequestBufferTotal:    o.requestBufferTotal(),
		AccessLog:             access,
		PublicHTTPSPort:       o.PublicHTTPSPort,
		GetCertificate:        in.acmeGetCertificate(),
		NextProtos:            in.acmeNextProtos(),
		HTTPChallenge:         in.acmeHTTPChallenge(),
		ReleaseIdleMemory:     true,

		HTTP2MaxStreamsPerConn: o.HTTP2MaxStreamsPerConn,
	})
	if err != nil {
		return nil, configError{err}
	}
	in.proxy = p

	metrics := []prometheus.Collector{stats.NewCollector(in.stats, totals, stats.CollectorOptions{PerHost: o.MetricsPerHost})}
	metrics = append(metrics, in.store.Collectors()...)
	if in.acme != nil {
		metrics = append(metrics, in.acme.Collector())
	}
	if mode == routetable.ModeRelay {
		ropts := relay.Options{TLSConfig: d.relayTLS, Logger: log.Named("relay")}
		in.session = register.New(register.Config{
			Env:          d.env,
			Version:      version,
			Capabilities: capabilities(o.HTTP3 && o.HTTPSAddr != ""),
			Tables:       in.store,
			Stats:        in.stats,
			Relay:        ropts,
			Logger:       log.Named("session"),
		})
		metrics = append(metrics, in.session.Collectors()...)
	}
	reg, err := newMetricsRegistry(metrics...)
	if err != nil {
		return nil, err
	}

	if err := in.proxy.Listen(); err != nil {
		return nil, listenError(o, err)
	}
	if o.AdminAddr != "" {
		ln, err := net.Listen("tcp", o.AdminAddr)
		if err != nil {
			_ = in.proxy.Shutdown(context.Background())
			return nil, configError{fmt.Errorf("--admin-addr %s: cannot listen: %w%s", o.AdminAddr, err, listenHint(err))}
		}
		in.adminLn = ln
		in.adminSrv = &http.Server{
			Handler:           adminHandler(reg, in.notReady, in.explain, in.stats.Handler()),
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          zap.NewStdLog(log.Named("admin")),
		}
	}

	// Only now, with every listener bound, is a table applied.
	if err := in.loadRoutes(o, d); err != nil {
		_ = in.proxy.Shutdown(context.Background())
		if in.adminLn != nil {
			_ = in.adminLn.Close()
		}
		return nil, err
	}
	return in, nil
}

// loadRoutes applies the first table: the routes file (standalone) or `ingress proxy`'s
// route, or the last known good table of the state directory (relay mode).
func (in *instance) loadRoutes(o options, d instanceDeps) error {
	switch {
	case d.routesDoc != nil:
		in.watcher = routetable.NewFileSource("", in.store, routetable.FileSourceOptions{
			Logger: in.log.Named("routes"), Document: d.routesDoc})
		if err := in.watcher.Load(); err != nil {
			return configError{fmt.Errorf("the route refused:\n%w", err)}
		}
	case o.Routes != "":
		in.watcher = routetable.NewFileSource(o.Routes, in.store, routetable.FileSourceOptions{Logger: in.log.Named("routes"), Prepared: d.routes})
		if err := in.watcher.Load(); err != nil {
			return configError{fmt.Errorf("--routes %s refused:\n%w", o.Routes, err)}
		}
	case o.StateDir != "":
		// Serve the last known good routes before the relay answers.
		if err := in.store.LoadState(); err != nil {
			in.log.Warn("last known route table ignored", zap.Error(err))
		}
	}
	return nil
}

// ready is /readyz: a table is applied, the listeners are up and no stop has begun.
func (in *instance) ready() bool { return in.notReady() == "" }

// notReady says why the instance is not ready, or "" when it is.
func (in *instance) notReady() string {
	switch {
	case in.draining.Load():
		return "draining: stopping gracefully, in-flight requests finishing"
	case in.store.Load() == nil:
		return "no route table applied"
	case !in.proxy.Ready():
		return "listeners not up"
	}
	return ""
}

// adminAddr returns the bound admin address, or nil.
func (in *instance) adminAddr() net.Addr {
	if in.adminLn == nil {
		return nil
	}
	return in.adminLn.Addr()
}

// run serves until ctx ends or a part fails, then stops in two stages: the listeners
// stop accepting and in-flight requests get --drain-timeout to finish, then everything
// left is closed; the statistics are persisted last (stats.Registry.Run writes a final
// snapshot when its context ends, after the drain). Every goroutine it starts runs in one
// errgroup: the first that fails ends the group's context, which starts that stop, and
// run returns its error. It returns nil after a graceful stop.
func (in *instance) run(ctx context.Context) error {
	g, stopping := errgroup.WithContext(ctx)
	// The parts run on bg, which ends only after the drain (the second stage), so that
	// the session, the watcher and the statistics keep working while requests finish.
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()
	part := func(name string, fn func(context.Context) error) {
		g.Go(func() error {
			if err := fn(bg); err != nil && bg.Err() == nil {
				in.log.Error(name+" stopped", zap.Error(err))
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		})
	}
	http1, https := in.proxy.Addrs()
	if in.acme != nil {
		part("acme", func(ctx context.Context) error { return in.acme.Run(ctx, http1, https) })
		// The listeners are bound (connections wait in their backlog): they are served
		// once the stored certificates are in the cache, so a restart's first handshake
		// gets its certificate, not unrecognized_name.
		select {
		case <-in.acme.Started():
		case <-stopping.Done():
		}
	}
	part("proxy", func(ctx context.Context) error {
		// ErrClosed: the stop (a signal at once after the start) shut the server down
		// before this goroutine got to Serve: nothing was served, nothing failed.
		if err := in.proxy.Serve(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, proxy.ErrClosed) {
			return err
		}
		return nil
	})
	if in.adminSrv != nil {
		part("admin listener", func(context.Context) error {
			if err := in.adminSrv.Serve(in.adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	part("statistics", func(ctx context.Context) error { in.stats.Run(ctx); return nil })
	if in.session != nil {
		part("relay session", in.session.Run)
	}
	if in.watcher != nil {
		part("routes watcher", in.watcher.Run)
	}
	if hup := hangups(ctx); hup != nil {
		part("SIGHUP", func(ctx context.Context) error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-hup:
					in.hangup()
				}
			}
		})
	}
	if why := vulnerableGo(goVersion()); why != "" {
		in.log.Warn(why)
	}
	in.log.Info("ingress started", zap.String("version", version), zap.String("go", goVersion()),
		zap.Stringer("http", addrString{http1}), zap.Stringer("https", addrString{https}),
		zap.Stringer("http3", addrString{in.proxy.HTTP3Addr()}),
		zap.Stringer("admin", addrString{in.adminAddr()}))

	g.Go(func() error {
		<-stopping.Done() // ctx ended, or a part failed
		in.draining.Store(true)
		in.log.Info("stopping: draining in-flight requests", zap.Duration("drainTimeout", in.opts.DrainTimeout))
		drain, cancel := context.WithTimeout(context.Background(), in.opts.DrainTimeout)
		defer cancel()
		if err := in.proxy.Shutdown(drain); err != nil {
			in.log.Warn("drain ended before every request finished", zap.Error(err))
		}
		stopBG() // second stage: every part stops; the statistics write their snapshot
		if in.adminSrv != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = in.adminSrv.Shutdown(sctx)
		}
		return nil
	})
	err := g.Wait()
	in.log.Info("stopped")
	return err
}

// hangup is SIGHUP: re-read the routes file and its certificate files (standalone,
// `ingress proxy`), or pull the route table from the relay now. It never stops anything.
func (in *instance) hangup() {
	switch {
	case in.watcher != nil && in.opts.Routes != "":
		in.log.Info("SIGHUP: reloading the routes file")
		in.watcher.Reload()
	case in.watcher != nil:
		in.log.Info("SIGHUP: reloading the certificate files")
		in.watcher.Reload()
	case in.session != nil:
		in.log.Info("SIGHUP: pulling the route table from the relay")
		in.session.RequestPull()
	}
}

type addrString struct{ a net.Addr }

func (a addrString) String() string {
	if a.a == nil {
		return "off"
	}
	return a.a.String()
}
