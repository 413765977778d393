package reliability

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/echotest"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// keyPair is a self-signed certificate for host and its private key, PEM.
func keyPair(t *testing.T, host string) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
}

// secretMarks are the strings whose presence in an output means a secret leaked: the
// bearer, and of each private key its base64 body as one line and each full PEM line.
func secretMarks(bearer string, keys ...string) []string {
	marks := []string{bearer}
	for _, k := range keys {
		b, _ := pem.Decode([]byte(k))
		marks = append(marks, base64.StdEncoding.EncodeToString(b.Bytes)[:48])
		for _, l := range strings.Split(k, "\n") {
			if len(l) >= 40 && !strings.HasPrefix(l, "-----") {
				marks = append(marks, l)
			}
		}
	}
	return marks
}

// assertClean fails when any mark appears in what (named where).
func assertClean(t *testing.T, where, what string, marks []string) {
	t.Helper()
	for i, m := range marks {
		if strings.Contains(what, m) {
			kind := "the bearer"
			if i > 0 {
				kind = "a private key"
			}
			at := strings.Index(what, m)
			lo, hi := max(at-200, 0), min(at+len(m)+50, len(what))
			t.Errorf("%s quotes %s: …%s…", where, kind, strings.ReplaceAll(what[lo:hi], m, "<SECRET>"))
			return
		}
	}
}

// TestSecretsNeverLeak drives every path that logs, answers an error or exports a metric
// with a known bearer and private keys, with a relay that echoes both back in error texts,
// refusal reasons, error data and tables, and asserts that neither appears in stdout,
// stderr, /metrics, the admin endpoints or the statistics snapshot (the route table's
// state file is the one place the table's own key may be, and it must not hold the
// bearer), and that the state files are 0600 in a 0700 directory.
func TestSecretsNeverLeak(t *testing.T) {
	t.Parallel()
	const host, other = "secret.rel.test", "other.rel.test"
	certPEM, keyPEM := keyPair(t, host)
	_, strayKey := keyPair(t, other) // does not match certPEM
	marks := secretMarks(testBearer, keyPEM, strayKey)
	echo := testBearer + " " + keyPEM + " " + strayKey

	backend := echoBackend(t, "secret")
	goodCerts := []routetable.Certificate{{ID: "cert-1", CertificatePEM: certPEM, PrivateKeyPEM: keyPEM}}
	good := binarytest.TableJSON(t, 2, goodCerts, binarytest.Route(host, "cert-1", false, backend))

	rs, origin := startRelay(t)
	// Registration: refused with the secrets as the reason (known and unknown codes), as
	// an error text, and as error data; then accepted.
	rs.RefuseRegistrations(echo, 1000, 1)
	rs.SetRegisterErrorData([]byte(fmt.Sprintf(`{"code":%q,"reason":%q,"retryAfterMs":1000,"secret":%q}`, echo, echo, echo)), 1)
	// The bearer also comes back in every encoding a hostile relay used (issue 25 finding
	// 4), as the text, code and reason of an error answer that is no usable refusal.
	encoded := make([]string, len(echotest.Encodings))
	for i, e := range echotest.Encodings {
		encoded[i] = e.Fn(testBearer)
	}
	echoAll := strings.Join(encoded, " ")
	rs.FailCalls("registerClusterIngress", echoAll,
		[]byte(fmt.Sprintf(`{"code":%q,"reason":%q,"echo":%q}`, echoAll, echoAll, echo)), 1)
	// Route tables: a pull answered with the secrets as an error, then a table whose key
	// does not match its certificate and which echoes both where keys are not allowed,
	// then the good table.
	rs.FailCalls("getClusterIngressRouteTable", echo, []byte(fmt.Sprintf(`{"reason":%q}`, echo)), 1)
	bad := fmt.Sprintf(`{"revision":1,"routes":[{"hostname":%q,"targets":[],"tls":{"certificateId":"cert-x","redirectHttp":false}}],`+
		`"certificates":[{"id":"cert-x","certificatePem":%q,"privateKeyPem":%q}],%q:true}`, other, certPEM, strayKey, echo)
	rs.SetTable([]byte(bad), 1)

	dir := filepath.Join(t.TempDir(), "state")
	p := start(t, binarytest.RelayEnv(testBearer, origin, testNode), binarytest.BaseArgs("--state-dir", dir, "--access-log")...)
	p.WaitLine(3*waitLimit, func(m map[string]any) bool { return m["msg"] == "registered with the relay" })
	p.WaitLine(waitLimit, func(m map[string]any) bool { return m["msg"] == "route table pull failed" })
	p.Signal(syscall.SIGHUP) // pull again
	p.WaitLine(waitLimit, func(m map[string]any) bool { return m["msg"] == "route table refused" })
	rs.SetTable(good, 2)
	p.Signal(syscall.SIGHUP) // pull now
	p.WaitLine(waitLimit, func(m map[string]any) bool { return m["msg"] == "route table applied" })

	// Traffic over TLS (the key in use) and a hint the relay echoes the secrets into.
	c := &http.Client{Timeout: waitLimit, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: host}}}
	t.Cleanup(c.CloseIdleConnections)
	resp, err := c.Get("https://" + p.HTTPS + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := rs.PushHint(ctxFor(t, waitLimit), 3); err != nil {
		t.Fatal(err)
	}
	rs.FailCalls("getClusterIngressRouteTable", echo, nil, 1)
	p.WaitLine(waitLimit, func(m map[string]any) bool { return m["msg"] == "route table pull failed" })
	if _, err := rs.QueryStatistics(ctxFor(t, waitLimit), map[string]any{"fromDayUtc": echo}); err == nil {
		t.Fatal("a statistics query with a secret for a day was answered, want it refused")
	}

	admin := map[string]string{}
	for _, path := range []string{"/metrics", "/healthz", "/readyz",
		stats.HandlerPath + "?fromDayUtc=2026-01-01&toDayUtc=2026-12-31&limit=1000",
		stats.HandlerPath + "?fromDayUtc=" + testBearer} {
		admin[path] = adminGet(t, p.Admin, path)
	}
	p.Stop(stopLimit)

	// The relay kills the sessions mid-call, then a restart with the relay gone: the last
	// table and the statistics come from the state directory.
	rs.DropAnswers("getClusterIngressRouteTable", -1)
	p2 := start(t, binarytest.RelayEnv(testBearer, origin, testNode), binarytest.BaseArgs("--state-dir", dir)...)
	waitReady(t, p2)
	p2.WaitLine(waitLimit, func(m map[string]any) bool { return m["msg"] == "registered with the relay" })
	_ = rs.Kill()
	p2.WaitLine(waitLimit, func(m map[string]any) bool { return m["msg"] == "relay connection failed" })
	admin["/metrics after restart"] = adminGet(t, p2.Admin, "/metrics")
	p2.Stop(stopLimit)

	for name, out := range map[string]string{"the first run's output": p.Output(), "the restarted run's output": p2.Output()} {
		assertClean(t, name, out, marks)
		assertNoEncodedEcho(t, name, out, encoded)
	}
	for path, body := range admin {
		assertClean(t, "admin "+path, body, marks)
	}
	checkStateDir(t, dir, marks)
	checkConfigErrors(t, keyPEM, strayKey, certPEM, marks)
}

