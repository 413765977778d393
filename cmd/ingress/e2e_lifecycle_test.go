package main

// End-to-end tests of the operator-facing lifecycle (issue 15): the demo stops on one
// Ctrl-C, SIGHUP never kills, an unusable state directory and a listener that cannot bind
// are refused with exit status 2 before anything is applied.

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// loopbackArgs are the demo's listeners on free loopback ports, with JSON debug logs.
var loopbackArgs = []string{"--http-addr", "127.0.0.1:0", "--https-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
	"--log-format", "json", "--log-level", "debug"}

// TestE2EDemoStopsOnOneCtrlC runs `ingress demo` and signals it as a terminal would: SIGHUP
// makes it pull its table (and keeps it running), one SIGINT stops everything with exit
// status 0.
func TestE2EDemoStopsOnOneCtrlC(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	p := startIngress(t, nil, append([]string{"demo"}, loopbackArgs...)...)
	waitStatus(t, httpClient(t), p.Admin, "", "/readyz", http.StatusOK)

	p.Signal(syscall.SIGHUP)
	p.WaitLine(e2eWait, func(m map[string]any) bool { return m["msg"] == "SIGHUP: pulling the route table from the relay" })
	p.WaitLine(e2eWait, func(m map[string]any) bool {
		return m["msg"] == "route table not newer; ignored" && m["reason"] == "requested"
	})
	mustGet(t, httpClient(t), p.HTTP, demoApp, "/", http.StatusOK) // still serving

	p.Signal(syscall.SIGINT)
	if code := p.Wait(e2eWait); code != 0 {
		t.Fatalf("exit status %d after one SIGINT, want 0; stderr:\n%s", code, p.Stderr())
	}
	p.WaitLine(0, func(m map[string]any) bool { return m["msg"] == "stopped" })
}

// TestE2ESIGHUPInRelayModePulls: SIGHUP in relay mode logs and pulls the route table at
// once (a table the relay announced to nobody is applied), never stopping the process.
func TestE2ESIGHUPInRelayModePulls(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	_, target := echoBackend(t, "backend", 0)
	rs, origin := startRelay(t, "127.0.0.1:0")
	rs.SetTable(binarytest.TableJSON(t, 1, nil, binarytest.Route("one.example.test", "", false, target)), 1)
	p := startIngress(t, binarytest.RelayEnv(e2eBearer, origin, e2eNode), binarytest.BaseArgs("--state-dir", t.TempDir())...)
	c := httpClient(t)
	waitStatus(t, c, p.Admin, "", "/readyz", http.StatusOK)

	rs.SetTable(binarytest.TableJSON(t, 2, nil, binarytest.Route("one.example.test", "", false, target), binarytest.Route("two.example.test", "", false, target)), 2)
	mustGet(t, c, p.HTTP, "two.example.test", "/", http.StatusNotFound) // no hint: not pulled yet
	p.Signal(syscall.SIGHUP)
	p.WaitLine(e2eWait, func(m map[string]any) bool { return m["msg"] == "SIGHUP: pulling the route table from the relay" })
	waitStatus(t, c, p.HTTP, "two.example.test", "/", http.StatusOK)

	p.Signal(syscall.SIGHUP) // again: nothing newer, nothing happens, still running
	p.WaitLine(e2eWait, func(m map[string]any) bool {
		return m["msg"] == "route table not newer; ignored" && m["reason"] == "requested"
	})
	mustGet(t, c, p.HTTP, "one.example.test", "/", http.StatusOK)
	p.Stop(e2eWait)
	p.AssertNoSecret(e2eBearer)
}

// appliedOrStarted reports whether the ingress got as far as applying a table or serving.
func appliedOrStarted(p *ingressProc) bool {
	out := p.Stderr()
	return strings.Contains(out, "route table applied") || strings.Contains(out, "ingress started")
}

// TestE2EStateDirRefused: a state directory the ingress cannot use stops it at start with
// exit status 2 and the reason, before any table is applied. The unwritable case runs the
// binary as the container's user (65532) on a directory owned by root, the situation of a
// bind mount nobody chowned (when the tests do not run as root, the directory is made
// read-only instead).
func TestE2EStateDirRefused(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	target := routetable.Target{LeaseID: "lease-1", Address: "127.0.0.1", Port: 8080}
	base, err := os.MkdirTemp("", "ingress-statedir")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	routes := filepath.Join(base, "routes.json")
	if err := os.WriteFile(routes, binarytest.TableJSON(t, 1, nil, binarytest.Route("app.example.test", "", false, target)), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(base, "unreadable")
	if err := os.MkdirAll(filepath.Join(unreadable, stats.SnapshotFile), 0o755); err != nil { // a directory where the snapshot goes
		t.Fatal(err)
	}
	readOnly := filepath.Join(base, "read-only")
	if err := os.Mkdir(readOnly, 0o755); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name, dir string
		want      []string
		asUser    bool
	}{
		{"a regular file", file, []string{"--state-dir " + file + " is not a directory"}, false},
		{"below a regular file", filepath.Join(file, "state"), []string{"--state-dir " + filepath.Join(file, "state") + " cannot be created", "not a directory"}, false},
		{"state file unreadable", unreadable, []string{"--state-dir: " + filepath.Join(unreadable, stats.SnapshotFile) + " cannot be read", "is a directory"}, false},
		{"not writable", readOnly, []string{"--state-dir " + readOnly + " is not writable by this process", "permission denied"}, true},
	}
	bin := buildBinary(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p *ingressProc
			args := binarytest.BaseArgs("--routes", routes, "--state-dir", tc.dir)
			if tc.asUser {
				if os.Geteuid() == 0 {
					// Run as the image's user: a copy of the binary it can execute.
					shared := filepath.Join(base, "ingress")
					copyFile(t, bin, shared, 0o755)
					cmd := exec.Command(shared, args...)
					cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
					p = runCommand(t, cmd)
					tc.want = append(tc.want, "uid 65532")
				} else {
					if err := os.Chmod(readOnly, 0o555); err != nil {
						t.Fatal(err)
					}
					p = execIngress(t, nil, args...)
				}
			} else {
				p = execIngress(t, nil, args...)
			}
			if code := p.Wait(e2eWait); code != exitConfig {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitConfig, p.Stderr())
			}
			for _, w := range tc.want {
				if !strings.Contains(p.Stderr(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, p.Stderr())
				}
			}
			if appliedOrStarted(p) {
				t.Errorf("a table was applied or the ingress started:\n%s", p.Stderr())
			}
		})
	}
}

