package main

import (
	"bytes"
	stdlog "log"
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"
)

// TestAccessLogIgnoresLogLevel: --access-log lines are written with --log-level warn,
// while the process logger's own info lines are not.
func TestAccessLogIgnoresLogLevel(t *testing.T) {
	for _, format := range []string{"json", "console"} {
		var out bytes.Buffer
		log := newLogger(format, zapcore.WarnLevel, &out)
		access := accessLogger(log).Named("access")
		log.Info("operational info")
		access.Info("request")
		access.Debug("not at info")
		log.Warn("operational warning")
		got := out.String()
		if strings.Contains(got, "operational info") || strings.Contains(got, "not at info") {
			t.Errorf("%s: below-level lines written:\n%s", format, got)
		}
		if !strings.Contains(got, "request") || !strings.Contains(got, "access") || !strings.Contains(got, "operational warning") {
			t.Errorf("%s: access or warning line missing:\n%s", format, got)
		}
	}
}

// TestStdlibLogGoesThroughZap: the standard library's log lines (net/http's transport
// about a target's stray bytes) come out in the process's format, at debug only.
func TestStdlibLogGoesThroughZap(t *testing.T) {
	var quiet, verbose bytes.Buffer
	newLogger("json", zapcore.InfoLevel, &quiet)
	stdlog.Print("Unsolicited response received on idle HTTP channel")
	newLogger("json", zapcore.DebugLevel, &verbose)
	stdlog.Print("Unsolicited response received on idle HTTP channel")
	if quiet.Len() != 0 {
		t.Errorf("at info: %s", quiet.String())
	}
	if got := verbose.String(); !strings.Contains(got, `"logger":"stdlib"`) || !strings.Contains(got, "Unsolicited") {
		t.Errorf("at debug: %q, want a JSON line from the stdlib logger", got)
	}
}
