package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/serve-zone/ingress/env"
	"github.com/serve-zone/ingress/routetable"
)

// quickStart is what `ingress proxy` serves: one route per --from hostname, all with the
// same targets and, with --tls-cert and --tls-key, the same certificate or, with --acme,
// a certificate per hostname obtained and renewed over ACME.
type quickStart struct {
	from, to  listFlag
	cert, key string
	acme      bool
	redirect  bool
}

// listFlag collects a repeated flag; a value may also list several, comma-separated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}

// runProxy is `ingress proxy --from HOST --to ADDR [--to ADDR]... [--tls-cert FILE
// --tls-key FILE | --acme ...]`: a standalone ingress whose table is built from the command
// line instead of read from a file (its certificate files are read and watched the same
// way; with --acme the acme package obtains its certificates, as for a file's "tls.acme"
// routes).
func runProxy(ctx context.Context, args []string, stderr io.Writer, lookup func(string) (string, bool)) error {
	in, stop, err := newProxyInstance(args, stderr, lookup)
	if err != nil {
		return err
	}
	defer stop()
	return in.run(ctx)
}

// newProxyInstance judges `ingress proxy`'s command line and builds its instance,
// listeners bound and the route applied, without running it; stop ends the process's
// logger and profile after the run.
func newProxyInstance(args []string, stderr io.Writer, lookup func(string) (string, bool)) (*instance, func(), error) {
	o := defaultOptions()
	o.LogFormat = "console" // a person is watching; --log-format json for machines
	fs := o.flagSet("ingress proxy", stderr)
	var q quickStart
	fs.Var(&q.from, "from", "the hostname to serve, a lowercase DNS name or *.name (repeat it, or separate by commas, for several)")
	fs.Var(&q.to, "to", "a target: IPv4:port, localhost:port or :port (loopback); repeat it, or separate by commas, for several")
	fs.StringVar(&q.cert, "tls-cert", "", "PEM certificate file (the leaf first, then its chain) covering every --from: serve TLS with it")
	fs.StringVar(&q.key, "tls-key", "", "PEM private key file of --tls-cert (PKCS#1, PKCS#8 or SEC 1)")
	fs.BoolVar(&q.acme, "acme", false, "serve TLS with a certificate for each --from obtained and renewed over ACME (Let's Encrypt unless --acme-ca); needs --state-dir (or --acme-storage), --acme-email and --acme-agree")
	fs.BoolVar(&q.redirect, "redirect-http", false, "with TLS: answer plain HTTP with a 308 redirect to https instead of serving it")
	if err := parseFlags(fs, "proxy", args, lookup); err != nil {
		return nil, nil, err
	}
	var problems []error
	if err := o.validate(); err != nil {
		problems = append(problems, err)
	}
	// Without a certificate nothing needs a TLS listener: none is bound, TCP or UDP, so
	// that a plain quick start runs as printed for a user who may not bind :443.
	unusedHTTPS := ""
	if q.cert == "" && q.key == "" && !q.acme {
		if o.HTTPAddr == "" {
			problems = append(problems, errors.New("--http-addr is empty and the route has no TLS (--tls-cert and --tls-key, or --acme): nothing would be served"))
		}
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "https-addr" && o.HTTPSAddr != "" {
				unusedHTTPS = o.HTTPSAddr
			}
		})
		o.HTTPSAddr = ""
	}
	if o.Routes != "" {
		problems = append(problems, errors.New("--routes has no use with ingress proxy, which builds its route from --from and --to (run ingress --routes FILE instead)"))
	}
	if o.RelayCA != "" || o.AllowInsecureRelay {
		problems = append(problems, errors.New("--relay-ca and --allow-insecure-relay have no use with ingress proxy (it has no relay)"))
	}
	var extra func(*routetable.Table) []string // the store's ACME rule, once --acme is sound
	if err := q.checkACME(o); err != nil {
		problems = append(problems, err)
	} else {
		extra = acmeCheck(o)
	}
	doc, err := q.document()
	if err != nil {
		problems = append(problems, err)
	} else if err := checkQuickStart(doc, extra); err != nil {
		problems = append(problems, err)
	}
	if err := o.loadACMERoots(); err != nil {
		problems = append(problems, err)
	}
	log, stop, err := startProcess(o, problems, stderr)
	if err != nil {
		return nil, nil, err
	}

	var ec env.Config
	if node, ok := lookup(env.VarNodeID); ok && env.IsID(node) {
		ec.NodeID = node
	}
	in, err := newInstance(o, instanceDeps{env: ec, log: log, routesDoc: doc})
	if err != nil {
		stop()
		return nil, nil, err
	}
	tlsFrom := "off"
	switch {
	case q.acme:
		tlsFrom = "acme " + o.ACME.CA
	case q.cert != "":
		tlsFrom = "files"
	}
	if unusedHTTPS != "" {
		log.Info("--https-addr not bound: the route has no TLS (--tls-cert and --tls-key, or --acme, give it a certificate)",
			zap.String("httpsAddr", unusedHTTPS))
	}
	log.Info("quick start: one route from the command line",
		zap.Strings("from", q.from), zap.Strings("to", q.to), zap.String("tls", tlsFrom),
		zap.Bool("redirectHttp", q.redirect && (q.cert != "" || q.acme)))
	return in, stop, nil
}

