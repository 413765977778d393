package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/echotest"
	"github.com/serve-zone/ingress/internal/redistest"
)

// storagePassword is the shared store's password in these tests.
const storagePassword = "Zq7-w9Kx3-Tb8Lm2-Vd5Rj"

// acmeRoutesFile writes a routes file with one ACME route and returns its path.
func acmeRoutesFile(t *testing.T) string {
	t.Helper()
	_, target := echoBackend(t, "backend", 0)
	file := filepath.Join(t.TempDir(), "routes.json")
	if err := os.WriteFile(file, binarytest.TableJSON(t, 1, nil, acmeRoute("auto.example.test", true, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// writeSecret writes a password file (with the trailing newline an editor leaves).
func writeSecret(t *testing.T, secret string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(f, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// runRefused runs the ingress in this process and expects it refused (exit status 2)
// with every want in its stderr and no line that holds the password in any encoding.
func runRefused(t *testing.T, args []string, env map[string]string, wants ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	code := realMain(args, io.Discard, &stderr, lookup)
	out := stderr.String()
	if code != exitConfig {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitConfig, out)
	}
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("stderr lacks %q:\n%s", w, out)
		}
	}
	assertNoPassword(t, out)
	return out
}

// assertNoPassword fails when a line holds 8 bytes in a row of the password, as it is or
// after up to two decodings (entities, %xx, escapes, hex, base64, reversal, rot13).
func assertNoPassword(t *testing.T, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if echotest.HoldsSecret(line, storagePassword, 8, 2) {
			t.Errorf("a line holds the store's password in some encoding: %s", line)
			return
		}
	}
}

// TestACMEStorageFlagsRefused: bad --acme-storage* settings (flags or INGRESS_*
// variables) are refused at start with exit status 2, each named, none quoting the URL's
// password.
func TestACMEStorageFlagsRefused(t *testing.T) {
	routes := acmeRoutesFile(t)
	pwFile := writeSecret(t, storagePassword)
	base := binarytest.BaseArgs("--routes", routes, "--admin-addr", "")
	withPW := "redis://ingress:" + storagePassword + "@127.0.0.1:6390/0"
	for _, c := range []struct {
		name  string
		args  []string
		env   map[string]string
		wants []string
	}{
		{"scheme", []string{"--acme-storage", "http://ingress:" + storagePassword + "@127.0.0.1:1/0"}, nil,
			[]string{"--acme-storage: the URL must start with redis:// or rediss://"}},
		{"password twice", []string{"--acme-storage", withPW, "--acme-storage-password-file", pwFile}, nil,
			[]string{"--acme-storage has a password and --acme-storage-password-file gives one too"}},
		{"prefix", []string{"--acme-storage", withPW, "--acme-storage-prefix", "two words"}, nil,
			[]string{"--acme-storage-prefix: may hold only letters, digits and . _ - : /"}},
		{"port and query", []string{"--acme-storage", "redis://:" + storagePassword + "@127.0.0.1:99999/0?x=" + storagePassword}, nil,
			[]string{"--acme-storage: the URL"}},
		{"password file without store", []string{"--acme-storage-password-file", pwFile}, nil,
			[]string{"--acme-storage-password-file has no use without --acme-storage"}},
		{"missing password file", []string{"--acme-storage", "redis://127.0.0.1:6390/0", "--acme-storage-password-file", "/nonexistent/pw"}, nil,
			[]string{`--acme-storage-password-file: cannot read "/nonexistent/pw"`}},
		{"from the environment", nil, map[string]string{"INGRESS_ACME_STORAGE": "redis-tls://:" + storagePassword + "@h:1/0"},
			[]string{"--acme-storage: the URL must start with redis:// or rediss://"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			runRefused(t, append(append([]string{}, base...), c.args...), c.env, c.wants...)
		})
	}
	// Relay mode has no ACME routes: the flag is refused there.
	t.Run("relay mode", func(t *testing.T) {
		runRefused(t, append(binarytest.BaseArgs("--admin-addr", ""), "--acme-storage", withPW),
			map[string]string{"SERVEZONE_CLUSTER_INGRESS_BEARER": "b", "SERVEZONE_CLUSTER_RELAY_ORIGIN": "https://relay.example.test", "SERVEZONE_CLUSTER_NODE_ID": "n"},
			"--acme-storage has no use in relay mode")
	})
	t.Run("proxy without --acme", func(t *testing.T) {
		runRefused(t, []string{"proxy", "--from", "a.example.test", "--to", "127.0.0.1:1", "--http-addr", "127.0.0.1:0", "--admin-addr", "", "--acme-storage", withPW}, nil,
			"--acme-storage has no use without --acme")
	})
}

// TestACMEStorageAtStart: at start the ingress reaches the store and is refused (exit
// status 2, the URL with its password hidden, the reason) when the password is wrong or
// missing or nothing answers at the address. --acme-storage stands in for --state-dir.
func TestACMEStorageAtStart(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Password: storagePassword})
	routes := acmeRoutesFile(t)
	base := binarytest.BaseArgs("--routes", routes, "--admin-addr", "")
	port := strings.TrimPrefix(srv.Addr, "127.0.0.1:")
	runRefused(t, append(base, "--acme-storage", "redis://:wrong-"+storagePassword+"@"+srv.Addr+"/0"), nil,
		"ingress: --acme-storage redis://:xxxxx@127.0.0.1:"+port+"/0: redis ping: the server refused the user name or password (WRONGPASS; ")
	runRefused(t, append(base, "--acme-storage", srv.URL()), nil,
		"ingress: --acme-storage redis://127.0.0.1:"+port+"/0: redis ping: the server wants a password and was given none (NOAUTH; ")
	dead := deadPort(t)
	runRefused(t, append(base, "--acme-storage", "redis://127.0.0.1:"+dead+"/0", "--acme-storage-password-file", writeSecret(t, storagePassword)), nil,
		"ingress: --acme-storage redis://:xxxxx@127.0.0.1:"+dead+"/0: redis ping: cannot reach the server: dial tcp 127.0.0.1:"+dead+": connect: connection refused")
	// ingress proxy --acme takes --acme-storage for --state-dir too.
	out := runRefused(t, []string{"proxy", "--from", "quick.example.test", "--to", "127.0.0.1:1", "--acme", "--acme-agree", "--acme-email", "ops@example.test",
		"--http-addr", "127.0.0.1:0", "--https-addr", "127.0.0.1:0", "--admin-addr", "", "--acme-storage", "redis://127.0.0.1:" + dead + "/0"}, nil,
		"--acme-storage redis://127.0.0.1:"+dead+"/0: redis ping: cannot reach the server")
	if strings.Contains(out, "--state-dir") {
		t.Errorf("ingress proxy --acme with --acme-storage still asks for --state-dir:\n%s", out)
	}
}

