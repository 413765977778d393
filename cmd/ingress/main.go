// Command ingress is the serve.zone cluster ingress: it registers with the cluster's relay
// (or reads a route-table file in standalone mode) and forwards public HTTP/1.1, HTTP/2,
// HTTP/3 and WebSocket traffic to workload leases, counting it per day and hostname.
//
//	ingress [flags]                         run as the cluster's ingress (SERVEZONE_* variables) or standalone (--routes)
//	ingress proxy --from HOST --to ADDR...  quick start: one route from the command line
//	ingress validate [--relay] FILE|-       check a route file as the running ingress would
//	ingress demo [flags]                    run a self-contained demo: relay, backends and ingress on loopback
//	ingress healthcheck [--live] [ADDR|URL] ask the admin listener's /readyz (for container health checks)
//	ingress version, ingress --version      print the version
//	ingress help [COMMAND]                  print the usage (also -h, --help)
//
// Exit status: 0 after a graceful stop, 2 when the configuration is refused, 1 otherwise.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is the ingress's semantic version, stamped at build time with
// -ldflags "-X main.version=1.2.3".
var version = "0.1.0-dev"

// exitConfig is the exit status of a refused configuration (contract §8).
const exitConfig = 2

// configError marks errors that exit with status 2.
type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }
func (e configError) Unwrap() error { return e.err }

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv))
}

// realMain runs the command and returns its exit status.
func realMain(args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) int {
	cmd := ""
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	if cmd == "" && len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		cmd, args = "version", args[1:]
	}
	if cmd == "help" { // ingress help [COMMAND]: the command's own -h
		if len(args) == 0 {
			return realMain([]string{"-h"}, stdout, stderr, lookup)
		}
		return realMain([]string{args[0], "-h"}, stdout, stderr, lookup)
	}
	ctx, stop := signalContext()
	defer stop()

	var err error
	if cmd == "" || cmd == "demo" || cmd == "proxy" {
		tuneRuntime(lookup)
	}
	switch cmd {
	case "":
		err = runIngress(ctx, args, stderr, lookup)
	case "demo":
		err = runDemo(ctx, args, stdout, stderr)
	case "proxy":
		err = runProxy(ctx, args, stderr, lookup)
	case "validate":
		err = runValidate(args, os.Stdin, stdout, stderr)
	case "version":
		if len(args) > 0 {
			if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
				err = helpRequest{cmd: "version"}
				break
			}
			err = configError{fmt.Errorf("unexpected arguments %q: ingress version takes none", args)}
			break
		}
		fmt.Fprintln(stdout, version)
		return 0
	case "healthcheck":
		err = runHealthcheck(args, stdout, lookup)
	default:
		err = configError{fmt.Errorf("unknown command %q (want proxy, validate, demo, healthcheck, version or help; ingress -h lists them)", cmd)}
	}
	if err == nil {
		return 0
	}
	var hr helpRequest
	if errors.As(err, &hr) {
		writeUsage(stdout, hr.cmd, hr.fs, hr.cmd == "" || hr.cmd == "proxy")
		return 0
	}
	var es exitStatus
	if errors.As(err, &es) { // the command has said everything
		return int(es)
	}
	var ce configError
	if errors.As(err, &ce) {
		for _, line := range splitLines(ce.err) {
			fmt.Fprintln(stderr, "ingress: "+line)
		}
		return exitConfig
	}
	fmt.Fprintln(stderr, "ingress: "+err.Error())
	return 1
}

func splitLines(err error) []string {
	var out []string
	start := 0
	s := err.Error()
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// signalContext returns a context that ends at the first SIGTERM or SIGINT (the graceful
// stop); a second signal ends the process at once. From the start SIGHUP never ends the
// process: each one is delivered to the channel hangups(ctx) returns, where a running
// instance reloads its routes or pulls its table (instance.run); coalesced, and ignored
// by commands that have nothing to reload.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	hupSig := make(chan os.Signal, 1)
	hup := make(chan struct{}, 1)
	signal.Notify(hupSig, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hupSig:
				select {
				case hup <- struct{}{}:
				default: // one is pending already
				}
			case <-done:
				return
			}
		}
	}()
	go func() {
		select {
		case <-ch:
			cancel()
		case <-done:
			return
		}
		select {
		case <-ch:
			fmt.Fprintln(os.Stderr, "ingress: second signal, stopping at once")
			os.Exit(1)
		case <-done:
		}
	}()
	return context.WithValue(ctx, hangupKey{}, (<-chan struct{})(hup)), func() {
		signal.Stop(ch)
		signal.Stop(hupSig)
		close(done)
		cancel()
	}
}

type hangupKey struct{}

// hangups returns the SIGHUP channel that signalContext put in ctx, or nil (in-process
// tests run instances without one).
func hangups(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(hangupKey{}).(<-chan struct{})
	return ch
}
