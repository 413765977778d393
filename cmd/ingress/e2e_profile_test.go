package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/routetable"
)

// TestE2ECPUProfile: --cpuprofile writes a complete pprof file (gzip) of the run, mode
// 0600, when the ingress stops on SIGTERM; a path that cannot be created is refused at
// start with status 2 and the flag named.
func TestE2ECPUProfile(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	target := routetable.Target{LeaseID: "lease-1", Address: "127.0.0.1", Port: 8080}
	dir := t.TempDir()
	file := filepath.Join(dir, "routes.json")
	if err := os.WriteFile(file, binarytest.TableJSON(t, 1, nil, binarytest.Route("app.example.test", "", false, target)), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("written at a graceful stop", func(t *testing.T) {
		prof := filepath.Join(dir, "cpu.pprof")
		p := startIngress(t, nil, binarytest.BaseArgs("--routes", file, "--cpuprofile", prof)...)
		p.Signal(syscall.SIGTERM)
		if code := p.Wait(e2eWait); code != 0 {
			t.Fatalf("exit status %d; stderr:\n%s", code, p.Stderr())
		}
		b, err := os.ReadFile(prof)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
			t.Fatalf("profile is not a gzipped pprof file (%d bytes)", len(b))
		}
		if st, err := os.Stat(prof); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("profile mode %v, %v; want 0600", st.Mode().Perm(), err)
		}
	})
	t.Run("path refused", func(t *testing.T) {
		p := execIngress(t, nil, binarytest.BaseArgs("--routes", file, "--cpuprofile", filepath.Join(dir, "missing", "cpu.pprof"))...)
		if code := p.Wait(e2eWait); code != exitConfig {
			t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitConfig, p.Stderr())
		}
		if out := p.Stderr(); !strings.Contains(out, "--cpuprofile") {
			t.Errorf("stderr does not name the flag:\n%s", out)
		}
	})
}