// assertNoEncodedEcho fails when a line of out above debug level holds 8 bytes in a row of
// any of the relay's encoded echoes as they were sent, or when any line (debug included)
// holds 8 bytes of the bearer after up to two decodings (entities, %xx, escapes, hex,
// base64, reversal, rot13; case ignored).
func assertNoEncodedEcho(t *testing.T, where, out string, encoded []string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, `"level":"debug"`) {
			for _, m := range encoded {
				if w, ok := echotest.SharesWindow(line, m, 8); ok {
					t.Errorf("%s: a line above debug level holds %q of the relay's echo %q: %s", where, w, m, line)
					return
				}
			}
		}
		if echotest.HoldsSecret(line, testBearer, 8, 2) {
			t.Errorf("%s: a line holds the bearer in some encoding: %s", where, line)
			return
		}
	}
}

// checkStateDir: 0700 directory, 0600 files, no secret in any file but the table's key in
// the route table's state file.
func checkStateDir(t *testing.T, dir string, marks []string) {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("state directory mode %v, want 0700", fi.Mode().Perm())
	}
	n := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", path, info.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if filepath.Base(path) == routetable.StateFile {
			assertClean(t, path, string(b), marks[:1]) // the bearer only: it holds the table's key
			if !strings.Contains(string(b), marks[1]) {
				t.Errorf("%s does not hold the table's key: the leak checks would not see one either", path)
			}
			return nil
		}
		assertClean(t, path, string(b), marks)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Errorf("the state directory holds %d files, want the table and the statistics", n)
	}
}

// checkConfigErrors: a routes file whose key does not match, or is no key, refused at start
// and by `ingress validate`, and a bearer that is no valid bearer, never quote the secrets.
func checkConfigErrors(t *testing.T, keyPEM, strayKey, certPEM string, marks []string) {
	t.Helper()
	dir := t.TempDir()
	brokenKey := strings.Replace(keyPEM, "PRIVATE KEY", "PRIVATE KEY", 1)[:len(keyPEM)-60] + "\n-----END PRIVATE KEY-----\n"
	for i, key := range []string{strayKey, brokenKey, "not a key " + keyPEM} {
		path := filepath.Join(dir, fmt.Sprintf("routes-%d.json", i))
		doc := fmt.Sprintf(`{"revision":1,"routes":[{"hostname":"a.rel.test","targets":[{"leaseId":"l","address":"127.0.0.1","port":9}],`+
			`"tls":{"certificateId":"c","redirectHttp":false}}],"certificates":[{"id":"c","certificatePem":%q,"privateKeyPem":%q}]}`,
			certPEM, key)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		out, code := runBinary(t, nil, binarytest.BaseArgs("--routes", path)...)
		if code != 2 {
			t.Errorf("routes file %d: exit status %d, want 2 (refused):\n%s", i, code, out)
		}
		assertClean(t, fmt.Sprintf("refusal of routes file %d", i), out, marks)
		out, code = runBinary(t, nil, "validate", path)
		if code != 2 {
			t.Errorf("validate %d: exit status %d, want 2:\n%s", i, code, out)
		}
		assertClean(t, fmt.Sprintf("validate of routes file %d", i), out, marks)
	}
	out, code := runBinary(t, binarytest.RelayEnv(testBearer+" with a space", "http://127.0.0.1:9", testNode), binarytest.BaseArgs()...)
	if code != 2 {
		t.Errorf("an invalid bearer: exit status %d, want 2:\n%s", code, out)
	}
	assertClean(t, "the refusal of an invalid bearer", out, marks)
}

// runBinary runs the binary to its end (within waitLimit) and returns its output and
// exit status.
func runBinary(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	done := make(chan struct{})
	timer := time.AfterFunc(waitLimit, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	close(done)
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("%v: %v", args, err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

func adminGet(t *testing.T, admin, path string) string {
	t.Helper()
	resp, err := adminClient.Get("http://" + admin + path)
	if err != nil {
		t.Fatalf("admin %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(bufio.NewReader(resp.Body))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
