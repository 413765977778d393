package register

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadRefusal(t *testing.T) {
	tests := []struct {
		name string
		data string
		ok   bool
		want refusal
	}{
		{"valid", `{"code":"cluster-ingress-registration-refused","reason":"assignment-not-running","retryAfterMs":15000}`, true, refusal{"assignment-not-running", 15000}},
		{"min", `{"code":"cluster-ingress-registration-refused","reason":"not-ready","retryAfterMs":1000}`, true, refusal{"not-ready", 1000}},
		{"max", `{"code":"cluster-ingress-registration-refused","reason":"conflict","retryAfterMs":300000}`, true, refusal{"conflict", 300000}},
		{"below range", `{"code":"cluster-ingress-registration-refused","reason":"conflict","retryAfterMs":999}`, false, refusal{}},
		{"above range", `{"code":"cluster-ingress-registration-refused","reason":"conflict","retryAfterMs":300001}`, false, refusal{}},
		{"fractional", `{"code":"cluster-ingress-registration-refused","reason":"conflict","retryAfterMs":1500.5}`, false, refusal{}},
		{"string ms", `{"code":"cluster-ingress-registration-refused","reason":"conflict","retryAfterMs":"1500"}`, false, refusal{}},
		{"wrong code", `{"code":"refused","reason":"conflict","retryAfterMs":1500}`, false, refusal{}},
		{"unknown reason", `{"code":"cluster-ingress-registration-refused","reason":"tired","retryAfterMs":1500}`, false, refusal{}},
		{"extra key", `{"code":"cluster-ingress-registration-refused","reason":"conflict","retryAfterMs":1500,"x":1}`, false, refusal{}},
		{"missing key", `{"code":"cluster-ingress-registration-refused","reason":"conflict"}`, false, refusal{}},
		{"not an object", `[]`, false, refusal{}},
		{"absent", ``, false, refusal{}},
		{"repeated key", `{"code":"cluster-ingress-registration-refused","reason":"conflict","retryAfterMs":1500,"reason":"not-ready"}`, false, refusal{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := readRefusal(json.RawMessage(tc.data))
			if ok != tc.ok || got != tc.want {
				t.Fatalf("readRefusal = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestReadProtocolRefusal(t *testing.T) {
	o, ok := readProtocolRefusal(json.RawMessage(`{"code":"protocol-refused","offer":{"name":"serve.zone/cluster-ingress","minVersion":2,"maxVersion":3}}`))
	if !ok || o != (Offer{ProtocolName, 2, 3}) {
		t.Fatalf("got %+v %v", o, ok)
	}
	for _, bad := range []string{
		`{"code":"protocol-refused","offer":{"name":"x","minVersion":3,"maxVersion":2}}`,
		`{"code":"protocol-refused","offer":{"name":"x","minVersion":0,"maxVersion":2}}`,
		`{"code":"protocol-refused"}`,
		`{"code":"other","offer":{"name":"x","minVersion":1,"maxVersion":2}}`,
		`{"code":"protocol-refused","offer":{"name":"x","minVersion":1,"maxVersion":2},"extra":true}`,
	} {
		if _, ok := readProtocolRefusal(json.RawMessage(bad)); ok {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestDecodeAccepted(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		wantErr string
		rev     int64
	}{
		{"revision", `{"accepted":true,"revision":7,"protocol":{"name":"serve.zone/cluster-ingress","minVersion":1,"maxVersion":1}}`, "", 7},
		{"null revision", `{"accepted":true,"revision":null,"protocol":{"name":"serve.zone/cluster-ingress","minVersion":1,"maxVersion":3}}`, "", -1},
		{"not accepted", `{"accepted":false,"revision":7,"protocol":{"name":"serve.zone/cluster-ingress","minVersion":1,"maxVersion":1}}`, "accepted must be true", 0},
		{"negative revision", `{"accepted":true,"revision":-1,"protocol":{"name":"serve.zone/cluster-ingress","minVersion":1,"maxVersion":1}}`, "revision", 0},
		{"fractional revision", `{"accepted":true,"revision":1.5,"protocol":{"name":"serve.zone/cluster-ingress","minVersion":1,"maxVersion":1}}`, "revision", 0},
		{"no shared version", `{"accepted":true,"revision":1,"protocol":{"name":"serve.zone/cluster-ingress","minVersion":2,"maxVersion":2}}`, "shares no version", 0},
		{"other protocol", `{"accepted":true,"revision":1,"protocol":{"name":"other","minVersion":1,"maxVersion":1}}`, "shares no version", 0},
		{"extra key", `{"accepted":true,"revision":1,"protocol":{"name":"serve.zone/cluster-ingress","minVersion":1,"maxVersion":1},"x":1}`, "x is not allowed", 0},
		{"missing key", `{"accepted":true,"protocol":{"name":"serve.zone/cluster-ingress","minVersion":1,"maxVersion":1}}`, "revision is missing", 0},
		{"repeated key", `{"accepted":true,"revision":1,"protocol":{"name":"serve.zone/cluster-ingress","minVersion":1,"maxVersion":1,"minVersion":2}}`, "response.protocol.minVersion is repeated", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := decodeAccepted(json.RawMessage(tc.body))
			if tc.wantErr == "" {
				if err != nil || a.revision != tc.rev {
					t.Fatalf("got %+v, %v", a, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestRegistrationBodyMatchesContractExample checks the body we build has exactly the keys
// and shapes of the contract's register-request example.
func TestRegistrationBodyMatchesContractExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "register-request.json"))
	if err != nil {
		t.Fatal(err)
	}
	var example struct {
		Request json.RawMessage `json:"request"`
	}
	if err := json.Unmarshal(raw, &example); err != nil {
		t.Fatal(err)
	}
	ours, _ := json.Marshal(registration{
		Bearer: "<the bearer>", Version: "1.0.0", NodeID: "node-1",
		Capabilities: []string{"http1", "http2", "tls-termination", "traffic-statistics", "websocket"},
		Protocol:     OwnOffer,
	})
	var a, b any
	_ = json.Unmarshal(example.Request, &a)
	_ = json.Unmarshal(ours, &b)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatalf("registration body\n ours    %s\n example %s", jb, ja)
	}
}

func TestDecodeHint(t *testing.T) {
	if rev, errs := decodeHint(json.RawMessage(`{"revision":8}`)); rev != 8 || errs != nil {
		t.Fatalf("got %d %v", rev, errs)
	}
	for _, bad := range []string{`{"revision":-1}`, `{"revision":1.5}`, `{}`, `{"revision":1,"x":2}`, `null`, `{"revision":"8"}`} {
		if _, errs := decodeHint(json.RawMessage(bad)); len(errs) == 0 {
			t.Errorf("accepted %s", bad)
		}
	}
}