// checkACME judges --acme against the rest of the command line: it needs a state
// directory (the certificates and the account key), a contact address, the CA's terms
// agreed to and a TLS listener, and excludes certificate files and wildcards.
func (q *quickStart) checkACME(o options) error {
	if !q.acme {
		if o.ACME.Storage != "" {
			return errors.New("--acme-storage has no use without --acme")
		}
		return nil
	}
	var problems []error
	var missing []string
	if o.StateDir == "" && o.ACME.Storage == "" {
		missing = append(missing, "--state-dir DIR (where the certificates and the ACME account key are kept across restarts; or --acme-storage URL, where replicas share them)")
	}
	if o.ACME.Email == "" {
		missing = append(missing, "--acme-email ADDRESS (the ACME account's contact, where the CA sends expiry notices)")
	}
	if !o.ACME.Agree {
		missing = append(missing, "--acme-agree (agreeing to the CA's terms of service)")
	}
	if o.HTTPSAddr == "" {
		missing = append(missing, "--https-addr (the TLS listener that serves the certificate)")
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Errorf("--acme needs %s", strings.Join(missing, ", ")))
	}
	if q.cert != "" || q.key != "" {
		problems = append(problems, errors.New("--acme and --tls-cert/--tls-key both give the certificate: use one or the other"))
	}
	for _, from := range q.from {
		if strings.HasPrefix(from, "*.") {
			problems = append(problems, fmt.Errorf("--acme cannot obtain a certificate for --from %q: a wildcard needs the DNS-01 challenge, which the ingress does not answer (name each hostname, or use --tls-cert and --tls-key)", from))
		}
	}
	return errors.Join(problems...)
}

