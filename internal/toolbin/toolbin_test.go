package toolbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMissingSkipsAndSaysSo: without CI a missing tool skips the test and says so on the
// terminal and in bin/last-skip (which keeps the package's result out of the test cache).
func TestMissingSkipsAndSaysSo(t *testing.T) {
	if os.Getenv("TOOLBIN_CHILD") != "" {
		Missing(t, "the frobnicator is missing")
		return
	}
	t.Setenv("CI", "")
	terminal = filepath.Join(t.TempDir(), "tty")
	if err := os.WriteFile(terminal, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer func() { terminal = "/dev/tty" }()
	returned := false
	t.Run("lacking", func(t *testing.T) {
		Missing(t, "the frobnicator is missing")
		returned = true
	})
	if returned {
		t.Fatal("Missing returned instead of skipping")
	}
	const want = "SKIP ./internal/toolbin TestMissingSkipsAndSaysSo/lacking: the frobnicator is missing\n"
	for _, f := range []string{terminal, filepath.Join(moduleRoot(), "bin", "last-skip")} {
		if b, err := os.ReadFile(f); err != nil || string(b) != want {
			t.Errorf("%s: %q %v; want %q", f, b, err, want)
		}
	}
}

// TestMissingFailsInCI: with CI set the same test fails, naming the tool and why.
func TestMissingFailsInCI(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestMissingSkipsAndSaysSo$", "-test.v")
	cmd.Env = append(os.Environ(), "TOOLBIN_CHILD=1", "CI=true")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the frobnicator is missing (CI is set, so this fails instead of skipping)") {
		t.Fatalf("with CI set: %v\n%s", err, out)
	}
}
