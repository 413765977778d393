package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The Redis client logs some of its own troubles (a connection pool's) to the standard
// logger, one per process. SetDriverLog sends those lines to f instead; nil drops them.
// Their text may quote what a server sent: f should treat it as such (scrub it, log it
// at debug level only).
func SetDriverLog(f func(line string)) {
	installDriverLog.Do(func() { redis.SetLogger(driverLogger{}) })
	if f == nil {
		driverLog.Store(nil)
		return
	}
	driverLog.Store(&f)
}

var (
	installDriverLog sync.Once
	driverLog        atomic.Pointer[func(string)]
)

type driverLogger struct{}

func (driverLogger) Printf(_ context.Context, format string, v ...any) {
	if f := driverLog.Load(); f != nil {
		(*f)(fmt.Sprintf(format, v...))
	}
}