// document builds the standalone table of the quick start, or says which flag is wrong.
func (q *quickStart) document() ([]byte, error) {
	var problems []error
	if len(q.from) == 0 {
		problems = append(problems, errors.New("--from is missing: name the hostname to serve, e.g. --from app.example.test"))
	}
	if len(q.to) == 0 {
		problems = append(problems, errors.New("--to is missing: name a target, e.g. --to 127.0.0.1:3000"))
	}
	if (q.cert == "") != (q.key == "") {
		problems = append(problems, errors.New("--tls-cert and --tls-key go together: give both to serve TLS, or neither"))
	}
	if q.redirect && q.cert == "" && !q.acme {
		problems = append(problems, errors.New("--redirect-http needs --acme, or --tls-cert and --tls-key: without TLS there is nothing to redirect to"))
	}
	var targets []routetable.Target
	for i, to := range q.to {
		addr, port, err := quickTarget(to)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		targets = append(targets, routetable.Target{LeaseID: "target-" + strconv.Itoa(i+1), Address: addr, Port: port})
	}
	// The certificate by file, as a standalone file names it (routetable.Certificate
	// carries PEM on the wire).
	type certificate struct {
		ID              string `json:"id"`
		CertificateFile string `json:"certificateFile"`
		PrivateKeyFile  string `json:"privateKeyFile"`
	}
	doc := struct {
		Revision     int64              `json:"revision"`
		Routes       []routetable.Route `json:"routes"`
		Certificates []certificate      `json:"certificates"`
	}{Revision: 1, Routes: []routetable.Route{}, Certificates: []certificate{}}
	var tlsOn *routetable.RouteTLS
	if q.cert != "" && q.key != "" {
		cert, err1 := filepath.Abs(q.cert)
		key, err2 := filepath.Abs(q.key)
		if err := errors.Join(err1, err2); err != nil {
			problems = append(problems, err)
		}
		doc.Certificates = append(doc.Certificates, certificate{ID: "quick-start", CertificateFile: cert, PrivateKeyFile: key})
		tlsOn = &routetable.RouteTLS{CertificateID: "quick-start", RedirectHTTP: q.redirect}
	} else if q.acme {
		tlsOn = &routetable.RouteTLS{ACME: true, RedirectHTTP: q.redirect}
	}
	for _, from := range q.from {
		host := strings.TrimSuffix(strings.ToLower(from), ".")
		if !routetable.ValidHostname(host) {
			problems = append(problems, fmt.Errorf("--from %q must be a DNS name such as app.example.test (letters, digits, '-', dots), or *.example.test", from))
			continue
		}
		doc.Routes = append(doc.Routes, routetable.Route{Hostname: host, Targets: targets, TLS: tlsOn})
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// quickTarget reads one --to: IPv4:port, localhost:port, :port or a bare port (the last
// three on 127.0.0.1). Names are not resolved: the route table holds addresses.
func quickTarget(to string) (string, int, error) {
	host, p, err := net.SplitHostPort(to)
	if err != nil {
		if _, nerr := strconv.Atoi(to); nerr != nil {
			return "", 0, fmt.Errorf("--to %q must be address:port, such as 127.0.0.1:3000, localhost:3000 or :3000", to)
		}
		host, p = "", to
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("--to %q: the port must be a number from 1 to 65535", to)
	}
	if host == "" || host == "localhost" {
		host = "127.0.0.1"
	}
	if !routetable.ValidTargetAddress(host) {
		return "", 0, fmt.Errorf("--to %q: the address must be an IPv4 address such as 10.0.0.5 (names are not resolved; 0.0.0.0/8 and multicast are refused)", to)
	}
	return host, port, nil
}

// checkQuickStart judges the quick start's table as the instance will (with extra, when
// set, as the store's extra rule), so that a bad certificate is reported with the other
// problems, in terms of the flags.
func checkQuickStart(doc []byte, extra func(*routetable.Table) []string) error {
	t, _, err := routetable.DecodeFile(doc, ".")
	if err == nil {
		_, err = routetable.Validate(t, routetable.ModeStandalone)
	}
	if err == nil && extra != nil {
		if v := extra(t); len(v) > 0 {
			err = &routetable.Error{Violations: v}
		}
	}
	var re *routetable.Error
	if !errors.As(err, &re) {
		return err
	}
	var problems []error
	for _, v := range re.Violations {
		problems = append(problems, errors.New(quickStartViolation(v)))
	}
	return errors.Join(problems...)
}

// quickStartRewrites turn a violation's JSON path into the flag behind it.
var quickStartRewrites = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`^certificates\[0\]\.certificateFile`), "--tls-cert"},
	{regexp.MustCompile(`^certificates\[0\]\.privateKeyFile`), "--tls-key"},
	{regexp.MustCompile(`^certificates\[0\] \(id "quick-start"\)`), "--tls-cert"},
	{regexp.MustCompile(`^routes\[\d+\]\.tls\.certificateId names certificates\[0\], whose leaf`), "--tls-cert: the certificate"},
	{regexp.MustCompile(`^routes\[\d+\]\.targets\[\d+\] repeats routes\[\d+\]\.targets\[\d+\] \(the same address and port\)`), "--to: a target is given twice"},
	{regexp.MustCompile(`^routes\[\d+\]\.hostname repeats routes\[\d+\]\.hostname`), "--from: a hostname is given twice:"},
	{regexp.MustCompile(`^routes\[\d+\]\.tls\.acme`), "--acme"},
	{regexp.MustCompile(`^routes\[\d+\]\.targets`), "--to"},
	{regexp.MustCompile(`^routes\[\d+\]\.hostname`), "--from"},
}

func quickStartViolation(v string) string {
	for _, r := range quickStartRewrites {
		if r.re.MatchString(v) {
			return r.re.ReplaceAllLiteralString(v, r.with)
		}
	}
	return v
}