// copyFile copies src to dst with mode.
func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	// cp writes it: a descriptor open for writing in this process would be inherited
	// by a child another test forks meanwhile, and exec of dst would then fail with
	// "text file busy" until that child execs (golang.org/issue/22315).
	if out, err := exec.Command("cp", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp %s %s: %v %s", src, dst, err, out)
	}
	if err := os.Chmod(dst, mode); err != nil {
		t.Fatal(err)
	}
}

// runCommand starts cmd (with only PATH in its environment unless set) and collects its
// stderr like execIngress.
func runCommand(t *testing.T, cmd *exec.Cmd) *ingressProc {
	t.Helper()
	if cmd.Env == nil {
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	}
	return binarytest.Collect(t, cmd)
}

// TestE2EListenerCannotBind: a listener whose address is taken stops the ingress with exit
// status 2, naming the flag and the address, before any table is applied.
func TestE2EListenerCannotBind(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	target := routetable.Target{LeaseID: "lease-1", Address: "127.0.0.1", Port: 8080}
	routes := filepath.Join(t.TempDir(), "routes.json")
	if err := os.WriteFile(routes, binarytest.TableJSON(t, 1, nil, binarytest.Route("app.example.test", "", false, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().String()
	var udp net.PacketConn
	for udp == nil { // a UDP port whose TCP twin is free
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if ln, err := net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			ln.Close()
			udp = pc
		} else {
			pc.Close()
		}
	}
	defer udp.Close()
	busyUDP := udp.LocalAddr().String()

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"http", []string{"--http-addr", busy}, "--http-addr " + busy + ": cannot listen"},
		{"https", []string{"--https-addr", busy}, "--https-addr " + busy + ": cannot listen"},
		{"admin", []string{"--admin-addr", busy}, "--admin-addr " + busy + ": cannot listen"},
		{"http3 on udp", []string{"--https-addr", busyUDP, "--http3=true"}, "--https-addr " + busyUDP + ": cannot listen"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := execIngress(t, nil, append(binarytest.BaseArgs("--routes", routes), tc.args...)...)
			if code := p.Wait(e2eWait); code != exitConfig {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitConfig, p.Stderr())
			}
			out := p.Stderr()
			for _, w := range []string{tc.want, "address already in use"} {
				if !strings.Contains(out, w) {
					t.Errorf("stderr lacks %q:\n%s", w, out)
				}
			}
			if tc.name == "http3 on udp" && !strings.Contains(out, "--http3=false") {
				t.Errorf("stderr does not say HTTP/3 is the UDP listener:\n%s", out)
			}
			if appliedOrStarted(p) {
				t.Errorf("a table was applied or the ingress started before the bind failed:\n%s", out)
			}
		})
	}
}

// TestE2EPublicHTTPSPort: behind a port map, --public-https-port is what Alt-Svc announces
// and what redirects to https name.
func TestE2EPublicHTTPSPort(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	const host = "mapped.example.test"
	_, target := echoBackend(t, "backend", 0)
	certPEM, keyPEM := generatePair(t, host)
	certs := []routetable.Certificate{{ID: "c", CertificatePEM: certPEM, PrivateKeyPEM: keyPEM}}
	file := filepath.Join(t.TempDir(), "routes.json")
	if err := os.WriteFile(file, binarytest.TableJSON(t, 1, certs, binarytest.Route(host, "c", true, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startIngress(t, nil, append(binarytest.BaseArgs("--routes", file), "--http3=true", "--public-https-port", "18444")...)
	c := httpClient(t)
	waitStatus(t, c, p.Admin, "", "/readyz", http.StatusOK)
	r := mustGet(t, c, p.HTTP, host, "/x?y=1", http.StatusPermanentRedirect)
	if got, want := r.header.Get("Location"), "https://"+host+":18444/x?y=1"; got != want {
		t.Fatalf("Location %q, want %q", got, want)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://"+p.HTTPS+"/", nil)
	req.Host = host
	tr := &http.Transport{TLSClientConfig: tlsConfigFor(host)}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: e2eWait}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.Header.Get("Alt-Svc"), `h3=":18444"; ma=86400`; got != want {
		t.Fatalf("Alt-Svc %q, want %q", got, want)
	}
	p.Stop(e2eWait)
}

// assertContainsAll fails for each of wants that out lacks.
func assertContainsAll(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, out)
		}
	}
}
