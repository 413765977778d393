package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// prepareStateDir makes sure --state-dir can do its job before anything depends on it:
// it exists or can be created (0700), is a directory, a file can be created, written,
// synced and removed in it (the way the state files are replaced), and the state files
// already there can be read. Otherwise the earlier statistics would be silently dropped
// and every save would fail while /readyz said ready. An empty dir is no state directory.
func prepareStateDir(dir string) error {
	if dir == "" {
		return nil
	}
	who := fmt.Sprintf("uid %d, gid %d", os.Geteuid(), os.Getegid())
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("--state-dir %s cannot be created (running as %s): %w", dir, who, err)
		}
		fi, err = os.Stat(dir)
	}
	if err != nil {
		return fmt.Errorf("--state-dir %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("--state-dir %s is not a directory", dir)
	}
	probe, err := os.CreateTemp(dir, ".ingress-write-probe-*")
	if err != nil {
		return fmt.Errorf("--state-dir %s is not writable by this process (running as %s; the container image runs as 65532:65532): %w", dir, who, err)
	}
	_, werr := probe.Write([]byte("probe\n"))
	serr := probe.Sync()
	cerr := probe.Close()
	rerr := os.Remove(probe.Name())
	if err := errors.Join(werr, serr, cerr, rerr); err != nil {
		return fmt.Errorf("--state-dir %s is not writable by this process (running as %s): %w", dir, who, err)
	}
	for _, name := range []string{routetable.StateFile, stats.SnapshotFile} {
		path := filepath.Join(dir, name)
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			_, err = f.Read(make([]byte, 1))
			_ = f.Close()
			if err == io.EOF {
				err = nil
			}
		}
		if err != nil {
			return fmt.Errorf("--state-dir: %s cannot be read (running as %s): %w", path, who, err)
		}
	}
	return nil
}

// listenError names the flag and address of the listener that could not bind (exit 2).
func listenError(o options, err error) error {
	name, addr := "", ""
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Addr != nil {
		got := oe.Addr.String()
		switch {
		case strings.HasPrefix(oe.Net, "udp"):
			name, addr = "https-addr", o.HTTPSAddr
			err = fmt.Errorf("%w (HTTP/3 is served on UDP at the same address; --http3=false turns it off)", err)
		case sameListenAddr(got, o.HTTPAddr):
			name, addr = "http-addr", o.HTTPAddr
		case sameListenAddr(got, o.HTTPSAddr):
			name, addr = "https-addr", o.HTTPSAddr
		}
	}
	if name == "" {
		return configError{fmt.Errorf("cannot listen: %w%s", err, listenHint(err))}
	}
	return configError{fmt.Errorf("--%s %s: cannot listen: %w%s", name, addr, err, listenHint(err))}
}

// sameListenAddr reports whether the address an OpError names is the one a flag gave.
func sameListenAddr(got, flagAddr string) bool {
	if flagAddr == "" {
		return false
	}
	if got == flagAddr {
		return true
	}
	gh, gp, err1 := net.SplitHostPort(got)
	fh, fp, err2 := net.SplitHostPort(flagAddr)
	if err1 != nil || err2 != nil || gp != fp {
		return false
	}
	if fh == "localhost" {
		return true
	}
	return gh == fh || gh == "" || fh == ""
}

// listenHint adds the usual cure of a bind error.
func listenHint(err error) string {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return "; another process (or another ingress) has that port: stop it or choose another address"
	case errors.Is(err, syscall.EACCES):
		return "; ports below 1024 need CAP_NET_BIND_SERVICE (see docs/deployment.md: Running without root), or choose a port above 1023"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "; no interface of this machine has that address"
	}
	return ""
}
