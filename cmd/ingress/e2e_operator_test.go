package main

// End-to-end tests of what an operator types (issue 15): the command line and its help,
// `ingress validate`, `ingress healthcheck`, `ingress proxy`, standalone files with
// certificate files, and the README's own walkthrough.

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testcert"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
)

// generatePair returns a fresh self-signed certificate for hosts and its key.
func generatePair(t *testing.T, hosts ...string) (certPEM, keyPEM string) {
	t.Helper()
	c, k, err := testcert.Generate(hosts...)
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}

// tlsConfigFor is a client TLS config with SNI host that accepts the test certificates.
func tlsConfigFor(host string) *tls.Config {
	return &tls.Config{ServerName: host, InsecureSkipVerify: true} //nolint:gosec // test certificates
}

// ran is one finished run of the binary.
type ran struct {
	code           int
	stdout, stderr string
}

// runBinary runs the binary to its end with only PATH and env in its environment.
func runBinary(t *testing.T, env []string, stdin string, args ...string) ran {
	t.Helper()
	cmd := exec.Command(buildBinary(t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
	case <-time.After(2 * e2eWait):
		_ = cmd.Process.Kill()
		t.Fatalf("ingress %q did not finish; stderr:\n%s", args, stderr.String())
	}
	return ran{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

func (r ran) want(t *testing.T, code int) ran {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	return r
}

// TestBinaryCommandLine: help on request exits 0 and says what the operator needs; refused
// flags say what a good value looks like, once, without burying it in the usage.
func TestBinaryCommandLine(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	usage := runBinary(t, nil, "", "-h").want(t, 0)
	assertContainsAll(t, "ingress -h", usage.stdout,
		"ingress proxy --from HOST --to ADDR", "ingress validate", "ingress demo", "ingress healthcheck", "ingress version", "ingress help",
		"SERVEZONE_CLUSTER_INGRESS_BEARER", "SERVEZONE_CLUSTER_RELAY_ORIGIN", "SERVEZONE_CLUSTER_NODE_ID", "INGRESS_STATE_DIR",
		"Examples:", "Exit status:", "SIGHUP", "--http3\n", "default true; --http3=false", "--drain-timeout DURATION", "INGRESS_DRAIN_TIMEOUT",
		"--public-https-port N")
	if usage.stderr != "" {
		t.Errorf("-h wrote to stderr: %s", usage.stderr)
	}
	for _, args := range [][]string{{"--help"}, {"help"}} {
		if r := runBinary(t, nil, "", args...).want(t, 0); r.stdout != usage.stdout {
			t.Errorf("%q prints another usage than -h", args)
		}
	}
	for _, cmd := range []string{"proxy", "validate", "demo", "healthcheck", "version"} {
		r := runBinary(t, nil, "", "help", cmd).want(t, 0)
		if !strings.Contains(r.stdout, "Usage: ingress "+cmd) {
			t.Errorf("ingress help %s:\n%s", cmd, r.stdout)
		}
		if r2 := runBinary(t, nil, "", cmd, "-h").want(t, 0); r2.stdout != r.stdout {
			t.Errorf("ingress %s -h differs from ingress help %s", cmd, cmd)
		}
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		if r := runBinary(t, nil, "", args...).want(t, 0); strings.TrimSpace(r.stdout) != "9.8.7-test" {
			t.Errorf("%q printed %q", args, r.stdout)
		}
	}

	bad := func(want []string, args ...string) {
		t.Helper()
		r := runBinary(t, nil, "", args...).want(t, exitConfig)
		assertContainsAll(t, strings.Join(args, " "), r.stderr, want...)
		if n := strings.Count(r.stderr, "\n"); n != 1 {
			t.Errorf("%q: %d lines on stderr, want the one problem:\n%s", args, n, r.stderr)
		}
		if r.stdout != "" {
			t.Errorf("%q wrote to stdout: %s", args, r.stdout)
		}
	}
	bad([]string{`invalid value "30" for flag --drain-timeout: must be a duration such as 30s`, "for example 30s", "ingress -h"}, "--drain-timeout", "30")
	bad([]string{"--dial-timeout: must be a duration such as 30s"}, "--dial-timeout=soon")
	bad([]string{"--http3 false: a boolean flag takes its value after '='", "--http3=false"}, "--http3", "false")
	bad([]string{`invalid boolean value "no" for --http3: must be true or false`}, "--http3=no")
	bad([]string{"flag provided but not defined: --no-such-flag"}, "--no-such-flag")
	bad([]string{`unexpected arguments ["extra"]`}, "--routes", "x.json", "extra")
	bad([]string{`unknown command "frobnicate"`}, "frobnicate")
	bad([]string{"healthcheck: flag provided but not defined: --bogus"}, "healthcheck", "--bogus")
}

// TestBinaryEnvironmentFlags: INGRESS_* variables set flags; the command line wins; a bad
// value names its variable.
func TestBinaryEnvironmentFlags(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	r := runBinary(t, []string{"INGRESS_DRAIN_TIMEOUT=30"}, "").want(t, exitConfig)
	assertContainsAll(t, "stderr", r.stderr, `INGRESS_DRAIN_TIMEOUT="30": must be a duration such as 30s`)

	// A state directory from the environment survives arguments, as in the container.
	_, target := echoBackend(t, "backend", 0)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	routes := filepath.Join(dir, "routes.json")
	if err := os.WriteFile(routes, binarytest.TableJSON(t, 1, nil, binarytest.Route("env.example.test", "", false, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startIngress(t, []string{"INGRESS_STATE_DIR=" + state, "INGRESS_LOG_LEVEL=error"}, binarytest.BaseArgs("--routes", routes)...)
	waitStatus(t, httpClient(t), p.Admin, "", "/readyz", http.StatusOK) // --log-level debug won over the variable
	p.Stop(e2eWait)
	if _, err := os.Stat(filepath.Join(state, routetable.StateFile)); err != nil {
		t.Fatalf("INGRESS_STATE_DIR not used: %v", err)
	}
}

// TestBinaryValidate: `ingress validate` judges a file as the running ingress would, with
// every violation, syntax errors with line and column, certificate warnings, and exit
// status 0 or 2.
func TestBinaryValidate(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := os.Mkdir(certs, 0o700); err != nil {
		t.Fatal(err)
	}
	writePair := func(name string, o testcert.Options) {
		c, k, err := testcert.New(o)
		if err != nil {
			t.Fatal(err)
		}
		binarytest.WriteFileAtomic(t, filepath.Join(certs, name+".crt"), []byte(c))
		binarytest.WriteFileAtomic(t, filepath.Join(certs, name+".key"), []byte(k))
	}
	writePair("app", testcert.Options{Hosts: []string{"app.example.test"}})
	writePair("soon", testcert.Options{Hosts: []string{"soon.example.test"}, NotAfter: time.Now().Add(3*24*time.Hour + time.Hour)})
	good := `{
  "revision": 4,
  "routes": [
    {"hostname": "soon.example.test", "targets": [{"leaseId": "s", "address": "10.0.0.2", "port": 80}],
     "tls": {"certificateId": "soon", "redirectHttp": false}},
    {"hostname": "app.example.test", "targets": [{"leaseId": "b", "address": "10.0.0.2", "port": 80}, {"leaseId": "a", "address": "10.0.0.1", "port": 80}],
     "tls": {"certificateId": "app", "redirectHttp": true}},
    {"hostname": "plain.example.test", "targets": [{"leaseId": "p", "address": "10.0.0.3", "port": 80}], "tls": null}
  ],
  "certificates": [
    {"id": "soon", "certificateFile": "certs/soon.crt", "privateKeyFile": "certs/soon.key"},
    {"id": "app", "certificateFile": "certs/app.crt", "privateKeyFile": "certs/app.key"}
  ]
}`
	file := filepath.Join(dir, "routes.json")
	binarytest.WriteFileAtomic(t, file, []byte(good))
	r := runBinary(t, nil, "", "validate", file).want(t, 0)
	assertContainsAll(t, "stdout", r.stdout, file+": valid standalone route file: revision 4, 3 routes, 2 certificates",
		"certificate app from "+filepath.Join(certs, "app.crt")+": app.example.test; valid until",
		"route app.example.test: 2 targets, TLS with app; plain HTTP redirected (308)",
		"route soon.example.test: 1 target, TLS with soon; plain HTTP served too",
		"route plain.example.test: 1 target, plain HTTP only")
	assertContainsAll(t, "stderr", r.stderr, file+`: warning: certificates[0] (id "soon"): the leaf expires at`, "in 3 days; renew it")

	// Standard input: certificate paths relative to the working directory.
	cmd := exec.Command(buildBinary(t), "validate", "-")
	cmd.Dir, cmd.Stdin = dir, strings.NewReader(good)
	if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), "(standard input): valid standalone route file") {
		t.Fatalf("validate -: %v\n%s", err, out)
	}

	// Every violation, each with its path.
	broken := strings.NewReplacer(`"10.0.0.3"`, `"10.0.0.03"`, `"app.example.test", "targets"`, `"App.example.test", "targets"`,
		`certs/app.key`, `certs/missing.key`).Replace(good)
	binarytest.WriteFileAtomic(t, file, []byte(broken))
	r = runBinary(t, nil, "", "validate", file).want(t, exitConfig)
	assertContainsAll(t, "stderr", r.stderr, file+": refused (standalone route file), 3 violations:",
		"  certificates[1].privateKeyFile cannot be read: open "+filepath.Join(certs, "missing.key")+": no such file or directory",
		`  routes[1].hostname "App.example.test" must be a lowercase A-label DNS name`,
		"  routes[2].targets[0].address must be a dotted-quad IPv4 address")
	if r.stdout != "" {
		t.Errorf("a refused file printed a summary: %s", r.stdout)
	}

	// A syntax error: its line and column.
	binarytest.WriteFileAtomic(t, file, []byte("{\n  \"revision\": 4,\n  \"routes\": [}\n"))
	r = runBinary(t, nil, "", "validate", file).want(t, exitConfig)
	assertContainsAll(t, "stderr", r.stderr, "line 3, column 14: the route table is not valid JSON: invalid character '}' looking for beginning of value")

	// --relay: contract §6 exactly (order, PEM strings).
	binarytest.WriteFileAtomic(t, file, []byte(good))
	r = runBinary(t, nil, "", "validate", "--relay", file).want(t, exitConfig)
	assertContainsAll(t, "stderr", r.stderr, "refused (relay route table)", "certificates[0].certificateFile is not allowed")

	runBinary(t, nil, "", "validate", filepath.Join(dir, "nope.json")).want(t, exitConfig)
	runBinary(t, nil, "", "validate").want(t, exitConfig)
}

// TestE2EBrokenEditReportedLikeValidate: the running ingress reports a broken edit of its
// routes file the way `ingress validate` does (the same violation texts, a syntax error
// with line and column, no made-up revision) and keeps serving.
func TestE2EBrokenEditReportedLikeValidate(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	_, target := echoBackend(t, "backend", 0)
	file := filepath.Join(t.TempDir(), "routes.json")
	binarytest.WriteFileAtomic(t, file, binarytest.TableJSON(t, 1, nil, binarytest.Route("edit.example.test", "", false, target)))
	p := startIngress(t, nil, binarytest.BaseArgs("--routes", file)...)
	c := httpClient(t)
	waitStatus(t, c, p.Admin, "", "/readyz", http.StatusOK)

	for i, edit := range []string{
		"{\n  \"revision\": 2,\n  \"routes\": [\n    {\"hostname\": \"x.example.test\",}\n  ],\n  \"certificates\": []\n}\n",
		`{"revision":3,"routes":[{"hostname":"Edit.example.test","targets":[{"leaseId":"l","address":"127.0.0.1","port":0}],"tls":null}],"certificates":[]}`,
	} {
		binarytest.WriteFileAtomic(t, file, []byte(edit))
		v := runBinary(t, nil, "", "validate", file).want(t, exitConfig)
		var wants []string
		for _, line := range strings.Split(v.stderr, "\n") {
			if s, ok := strings.CutPrefix(line, "  "); ok {
				wants = append(wants, s)
			}
		}
		if len(wants) == 0 {
			t.Fatalf("validate listed no violation:\n%s", v.stderr)
		}
		for _, want := range wants {
			p.WaitLine(e2eWait, func(m map[string]any) bool {
				return m["msg"] == "route table violation" && m["violation"] == want && m["file"] == file
			})
		}
		refusal := p.WaitLine(e2eWait, func(m map[string]any) bool {
			return m["msg"] == "route table refused" && m["violations"] == float64(len(wants)) && m["file"] == file
		})
		_, hasRev := refusal["revision"]
		if i == 0 && hasRev {
			t.Errorf("the refusal of a file that is not JSON names a revision: %v", refusal)
		}
		mustGet(t, c, p.HTTP, "edit.example.test", "/", http.StatusOK)
	}
	// SIGHUP says what came of it (issue 34): the broken file is still refused, revision 1
	// still served; a good edit is applied.
	p.Signal(syscall.SIGHUP)
	p.WaitLine(e2eWait, func(m map[string]any) bool {
		return m["msg"] == "reload: refused, still serving the last good table" && m["path"] == file && m["serving"] == float64(1)
	})
	binarytest.WriteFileAtomic(t, file, binarytest.TableJSON(t, 4, nil, binarytest.Route("edit.example.test", "", false, target)))
	p.Signal(syscall.SIGHUP)
	p.WaitLine(e2eWait, func(m map[string]any) bool {
		return (m["msg"] == "reload: applied" && m["revision"] == float64(4)) ||
			(m["msg"] == "reload: unchanged, nothing applied" && m["serving"] == float64(4)) // the watcher was first
	})
	p.Stop(e2eWait)
}

// TestE2EStandaloneCertificateFiles: a route file in any order with its certificate as
// files relative to it is served; replacing the certificate file (a renewal) is applied
// without touching the route file.
func TestE2EStandaloneCertificateFiles(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	_, target := echoBackend(t, "backend", 0)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "tls"), 0o700); err != nil {
		t.Fatal(err)
	}
	writePair := func() string {
		c, k := generatePair(t, "files.example.test")
		binarytest.WriteFileAtomic(t, filepath.Join(dir, "tls", "site.key"), []byte(k))
		binarytest.WriteFileAtomic(t, filepath.Join(dir, "tls", "site.crt"), []byte(c))
		b, _ := pem.Decode([]byte(c))
		leaf, _ := x509.ParseCertificate(b.Bytes)
		return leaf.SerialNumber.String()
	}
	first := writePair()
	doc := `{"revision":1,"routes":[
 {"hostname":"zz.example.test","targets":[{"leaseId":"z","address":"` + target.Address + `","port":` + strconv.Itoa(target.Port) + `}],"tls":null},
 {"hostname":"files.example.test","targets":[{"leaseId":"z","address":"` + target.Address + `","port":` + strconv.Itoa(target.Port) + `},
   {"leaseId":"a","address":"127.0.0.1","port":1}],"tls":{"certificateId":"site","redirectHttp":false}}],
 "certificates":[{"id":"site","certificateFile":"tls/site.crt","privateKeyFile":"tls/site.key"}]}`
	file := filepath.Join(dir, "routes.json")
	binarytest.WriteFileAtomic(t, file, []byte(doc))
	p := startIngress(t, nil, binarytest.BaseArgs("--routes", file)...)
	waitStatus(t, httpClient(t), p.Admin, "", "/readyz", http.StatusOK)
	served := func() string {
		conn, err := tls.Dial("tcp", p.HTTPS, tlsConfigFor("files.example.test"))
		if err != nil {
			return "dial: " + err.Error()
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	if got := served(); got != first {
		t.Fatalf("served %s, want the file's certificate %s", got, first)
	}
	mustGet(t, httpClient(t), p.HTTP, "zz.example.test", "/", http.StatusOK)
	renewed := writePair()
	testwait.UntilWhy(t, e2eWait, "the renewed certificate served", func() (bool, string) {
		got := served()
		return got == renewed, "serving " + got
	})
	p.Stop(e2eWait)
}

// TestE2EProxyQuickStart: `ingress proxy` serves one route from the command line, plain and
// with TLS from certificate files; its problems are named by flag.
func TestE2EProxyQuickStart(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	_, a := echoBackend(t, "a", 0)
	_, b := echoBackend(t, "b", 0)
	addr := func(tg routetable.Target) string { return tg.Address + ":" + strconv.Itoa(tg.Port) }

	p := startIngress(t, nil, append([]string{"proxy", "--from", "quick.example.test", "--to", addr(a), "--to", ":" + strconv.Itoa(b.Port)}, binarytest.BaseArgs()...)...)
	c := httpClient(t)
	waitStatus(t, c, p.Admin, "", "/readyz", http.StatusOK)
	seen := map[string]bool{}
	testwait.UntilWhy(t, e2eWait, "both targets answer", func() (bool, string) {
		r := mustGet(t, c, p.HTTP, "quick.example.test", "/q", http.StatusOK)
		seen[strings.Fields(r.body)[0]] = true
		return seen["a"] && seen["b"], r.body
	})
	mustGet(t, c, p.HTTP, "other.example.test", "/", http.StatusNotFound)
	p.Stop(e2eWait)

	// Without TLS no TLS listener is bound, TCP or UDP (issue 34: the -h example failed
	// for a non-root user on :443): an --https-addr whose port is taken both ways does
	// not stop it.
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	udp, err := net.ListenPacket("udp", tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	p = startIngress(t, nil, "proxy", "--from", "quick.example.test", "--to", addr(a), "--http-addr", "127.0.0.1:0",
		"--https-addr", tcp.Addr().String(), "--admin-addr", "127.0.0.1:0", "--log-format", "json")
	if p.HTTPS != "" {
		t.Fatalf("a TLS listener at %s without TLS", p.HTTPS)
	}
	p.WaitLine(e2eWait, func(m map[string]any) bool {
		return strings.HasPrefix(fmt.Sprint(m["msg"]), "--https-addr not bound") && m["httpsAddr"] == tcp.Addr().String()
	})
	mustGet(t, c, p.HTTP, "quick.example.test", "/q", http.StatusOK)
	p.Stop(e2eWait)

	_, bk := echoBackend(t, "backend", 0) // httpsGet expects the body of a backend named so
	dir := t.TempDir()
	certPEM, keyPEM := generatePair(t, "quick.example.test")
	binarytest.WriteFileAtomic(t, filepath.Join(dir, "q.crt"), []byte(certPEM))
	binarytest.WriteFileAtomic(t, filepath.Join(dir, "q.key"), []byte(keyPEM))
	p = startIngress(t, nil, append([]string{"proxy", "--from", "quick.example.test", "--to", addr(bk),
		"--tls-cert", filepath.Join(dir, "q.crt"), "--tls-key", filepath.Join(dir, "q.key"), "--redirect-http"}, binarytest.BaseArgs()...)...)
	waitStatus(t, c, p.Admin, "", "/readyz", http.StatusOK)
	if status, _ := httpsGet(t, p.HTTPS, "quick.example.test"); status != http.StatusOK {
		t.Fatalf("https: %d", status)
	}
	mustGet(t, c, p.HTTP, "quick.example.test", "/", http.StatusPermanentRedirect)
	p.Signal(syscall.SIGHUP)
	p.WaitLine(e2eWait, func(m map[string]any) bool { return m["msg"] == "SIGHUP: reloading the certificate files" })
	p.Stop(e2eWait)

	otherPEM, otherKey := generatePair(t, "other.example.test")
	binarytest.WriteFileAtomic(t, filepath.Join(dir, "o.crt"), []byte(otherPEM))
	binarytest.WriteFileAtomic(t, filepath.Join(dir, "o.key"), []byte(otherKey))
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"proxy", "--to", addr(a)}, []string{"--from is missing"}},
		{[]string{"proxy", "--from", "Bad_Host", "--to", "db.internal:5432"}, []string{`--from "Bad_Host" must be a DNS name`, `--to "db.internal:5432": the address must be an IPv4 address`}},
		{[]string{"proxy", "--from", "quick.example.test", "--to", addr(a), "--tls-cert", filepath.Join(dir, "q.crt")}, []string{"--tls-cert and --tls-key go together"}},
		{[]string{"proxy", "--from", "quick.example.test", "--to", addr(a), "--tls-cert", filepath.Join(dir, "o.crt"), "--tls-key", filepath.Join(dir, "q.key")},
			[]string{"--tls-key does not match the leaf certificate's public key"}},
		{[]string{"proxy", "--from", "quick.example.test", "--to", addr(a), "--tls-cert", filepath.Join(dir, "o.crt"), "--tls-key", filepath.Join(dir, "o.key")},
			[]string{`--tls-cert: the certificate does not cover "quick.example.test"`}},
		{[]string{"proxy", "--from", "quick.example.test", "--to", addr(a), "--tls-cert", filepath.Join(dir, "none.crt"), "--tls-key", filepath.Join(dir, "q.key")},
			[]string{"--tls-cert cannot be read: open " + filepath.Join(dir, "none.crt")}},
		{[]string{"proxy", "--from", "quick.example.test", "--to", addr(a), "--routes", "x.json"}, []string{"--routes has no use with ingress proxy"}},
	} {
		r := runBinary(t, nil, "", append(tc.args, "--http-addr", "127.0.0.1:0", "--https-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")...).want(t, exitConfig)
		assertContainsAll(t, strings.Join(tc.args, " "), r.stderr, tc.want...)
	}
}

// TestBinaryHealthcheck: `ingress healthcheck` asks /readyz (or /healthz with --live) at an
// address, a URL or INGRESS_ADMIN_ADDR; exit 0 when ready, 1 when not.
func TestBinaryHealthcheck(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	rs, origin := startRelay(t, "127.0.0.1:0")
	rs.SetTableNull() // registered, but no table: running, not ready
	p := startIngress(t, binarytest.RelayEnv(e2eBearer, origin, e2eNode), binarytest.BaseArgs()...)
	waitStatus(t, httpClient(t), p.Admin, "", "/healthz", http.StatusOK)
	_, port, _ := strings.Cut(p.Admin, ":")

	r := runBinary(t, nil, "", "healthcheck", p.Admin).want(t, 1)
	assertContainsAll(t, "stderr", r.stderr, "/readyz answered 503")
	runBinary(t, nil, "", "healthcheck", "--live", p.Admin).want(t, 0)
	runBinary(t, []string{"INGRESS_ADMIN_ADDR=:" + port}, "", "healthcheck", "--live").want(t, 0)
	runBinary(t, nil, "", "healthcheck", "http://"+p.Admin+"/healthz").want(t, 0)

	_, target := echoBackend(t, "backend", 0)
	rs.SetTable(binarytest.TableJSON(t, 1, nil, binarytest.Route("hc.example.test", "", false, target)), 1)
	p.Signal(syscall.SIGHUP) // pulled at once, or right after the registration
	waitStatus(t, httpClient(t), p.Admin, "", "/readyz", http.StatusOK)
	if r := runBinary(t, []string{"INGRESS_ADMIN_ADDR=0.0.0.0:" + port}, "", "healthcheck").want(t, 0); strings.TrimSpace(r.stdout) != "ok" {
		t.Fatalf("stdout %q", r.stdout)
	}
	runBinary(t, nil, "", "healthcheck", p.Admin, "--live").want(t, exitConfig)
	runBinary(t, []string{"INGRESS_ADMIN_ADDR="}, "", "healthcheck").want(t, exitConfig)
	p.Stop(e2eWait)
}

// TestDockerfile checks what can be checked without a container engine: base images named
// in full, defaults as environment variables (so that `docker run IMAGE --routes …` keeps
// the state directory), the health check on readiness at INGRESS_ADMIN_ADDR, the user, and
// the binary built with the Dockerfile's own build command running with the image's
// environment.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	args := map[string]string{}
	env := map[string]string{}
	var froms, runs, platforms []string
	var user, healthcheck, volume string
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		rest := strings.TrimSpace(strings.TrimPrefix(line, f[0]))
		switch f[0] {
		case "ARG":
			k, v, _ := strings.Cut(rest, "=")
			args[k] = v
		case "FROM":
			image := f[1]
			if strings.HasPrefix(image, "--platform=") {
				platforms = append(platforms, image)
				image = f[2]
			}
			froms = append(froms, image)
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
		case "RUN":
			runs = append(runs, rest)
		case "USER":
			user = rest
		case "HEALTHCHECK":
			healthcheck = rest
		case "VOLUME":
			volume = rest
		case "CMD":
			t.Errorf("CMD %s: defaults belong in ENV, where arguments do not replace them", rest)
		}
	}
	fullName := regexp.MustCompile(`^[a-z0-9.-]+\.[a-z]+(:[0-9]+)?/[a-z0-9./_-]+(:[\w.-]+)?(@sha256:[0-9a-f]{64})?$`)
	for _, from := range froms {
		image := from
		if m := regexp.MustCompile(`^\$\{(\w+)\}$`).FindStringSubmatch(from); m != nil {
			image = args[m[1]]
		}
		if !fullName.MatchString(image) {
			t.Errorf("FROM %s (%s) is not a fully qualified image name", from, image)
		}
	}
	if env["INGRESS_STATE_DIR"] != "/var/lib/ingress" || volume != `["/var/lib/ingress"]` {
		t.Errorf("state directory: ENV %q, VOLUME %s", env["INGRESS_STATE_DIR"], volume)
	}
	if env["INGRESS_ADMIN_ADDR"] != ":9090" {
		t.Errorf("INGRESS_ADMIN_ADDR %q, want :9090 (reachable when published)", env["INGRESS_ADMIN_ADDR"])
	}
	if user != "65532:65532" {
		t.Errorf("USER %q", user)
	}
	if !strings.HasSuffix(healthcheck, `CMD ["/usr/local/bin/ingress", "healthcheck"]`) {
		t.Errorf("HEALTHCHECK %q: want `ingress healthcheck` without an address (INGRESS_ADMIN_ADDR, /readyz)", healthcheck)
	}
	if u, err := healthURL(env["INGRESS_ADMIN_ADDR"], "/readyz"); err != nil || u != "http://127.0.0.1:9090/readyz" {
		t.Errorf("the health check would ask %q (%v)", u, err)
	}
	// Several architectures (issue 34): the build stage runs on the build machine's
	// platform and cross-compiles for buildx's TARGETARCH; the toolchain is at least
	// go.mod's (the golang images' GOTOOLCHAIN=local would take an older 1.27.x).
	if !slices.Equal(platforms, []string{"--platform=$BUILDPLATFORM"}) {
		t.Errorf("FROM platforms %q: want the build stage on --platform=$BUILDPLATFORM", platforms)
	}
	if _, ok := args["TARGETARCH"]; !ok {
		t.Errorf("no ARG TARGETARCH: docker buildx --platform linux/arm64 would build for the build machine")
	}
	if env["GOTOOLCHAIN"] != "auto" {
		t.Errorf("GOTOOLCHAIN %q in the build stage, want auto (go.mod's toolchain line as the least)", env["GOTOOLCHAIN"])
	}
	ignore, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"bin/pebble", "ingress", ".git/HEAD", "bench/out/x.txt"} {
		if !dockerIgnored(string(ignore), p) {
			t.Errorf(".dockerignore does not keep %s out of the build context", p)
		}
	}
	for _, p := range []string{"go.mod", "cmd/ingress/main.go", "proxy/internal/h2/engine.go", "bench/ingress/x.go"} {
		if dockerIgnored(string(ignore), p) {
			t.Errorf(".dockerignore keeps %s, which the build needs, out of the build context", p)
		}
	}

	// Build with the Dockerfile's own command.
	var build string
	for _, r := range runs {
		if strings.Contains(r, "go build") {
			build = r
		}
	}
	m := regexp.MustCompile(`^(.*?)go build (.*) -o /out/ingress \./cmd/ingress`).FindStringSubmatch(build)
	if m == nil {
		t.Fatalf("no go build in the Dockerfile's RUN lines: %q", runs)
	}
	bin := filepath.Join(t.TempDir(), "ingress")
	cmd := exec.Command("sh", "-c", "cd ../.. && "+m[1]+"go build "+m[2]+" -o "+bin+" ./cmd/ingress")
	cmd.Env = append(os.Environ(), "VERSION=4.5.6-docker")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd.Args, err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil || strings.TrimSpace(string(out)) != "4.5.6-docker" {
		t.Fatalf("--version: %q %v", out, err)
	}
	if out, err := exec.Command("go", "version", "-m", bin).Output(); err != nil || !strings.Contains(string(out), "CGO_ENABLED=0") {
		t.Errorf("not a static (CGO_ENABLED=0) build: %v\n%s", err, out)
	}
	// The image's environment with `--routes`: the state directory stays in use (moved to
	// a temporary directory, as a volume would be), the health check finds the admin
	// listener through the same variable.
	_, target := echoBackend(t, "backend", 0)
	state := filepath.Join(t.TempDir(), "var-lib-ingress")
	routes := filepath.Join(t.TempDir(), "routes.json")
	if err := os.WriteFile(routes, binarytest.TableJSON(t, 1, nil, binarytest.Route("docker.example.test", "", false, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	var imageEnv []string
	for k, v := range env {
		switch k {
		case "INGRESS_STATE_DIR":
			v = state
		case "INGRESS_ADMIN_ADDR":
			v = "127.0.0.1:0" // the test machine's :9090 may be taken
		}
		imageEnv = append(imageEnv, k+"="+v)
	}
	run := exec.Command(bin, "--routes", routes, "--http-addr", "127.0.0.1:0", "--https-addr", "127.0.0.1:0", "--http3=false")
	run.Env = append([]string{"PATH=" + os.Getenv("PATH")}, imageEnv...)
	p := binarytest.Collect(t, run)
	started := p.WaitLine(e2eWait, func(m map[string]any) bool { return m["msg"] == "ingress started" })
	admin := started["admin"].(string)
	waitStatus(t, httpClient(t), admin, "", "/readyz", http.StatusOK)
	hc := exec.Command(bin, "healthcheck")
	hc.Env = []string{"INGRESS_ADMIN_ADDR=" + admin}
	if out, err := hc.CombinedOutput(); err != nil {
		t.Fatalf("healthcheck with the image's variable: %v\n%s", err, out)
	}
	p.Stop(e2eWait)
	if _, err := os.Stat(filepath.Join(state, routetable.StateFile)); err != nil {
		t.Fatalf("the state directory from the image's ENV was not used: %v", err)
	}
}

// dockerIgnored reports whether the .dockerignore patterns keep path (slash-separated,
// relative to the context) out of the build context: the last matching pattern decides
// ("!" re-includes); a pattern matches the path or a directory above it; "**" matches
// any number of directories. Enough of Docker's rules for this file.
func dockerIgnored(patterns, p string) bool {
	ignored := false
	for _, line := range strings.Split(patterns, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		negate := strings.HasPrefix(line, "!")
		pat := strings.Trim(strings.TrimPrefix(line, "!"), "/")
		re := "^" + strings.NewReplacer(`\*\*/`, "(.*/)?", `\*\*`, ".*", `\*`, "[^/]*", `\?`, "[^/]").Replace(regexp.QuoteMeta(pat)) + "(/.*)?$"
		if regexp.MustCompile(re).MatchString(p) {
			ignored = !negate
		}
	}
	return ignored
}

// TestREADMEWalkthrough follows docs/standalone.md from nothing to a TLS route from a
// certificate file: its openssl command (when openssl is installed; otherwise an
// equivalent certificate), its routes.json, `ingress validate`, the ingress, and the
// requests.
func TestREADMEWalkthrough(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	readme, err := os.ReadFile("../../docs/standalone.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## From nothing to a TLS route from a certificate file")
	if !ok {
		t.Fatal("docs/standalone.md has no walkthrough section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := func(lang string) []string {
		var out []string
		rest := section
		for {
			_, after, ok := strings.Cut(rest, "```"+lang+"\n")
			if !ok {
				return out
			}
			block, after2, _ := strings.Cut(after, "```")
			out = append(out, block)
			rest = after2
		}
	}
	shells, jsons := blocks("sh"), blocks("json")
	if len(shells) != 2 || len(jsons) != 1 {
		t.Fatalf("walkthrough: %d sh and %d json blocks, want 2 and 1", len(shells), len(jsons))
	}
	dir := t.TempDir()
	if _, err := exec.LookPath("openssl"); err == nil {
		cmd := exec.Command("sh", "-e", "-c", shells[0])
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the README's certificate commands: %v\n%s", err, out)
		}
	} else {
		t.Log("openssl not installed: an equivalent certificate instead of the README's command")
		c, k := generatePair(t, "app.example.test")
		if err := os.MkdirAll(filepath.Join(dir, "certs"), 0o700); err != nil {
			t.Fatal(err)
		}
		binarytest.WriteFileAtomic(t, filepath.Join(dir, "certs", "app.crt"), []byte(c))
		binarytest.WriteFileAtomic(t, filepath.Join(dir, "certs", "app.key"), []byte(k))
	}
	_, target := echoBackend(t, "backend", 0)
	doc := strings.Replace(jsons[0], `"port": 3000`, `"port": `+strconv.Itoa(target.Port), 1)
	binarytest.WriteFileAtomic(t, filepath.Join(dir, "routes.json"), []byte(doc))

	var lines []string
	for _, l := range strings.Split(shells[1], "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) < 3 || lines[0] != "ingress validate routes.json" || !strings.HasPrefix(lines[1], "ingress --routes routes.json") {
		t.Fatalf("walkthrough commands changed: %q", lines)
	}
	validate := exec.Command(buildBinary(t), "validate", "routes.json")
	validate.Dir = dir
	if out, err := validate.CombinedOutput(); err != nil || !strings.Contains(string(out), "valid standalone route file") {
		t.Fatalf("ingress validate routes.json: %v\n%s", err, out)
	}
	// The README's run command, on free ports.
	runArgs := strings.Fields(strings.TrimPrefix(lines[1], "ingress "))
	for i, a := range runArgs {
		if i > 0 && strings.HasSuffix(runArgs[i-1], "-addr") {
			runArgs[i] = "127.0.0.1:0"
		} else if a == "./state" {
			runArgs[i] = filepath.Join(dir, "state")
		}
	}
	run := exec.Command(buildBinary(t), append(runArgs, "--admin-addr", "127.0.0.1:0", "--log-format", "json")...)
	run.Dir = dir
	p := binarytest.Collect(t, run)
	started := p.WaitLine(e2eWait, func(m map[string]any) bool { return m["msg"] == "ingress started" })
	p.HTTP, p.HTTPS = started["http"].(string), started["https"].(string)
	waitStatus(t, httpClient(t), started["admin"].(string), "", "/readyz", http.StatusOK)
	if status, _ := httpsGet(t, p.HTTPS, "app.example.test"); status != http.StatusOK {
		t.Fatalf("https status %d", status)
	}
	r := mustGet(t, httpClient(t), p.HTTP, "app.example.test", "/", http.StatusPermanentRedirect)
	_, httpsPort, _ := strings.Cut(p.HTTPS, ":")
	if got := r.header.Get("Location"); got != "https://app.example.test:"+httpsPort+"/" {
		t.Fatalf("Location %q", got)
	}
	p.Stop(e2eWait)
}
