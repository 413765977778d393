package jsonx

import (
	"encoding/json"
	"testing"
)

func TestIntRefusesNumbersInStrings(t *testing.T) {
	for raw, ok := range map[string]bool{`80`: true, `8e1`: true, `80.0`: true, `"80"`: false, ` "80"`: false, `null`: false, `80.5`: false} {
		var e Errors
		_, got := Int(json.RawMessage(raw), "port", &e, 1, 65535)
		if got != ok {
			t.Errorf("Int(%s) ok = %v, want %v", raw, got, ok)
		}
		_, got = Counter(json.RawMessage(raw), "n", &e)
		if got != ok {
			t.Errorf("Counter(%s) ok = %v, want %v", raw, got, ok)
		}
	}
}
