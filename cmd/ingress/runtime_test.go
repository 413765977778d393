package main

import (
	"runtime/debug"
	"testing"
)

func TestTuneRuntimeRespectsOperatorChoice(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)

	tuneRuntime(func(k string) (string, bool) { return "", false })
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Fatalf("GOGC default = %d, want %d", got, defaultGCPercent)
	}
	tuneRuntime(func(k string) (string, bool) { return "50", k == "GOGC" })
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC set by the operator was overridden: %d", got)
	}
}
