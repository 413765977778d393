package main

import (
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger builds the process logger: JSON lines by default, console for people.
func newLogger(format string, level zapcore.Level, out io.Writer) *zap.Logger {
	cfg := zap.NewProductionEncoderConfig()
	cfg.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.EncodeDuration = zapcore.StringDurationEncoder
	var enc zapcore.Encoder
	if format == "console" {
		cfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(cfg)
	} else {
		enc = zapcore.NewJSONEncoder(cfg)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(out)), level)
	l := zap.New(core, zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(out))))
	// The standard library's own lines (net/http's transport complaining about bytes a
	// target sent unasked, say) are target noise: through zap, in its format, at debug.
	if _, err := zap.RedirectStdLogAt(l.Named("stdlib"), zapcore.DebugLevel); err != nil {
		l.Warn("standard library log not redirected", zap.Error(err))
	}
	return l
}

// accessLogger returns log's sink for the access log: the same format and output, at
// info whatever --log-level says (--access-log asks for the lines; --log-level is about
// operational messages).
func accessLogger(log *zap.Logger) *zap.Logger {
	return log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return infoCore{c} }))
}

// infoCore enables info and above on a core whose own level may be higher. The cores
// newLogger builds write every entry they are handed (the level is checked in Check).
type infoCore struct{ zapcore.Core }

func (c infoCore) Enabled(l zapcore.Level) bool { return l >= zapcore.InfoLevel }

func (c infoCore) With(f []zapcore.Field) zapcore.Core { return infoCore{c.Core.With(f)} }

func (c infoCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}
