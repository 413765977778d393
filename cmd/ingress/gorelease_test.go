package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/serve-zone/ingress/internal/binarytest"
)

// TestVulnerableGo: a binary built with a Go release that .ci/run's govulncheck gate
// would refuse says so (issue 34: `go install` with GOTOOLCHAIN=local built with the
// machine's Go 1.26.8).
func TestVulnerableGo(t *testing.T) {
	for v, want := range map[string]string{
		"go1.26.8":                "fixed in go1.26.10 and go1.27.3",
		"go1.26":                  "fixed in go1.26.10 and go1.27.3",
		"go1.27.2":                "fixed in go1.27.3",
		"go1.27rc1":               "fixed in go1.27.3",
		"go1.25.9":                "fixed in go1.26.10 and go1.27.3",
		"go1.26.10":               "",
		"go1.27.3":                "",
		"go1.27.11":               "",
		"go1.28":                  "",
		"go1.28rc2":               "",
		"devel go1.28-1a2b3c4d5e": "",
	} {
		got := vulnerableGo(v)
		if (want == "") != (got == "") || !strings.Contains(got, want) || (got != "" && !strings.Contains(got, "GOTOOLCHAIN="+goToolchain)) {
			t.Errorf("vulnerableGo(%q) = %q, want %q", v, got, want)
		}
	}
}

// TestGoReleaseInStep: the release the binary names is the one .ci/run pins, and the
// newest line of goFixed is that release.
func TestGoReleaseInStep(t *testing.T) {
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^export GOTOOLCHAIN=(\S+)$`).FindSubmatch(ci); m == nil || string(m[1]) != goToolchain {
		t.Errorf(".ci/run's GOTOOLCHAIN %q, want %s (goToolchain)", m, goToolchain)
	}
	if vulnerableGo(goToolchain) != "" {
		t.Errorf("%s is refused by goFixed", goToolchain)
	}
}

// TestStartWarnsOfAVulnerableGo: the ingress built with such a release logs it at start.
func TestStartWarnsOfAVulnerableGo(t *testing.T) {
	old := goVersion
	goVersion = func() string { return "go1.26.8" }
	defer func() { goVersion = old }()
	file := t.TempDir() + "/routes.json"
	binarytest.WriteFileAtomic(t, file, []byte(`{"revision":1,"routes":[],"certificates":[]}`))
	var stderr bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // stops right after the start
	err := runIngress(ctx, binarytest.BaseArgs("--routes", file), &stderr, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "built with go1.26.8, which has known vulnerabilities") {
		t.Fatalf("no warning:\n%s", stderr.String())
	}
}
