package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/serve-zone/ingress/internal/binarytest"
)

const testBearer = "very-secret-bearer-123"

// TestBinaryRefusesBrokenEnvironment builds the real binary and runs it with a broken
// environment: exit status 2, one line per problem, naming each variable, never the bearer.
func TestBinaryRefusesBrokenEnvironment(t *testing.T) {
	bin := buildBinary(t)
	tests := []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{
			name: "everything missing",
			want: []string{"SERVEZONE_CLUSTER_INGRESS_BEARER", "SERVEZONE_CLUSTER_RELAY_ORIGIN", "SERVEZONE_CLUSTER_NODE_ID",
				// and the ways without a relay (issue 34: a bare ingress said nothing else)
				"ingress: without a relay: ingress demo", "ingress proxy --from HOST --to ADDR", "ingress --routes FILE", "ingress -h"},
		},
		{
			name: "bad origin and node, bearer set",
			env: []string{"SERVEZONE_CLUSTER_INGRESS_BEARER=" + testBearer,
				"SERVEZONE_CLUSTER_RELAY_ORIGIN=http://relay.example.test/path", "SERVEZONE_CLUSTER_NODE_ID=_bad"},
			want: []string{"SERVEZONE_CLUSTER_RELAY_ORIGIN", "SERVEZONE_CLUSTER_NODE_ID"},
		},
		{
			name: "bearer with a space and a bad flag",
			env: []string{"SERVEZONE_CLUSTER_INGRESS_BEARER=" + testBearer + " x",
				"SERVEZONE_CLUSTER_RELAY_ORIGIN=https://relay.example.test", "SERVEZONE_CLUSTER_NODE_ID=node-1"},
			args: []string{"--log-format", "xml"},
			want: []string{"--log-format", "SERVEZONE_CLUSTER_INGRESS_BEARER"},
		},
		{
			name: "unknown flag",
			args: []string{"--no-such-flag"},
			want: []string{"no-such-flag"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, tc.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != 2 {
				t.Fatalf("want exit status 2, got %v; stderr:\n%s", err, stderr.String())
			}
			out := stderr.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("stderr lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, testBearer) {
				t.Fatalf("stderr quotes the bearer:\n%s", out)
			}
		})
	}
}

func TestBinaryVersion(t *testing.T) {
	bin := buildBinary(t)
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "9.8.7-test" {
		t.Fatalf("version = %q, want the stamped 9.8.7-test", got)
	}
}

// ingress is the binary under test, stamped with a test version.
var ingress = &binarytest.Binary{
	Package: binarytest.IngressPackage,
	Flags:   []string{"-ldflags", "-X main.version=9.8.7-test"},
}

// buildBinary builds the binary on first use and returns its path.
func buildBinary(t *testing.T) string {
	t.Helper()
	return ingress.Path(t)
}

func TestMain(m *testing.M) {
	code := m.Run()
	ingress.Remove()
	os.Exit(code)
}
