package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// defaultAdminAddr is --admin-addr's default, and where healthcheck asks without an
// address or INGRESS_ADMIN_ADDR.
const defaultAdminAddr = "127.0.0.1:9090"

// runHealthcheck asks the admin listener whether the ingress is ready (/readyz) or, with
// --live, running (/healthz); the container HEALTHCHECK runs it, because the runtime image
// has no curl. An unhealthy answer is an error (exit 1); a bad command line is a
// configError (exit 2).
func runHealthcheck(args []string, stdout io.Writer, lookup func(string) (string, bool)) error {
	fs := flag.NewFlagSet("ingress healthcheck", flag.ContinueOnError)
	live := fs.Bool("live", false, "ask /healthz (the process runs) instead of /readyz (a route table applied, the listeners up)")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	friendlyValues(fs)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return helpRequest{cmd: "healthcheck", fs: fs}
		}
		return configError{fmt.Errorf("healthcheck: %s (ingress healthcheck -h shows its usage)", doubleDash(err.Error()))}
	}
	if fs.NArg() > 1 {
		for _, a := range fs.Args()[1:] {
			if strings.HasPrefix(a, "-") {
				return configError{fmt.Errorf("healthcheck: %s: flags go before the address", a)}
			}
		}
		return configError{fmt.Errorf("healthcheck: one address or URL at most, got %q", fs.Args())}
	}
	if *timeout <= 0 {
		return configError{errors.New("healthcheck: --timeout must be positive")}
	}
	target := ""
	if fs.NArg() == 1 {
		target = fs.Arg(0)
	} else if v, ok := lookup(envName("admin-addr")); ok {
		if v == "" {
			return configError{fmt.Errorf("healthcheck: %s is empty: the admin listener is off, there is nothing to ask", envName("admin-addr"))}
		}
		target = v
	} else {
		target = defaultAdminAddr
	}
	path := "/readyz"
	if *live {
		path = "/healthz"
	}
	u, err := healthURL(target, path)
	if err != nil {
		return configError{fmt.Errorf("healthcheck: %w", err)}
	}
	client := http.Client{Timeout: *timeout}
	resp, err := client.Get(u)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Fprintln(stdout, "ok")
	return nil
}

// healthURL turns an address (host:port, :port) or a URL into the URL to ask. An address
// without a host, or with an unspecified one (0.0.0.0, ::), means loopback: that is where
// a listener bound to every interface is surely reachable from inside its container.
func healthURL(target, path string) (string, error) {
	if strings.HasPrefix(target, "-") {
		return "", fmt.Errorf("unknown flag %s (ingress healthcheck -h shows its usage)", target)
	}
	if strings.Contains(target, "://") {
		u, err := url.Parse(target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("%q is not an http:// or https:// URL", target)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = path
		}
		return u.String(), nil
	}
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return "", fmt.Errorf("%q is neither host:port, :port nor a URL", target)
	}
	if a, err := netip.ParseAddr(host); host == "" || err == nil && a.IsUnspecified() {
		host = "127.0.0.1"
		if err == nil && a.Is6() {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}
