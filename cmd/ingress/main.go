// Command ingress is the serve.zone cluster ingress: it registers with the cluster's relay
// (or reads a route-table file in standalone mode) and forwards public HTTP/1.1, HTTP/2,
// HTTP/3 and WebSocket traffic to workload leases, counting it per day and hostname.
//
//	ingress [flags]             run as the cluster's ingress (SERVEZONE_* variables) or standalone (--routes)
//	ingress demo [flags]        run a self-contained demo: relay, backends and ingress on loopback
//	ingress version             print the version
//	ingress healthcheck [addr]  ask the admin listener's /healthz (for container health checks)
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
	ctx, stop := signalContext()
	defer stop()

	var err error
	if cmd == "" || cmd == "demo" {
		tuneRuntime(lookup)
	}
	switch cmd {
	case "":
		err = runIngress(ctx, args, stderr, lookup)
	case "demo":
		err = runDemo(ctx, args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, version)
		return 0
	case "healthcheck":
		err = runHealthcheck(args, stdout)
	default:
		err = configError{fmt.Errorf("unknown command %q (want demo, version or healthcheck)", cmd)}
	}
	if err == nil {
		return 0
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
// stop); a second signal ends the process at once.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan struct{})
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
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}
}
