package h2

import (
	"encoding/xml"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/serve-zone/ingress/internal/toolbin"
)

// H2specVersion is the h2spec release .ci/run installs:
//
//	go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible
const H2specVersion = "v2.2.1+incompatible"

// h2specWant is the number of test cases of h2spec's default (non-strict) run.
const h2specWant = 145

// h2specBinary finds h2spec through $H2SPEC, PATH, then $GOPATH/bin; without it the test
// is skipped, unless CI is set: then it fails, so that CI cannot pass by skipping.
func h2specBinary(t *testing.T) string {
	t.Helper()
	return toolbin.Tool{
		Name:    "h2spec",
		Env:     "H2SPEC",
		Install: "github.com/summerwind/h2spec/cmd/h2spec@" + H2specVersion,
	}.Find(t)
}

type junitReport struct {
	Suites []struct {
		Name  string `xml:"name,attr"`
		Cases []struct {
			Name    string    `xml:"name,attr"`
			Class   string    `xml:"classname,attr"`
			Failure *struct{} `xml:"failure"`
			Error   *struct{} `xml:"error"`
			Skipped *struct{} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// runH2spec runs h2spec against ts and returns the number of passed cases and the
// names of the failed ones.
func runH2spec(t *testing.T, bin string, ts *testServer, strict bool) (total, passed int, failed []string, out string) {
	t.Helper()
	host, port, _ := net.SplitHostPort(ts.addr)
	report := filepath.Join(t.TempDir(), "report.xml")
	args := []string{"-h", host, "-p", port, "-j", report, "-o", "5"}
	if ts.tls != nil {
		args = append(args, "-t", "-k")
	}
	if strict {
		args = append(args, "-S")
	}
	b, _ := exec.CommandContext(t.Context(), bin, args...).CombinedOutput() // it exits non-zero on any failure
	raw, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("h2spec wrote no report: %v\n%s", err, b)
	}
	var r junitReport
	if err := xml.Unmarshal(raw, &r); err != nil {
		t.Fatalf("h2spec report: %v", err)
	}
	for _, s := range r.Suites {
		for _, c := range s.Cases {
			if c.Skipped != nil {
				continue
			}
			total++
			if c.Failure != nil || c.Error != nil {
				failed = append(failed, c.Class+" "+c.Name)
				continue
			}
			passed++
		}
	}
	return total, passed, failed, string(b)
}

// TestH2spec runs h2spec against the engine over h2c and TLS: every one of its 145
// cases must pass. Strict mode's result is logged, not required.
func TestH2spec(t *testing.T) {
	bin := h2specBinary(t)
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "h2c", true: "tls"}[useTLS], func(t *testing.T) {
			ts := startServer(t, Config{EnableConnectProtocol: true}, echoHandler, useTLS)
			total, passed, failed, out := runH2spec(t, bin, ts, false)
			if passed != h2specWant || total != h2specWant {
				t.Errorf("h2spec: %d of %d passed, want %d of %d; failed:\n%s\n%s", passed, total, h2specWant, h2specWant,
					strings.Join(failed, "\n"), out)
			}
			total, passed, failed, _ = runH2spec(t, bin, ts, true)
			if os.Getenv("H2SPEC_SHOW") != "" {
				t.Log(out)
			}
			t.Logf("h2spec strict mode: %d of %d passed; failed: %v", passed, total, failed)
		})
	}
}