// TestACMEStorageEchoedPassword: a server that echoes the password back (in every
// encoding of internal/echotest) as its answer to the handshake, as a protocol error, or
// as an answer after a handshake it accepted: the ingress is refused at start with the
// answer's fingerprint, and no output line holds the password.
func TestACMEStorageEchoedPassword(t *testing.T) {
	routes := acmeRoutesFile(t)
	base := binarytest.BaseArgs("--routes", routes, "--admin-addr", "")
	var encoded []string
	for _, e := range echotest.Encodings {
		encoded = append(encoded, e.Fn(storagePassword))
	}
	echo := strings.Join(encoded, " ")
	for _, c := range []struct {
		name   string
		answer func([]string) string
		want   string
	}{
		{"handshake refused", func([]string) string { return "-WRONGPASS " + echo + "\r\n" }, "(WRONGPASS; "},
		{"unknown code", func([]string) string { return "-" + storagePassword + " " + echo + "\r\n" }, "the server answered an error ("},
		{"protocol error", func([]string) string { return "?" + echo + "\r\n" }, "redis ping: "},
		{"answer after the handshake", func(args []string) string {
			switch strings.ToUpper(args[0]) {
			case "HELLO": // as a server older than Redis 6: the client falls back to AUTH
				return "-ERR unknown command 'HELLO'\r\n"
			case "AUTH":
				return "+OK\r\n"
			}
			return "-ERR " + echo + "\r\n"
		}, "redis ping: the server answered ERR ("},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := redistest.Fake(t, c.answer)
			out := runRefused(t, append(append([]string{}, base...), "--acme-storage", "redis://ingress:"+storagePassword+"@"+addr+"/0"), nil, c.want)
			for _, m := range encoded {
				if w, ok := echotest.SharesWindow(out, m, 8); ok {
					t.Errorf("stderr holds %q of the server's echo %q:\n%s", w, m, out)
					break
				}
			}
		})
	}
}

// TestE2EACMEStorageEchoWhileRunning: a store that takes the password, then answers every
// command with an error that echoes it (in every encoding of internal/echotest): the
// binary starts, reports the store as not answering (with the answer's fingerprint) and
// keeps retrying; no line of its output, debug included, holds the password or a run of
// the echo as it was sent.
func TestE2EACMEStorageEchoWhileRunning(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	var encoded []string
	for _, e := range echotest.Encodings {
		encoded = append(encoded, e.Fn(storagePassword))
	}
	echo := strings.Join(encoded, " ")
	addr := redistest.Fake(t, func(args []string) string {
		switch strings.ToUpper(args[0]) {
		case "HELLO":
			return "-ERR unknown command 'HELLO'\r\n"
		case "AUTH":
			return "+OK\r\n"
		case "PING":
			return "+PONG\r\n"
		}
		return "-ERR " + echo + "\r\n"
	})
	p := startIngress(t, nil, binarytest.BaseArgs("--routes", acmeRoutesFile(t), "--acme-agree",
		"--acme-ca", "https://127.0.0.1:"+deadPort(t)+"/dir",
		"--acme-storage", "redis://ingress@"+addr+"/0", "--acme-storage-password-file", writeSecret(t, storagePassword))...)
	line := p.WaitLine(e2eWait, func(m map[string]any) bool {
		return m["msg"] == "acme: the certificate store does not answer; the certificates held are served, orders and renewals wait for it"
	})
	if got := fmt.Sprint(line["error"]); !strings.Contains(got, "the server answered ERR (") || line["store"] != "redis://ingress:xxxxx@"+addr+"/0" {
		t.Errorf("the store's failure line: %v", line)
	}
	_, body := readyz(t, p.Admin)
	if !strings.Contains(body, "acme: degraded: the certificate store redis://ingress:xxxxx@"+addr+"/0 does not answer") {
		t.Errorf("/readyz does not explain the store:\n%s", body)
	}
	p.Stop(e2eWait)
	out := p.Output() + "\n" + body
	for _, m := range encoded {
		if w, ok := echotest.SharesWindow(out, m, 8); ok {
			t.Errorf("the output holds %q of the server's echo %q", w, m)
			break
		}
	}
	assertNoPassword(t, out)
}
