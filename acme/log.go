package acme

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// certmagicLogger is the logger certmagic and its ACME client write to: the manager's,
// with certmagic's routine Info lines (locks, orders, solvers) moved to Debug, and its own
// reports of a failed attempt ("could not get certificate from issuer", "will retry",
// "job failed") moved to Debug too, since the manager logs each failed attempt once, with
// the CA's problem document (events.go). Everything else keeps its level.
func certmagicLogger(l *zap.Logger) *zap.Logger {
	return l.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return demoteCore{c} }))
}

// demoted are certmagic's messages that the manager's own failure line replaces.
var demoted = map[string]bool{
	"could not get certificate from issuer": true,
	"will retry":                            true,
	"job failed":                            true,
	"final attempt; giving up":              true,
}

type demoteCore struct{ zapcore.Core }

func (c demoteCore) With(fields []zapcore.Field) zapcore.Core { return demoteCore{c.Core.With(fields)} }

func (c demoteCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Level == zapcore.InfoLevel || demoted[e.Message] {
		e.Level = zapcore.DebugLevel
	}
	if !c.Core.Enabled(e.Level) {
		return ce
	}
	return ce.AddCore(e, c)
}

func (c demoteCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	return c.Core.Write(e, fields)
}
