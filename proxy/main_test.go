package proxy

import (
	"os"
	"testing"
)

// TestMain runs the tests, unless this process was started as a helper of a test (a
// client that must keep its own pace whatever this process's load: steady_test.go; the
// idle HTTP/3 clients, whose memory must not count as the server's: h3idle_test.go).
func TestMain(m *testing.M) {
	if slowReaderChild() || h3IdleClientChild() {
		return
	}
	os.Exit(m.Run())
}
