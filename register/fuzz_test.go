package register

import (
	"encoding/json"
	"slices"
	"testing"
)

// FuzzBodyDecoders feeds the relay's bodies (registration answers, refusals, hints, table
// answers) to their decoders: none may panic, and whatever they accept must satisfy the
// contract's rules.
func FuzzBodyDecoders(f *testing.F) {
	for _, seed := range []string{
		`{"accepted":true,"revision":7,"protocol":{"name":"serve.zone/cluster-ingress","minVersion":1,"maxVersion":1}}`,
		`{"accepted":true,"revision":null,"protocol":{"name":"serve.zone/cluster-ingress","minVersion":1,"maxVersion":2}}`,
		`{"code":"cluster-ingress-registration-refused","reason":"assignment-not-running","retryAfterMs":15000}`,
		`{"code":"protocol-refused","offer":{"name":"serve.zone/cluster-ingress","minVersion":2,"maxVersion":3}}`,
		`{"revision":8}`,
		`{"table":null}`,
		`{"table":{"revision":1,"routes":[],"certificates":[]}}`,
		`{"revision":1e3}`, `[]`, `null`, `"x"`, `{"retryAfterMs":1000.0}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		raw := json.RawMessage(data)
		if a, err := decodeAccepted(raw); err == nil {
			if a.useVersion != 1 || (a.hasRevision && (a.revision < 0 || a.revision > 1<<53-1)) || (!a.hasRevision && a.revision != -1) {
				t.Fatalf("accepted a bad answer %q: %+v", data, a)
			}
		}
		if r, ok := readRefusal(raw); ok {
			if r.RetryAfterMs < 1000 || r.RetryAfterMs > 300000 || !slices.Contains(RefusalReasons, r.Reason) {
				t.Fatalf("accepted a bad refusal %q: %+v", data, r)
			}
		}
		if o, ok := readProtocolRefusal(raw); ok && (o.MinVersion < 1 || o.MinVersion > o.MaxVersion) {
			t.Fatalf("accepted a bad offer %q: %+v", data, o)
		}
		if rev, errs := decodeHint(raw); len(errs) == 0 && (rev < 0 || rev > 1<<53-1) {
			t.Fatalf("accepted a bad hint %q: %d", data, rev)
		}
		if tbl, err := decodeTableAnswer(raw); err == nil && tbl != nil && !json.Valid(tbl) {
			t.Fatalf("table answer %q yields invalid JSON", data)
		}
	})
}
