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
	return zap.New(core, zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(out))))
}
