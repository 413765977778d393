package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/serve-zone/ingress/routetable"
)

// exitStatus is an error that only sets the exit status: the command printed everything.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// validateListLimit bounds the routes and certificates `ingress validate` lists.
const validateListLimit = 50

// runValidate is `ingress validate [--relay] FILE|-`: the file judged by the decoder and
// validator the running ingress uses (routetable.DecodeFile and Validate in standalone
// mode, or Decode and Validate in relay mode with --relay). A valid file prints a summary
// on stdout and returns nil; a refused one prints every violation on stderr and exits 2.
// Warnings (a certificate expired or expiring within 14 days, ...) go to stderr and do
// not change the outcome.
func runValidate(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ingress validate", flag.ContinueOnError)
	relayMode := fs.Bool("relay", false, "judge the file as a relay's route table (contract §6 exactly: strict order, PEM strings, no acme) instead of a standalone route file")
	friendlyValues(fs)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return helpRequest{cmd: "validate", fs: fs}
		}
		return configError{fmt.Errorf("validate: %s (ingress validate -h shows its usage)", doubleDash(err.Error()))}
	}
	if fs.NArg() != 1 {
		return configError{errors.New("validate: name one route file, or - for standard input (ingress validate -h shows the usage)")}
	}
	name := fs.Arg(0)
	var (
		data []byte
		err  error
		dir  string
	)
	if name == "-" {
		data, err = io.ReadAll(stdin)
		name, dir = "(standard input)", "."
	} else {
		data, err = os.ReadFile(name)
		dir = filepath.Dir(name)
	}
	if err != nil {
		return configError{fmt.Errorf("validate: %w", err)}
	}

	mode := routetable.ModeStandalone
	kind := "standalone route file"
	var t *routetable.Table
	if *relayMode {
		mode, kind = routetable.ModeRelay, "relay route table"
		t, err = routetable.Decode(data, mode)
	} else {
		t, _, err = routetable.DecodeFile(data, dir)
	}
	var warnings []string
	if err == nil {
		warnings, err = routetable.Validate(t, mode)
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "%s: warning: %s\n", name, w)
	}
	if err != nil {
		var re *routetable.Error
		if !errors.As(err, &re) {
			return configError{fmt.Errorf("validate: %s: %w", name, err)}
		}
		n := len(re.Violations)
		fmt.Fprintf(stderr, "%s: refused (%s), %d %s:\n", name, kind, n, plural(n, "violation", "violations"))
		for _, v := range re.Violations {
			fmt.Fprintf(stderr, "  %s\n", v)
		}
		return exitStatus(exitConfig)
	}
	writeSummary(stdout, name, kind, t)
	return nil
}

// writeSummary lists what a valid table serves: its certificates (names, validity) and
// its routes (targets, and how plain HTTP and TLS are served).
func writeSummary(w io.Writer, name, kind string, t *routetable.Table) {
	fmt.Fprintf(w, "%s: valid %s: revision %d, %d %s, %d %s\n", name, kind, t.Revision,
		len(t.Routes), plural(len(t.Routes), "route", "routes"),
		len(t.Certificates), plural(len(t.Certificates), "certificate", "certificates"))
	certs := slices.Clone(t.Certificates)
	slices.SortFunc(certs, func(a, b routetable.Certificate) int { return strings.Compare(a.ID, b.ID) })
	for i, c := range certs {
		if i == validateListLimit {
			fmt.Fprintf(w, "  … and %d more certificates\n", len(certs)-i)
			break
		}
		from := ""
		if c.CertificateFile != "" {
			from = " from " + c.CertificateFile
		}
		fmt.Fprintf(w, "  certificate %s%s: %s\n", c.ID, from, leafSummary(c.CertificatePEM))
	}
	routes := slices.Clone(t.Routes)
	slices.SortFunc(routes, func(a, b routetable.Route) int { return strings.Compare(a.Hostname, b.Hostname) })
	for i, r := range routes {
		if i == validateListLimit {
			fmt.Fprintf(w, "  … and %d more routes\n", len(routes)-i)
			break
		}
		var how string
		switch {
		case r.TLS == nil:
			how = "plain HTTP only"
		case r.TLS.ACME && r.TLS.RedirectHTTP:
			how = "TLS by ACME; plain HTTP redirected (308)"
		case r.TLS.ACME:
			how = "TLS by ACME; plain HTTP served too"
		case r.TLS.RedirectHTTP:
			how = "TLS with " + r.TLS.CertificateID + "; plain HTTP redirected (308)"
		default:
			how = "TLS with " + r.TLS.CertificateID + "; plain HTTP served too"
		}
		fmt.Fprintf(w, "  route %s: %d %s, %s\n", r.Hostname, len(r.Targets), plural(len(r.Targets), "target", "targets"), how)
	}
}

// leafSummary names a valid certificate's leaf: its DNS names and its validity.
func leafSummary(certPEM string) string {
	b, _ := pem.Decode([]byte(certPEM))
	if b == nil {
		return "?"
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return "?"
	}
	left := time.Until(leaf.NotAfter)
	days := int(left / (24 * time.Hour))
	return fmt.Sprintf("%s; valid until %s (%d %s left)", strings.Join(leaf.DNSNames, ", "),
		leaf.NotAfter.UTC().Format(time.RFC3339), days, plural(days, "day", "days"))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
