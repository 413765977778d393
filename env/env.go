// Package env reads and judges the SERVEZONE_* variables of contract §1.
//
// The bearer is held in a [Bearer], whose every printed form is "[redacted]"; only
// [Bearer.Reveal], called by the registration code, yields the value. env is a leaf: it
// imports nothing else of the project but the shared JSON vocabulary (internal/jsonx).
package env

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"

	"github.com/serve-zone/ingress/internal/jsonx"
)

// The variable names, spelled once (contract §1).
const (
	VarBearer      = "SERVEZONE_CLUSTER_INGRESS_BEARER"
	VarBearerFile  = "SERVEZONE_CLUSTER_INGRESS_BEARER_FILE"
	VarRelayOrigin = "SERVEZONE_CLUSTER_RELAY_ORIGIN"
	VarNodeID      = "SERVEZONE_CLUSTER_NODE_ID"
)

// maxBearerBytes bounds the bearer (contract §1).
const maxBearerBytes = 4096

// Config is the ingress's identity as the environment states it.
type Config struct {
	Bearer Bearer
	// RelayOrigin is the exact IClusterRelay.origin, e.g. "https://relay.example:8443".
	RelayOrigin string
	// NodeID is the node the ingress runs on.
	NodeID string
}

// Options change how Read judges the variables.
type Options struct {
	// AllowInsecureRelay accepts an http:// origin on a non-loopback host
	// (--allow-insecure-relay).
	AllowInsecureRelay bool
	// ReadFile reads SERVEZONE_CLUSTER_INGRESS_BEARER_FILE; nil means os.ReadFile.
	ReadFile func(string) ([]byte, error)
}

// Read judges the three variables found through lookup (os.LookupEnv in production) and
// returns every problem at once, one error per problem, each naming its variable and
// none quoting the bearer.
func Read(lookup func(string) (string, bool), opts Options) (Config, error) {
	if opts.ReadFile == nil {
		opts.ReadFile = os.ReadFile
	}
	var cfg Config
	var errs []error

	bearer, err := readBearer(lookup, opts.ReadFile)
	if err != nil {
		errs = append(errs, err)
	}
	cfg.Bearer = bearer

	origin, ok := lookup(VarRelayOrigin)
	switch {
	case !ok || origin == "":
		errs = append(errs, fmt.Errorf("%s is not set", VarRelayOrigin))
	default:
		if err := CheckOrigin(origin, opts.AllowInsecureRelay); err != nil {
			errs = append(errs, fmt.Errorf("%s %w", VarRelayOrigin, err))
		} else {
			cfg.RelayOrigin = origin
		}
	}

	node, ok := lookup(VarNodeID)
	switch {
	case !ok || node == "":
		errs = append(errs, fmt.Errorf("%s is not set", VarNodeID))
	case !IsID(node):
		errs = append(errs, fmt.Errorf("%s must be 1-128 characters of [A-Za-z0-9._:-] starting with a letter or digit", VarNodeID))
	default:
		cfg.NodeID = node
	}
	return cfg, errors.Join(errs...)
}

func readBearer(lookup func(string) (string, bool), readFile func(string) ([]byte, error)) (Bearer, error) {
	value, hasValue := lookup(VarBearer)
	file, hasFile := lookup(VarBearerFile)
	switch {
	case hasValue && hasFile:
		return Bearer{}, fmt.Errorf("%s and %s are both set; give only one", VarBearer, VarBearerFile)
	case hasFile:
		if file == "" {
			return Bearer{}, fmt.Errorf("%s is empty", VarBearerFile)
		}
		data, err := readFile(file)
		if err != nil {
			// The path is not secret, the content is; the error names only the path.
			return Bearer{}, fmt.Errorf("%s: cannot read %q: %v", VarBearerFile, file, errors.Unwrap(err))
		}
		s := strings.TrimSuffix(string(data), "\n")
		if err := checkBearer(s); err != nil {
			return Bearer{}, fmt.Errorf("%s: the file's content %w", VarBearerFile, err)
		}
		return Bearer{value: s}, nil
	case hasValue:
		if err := checkBearer(value); err != nil {
			return Bearer{}, fmt.Errorf("%s %w", VarBearer, err)
		}
		return Bearer{value: value}, nil
	}
	return Bearer{}, fmt.Errorf("%s is not set (nor %s)", VarBearer, VarBearerFile)
}

func checkBearer(s string) error {
	if s == "" {
		return errors.New("is empty")
	}
	if len(s) > maxBearerBytes {
		return fmt.Errorf("is longer than %d bytes", maxBearerBytes)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return errors.New("must be visible ASCII characters (0x21-0x7E) only")
		}
	}
	return nil
}

// CheckOrigin judges a relay origin: https://host[:port] with no path, query, fragment
// or user info; http:// only for a loopback host or when allowInsecure is set.
func CheckOrigin(origin string, allowInsecure bool) error {
	u, err := url.Parse(origin)
	if err != nil {
		return errors.New("must be an origin like https://relay.example[:port]")
	}
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		return errors.New("must start with https:// (or http:// for a loopback relay)")
	case u.Opaque != "" || u.Host == "":
		return errors.New("must name a host")
	case u.User != nil:
		return errors.New("must not carry user info")
	case u.Path != "" || u.RawPath != "":
		return errors.New("must not carry a path")
	case u.RawQuery != "" || u.ForceQuery:
		return errors.New("must not carry a query")
	case u.Fragment != "" || strings.Contains(origin, "#"):
		return errors.New("must not carry a fragment")
	}
	host := u.Hostname()
	if host == "" {
		return errors.New("must name a host")
	}
	if p := u.Port(); p != "" {
		if n, err := net.LookupPort("tcp", p); err != nil || n < 1 || n > 65535 || strings.HasPrefix(p, "0") {
			return errors.New("must have a port from 1 to 65535")
		}
	} else if strings.HasSuffix(u.Host, ":") {
		return errors.New("must have a port from 1 to 65535")
	}
	if u.Scheme == "http" && !allowInsecure && !IsLoopbackHost(host) {
		return errors.New("uses http:// on a non-loopback host; use https:// or pass --allow-insecure-relay")
	}
	return nil
}

// IsLoopbackHost reports whether host is localhost, in 127.0.0.0/8 or ::1.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback() && (a.Is4() || a == netip.IPv6Loopback())
}

// IsID reports whether s is a contract Id: 1-128 characters of [A-Za-z0-9._:-],
// starting with a letter or digit.
func IsID(s string) bool { return jsonx.IsID(s) }
