package testwait

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recorder stands in for a test: Fatalf records the message and ends the goroutine, as
// testing.T's does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func run(fn func(*recorder)) string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	return r.msg
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	msg := run(func(r *recorder) {
		Until(r, time.Minute, "three tries", func() bool { return n.Add(1) == 3 })
	})
	if msg != "" || n.Load() != 3 {
		t.Fatalf("failed with %q after %d tries, want success at the third", msg, n.Load())
	}
}

func TestUntilWhyFailsWithTheLastReason(t *testing.T) {
	var n atomic.Int32
	msg := run(func(r *recorder) {
		UntilWhy(r, 20*time.Millisecond, "the impossible", func() (bool, string) {
			return false, fmt.Sprintf("try %d", n.Add(1))
		})
	})
	want := fmt.Sprintf("timed out after 20ms waiting for the impossible: try %d", n.Load())
	if msg != want || !strings.Contains(msg, "try") {
		t.Fatalf("failure %q, want %q", msg, want)
	}
}
