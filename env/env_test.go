package env

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

const secret = "s3cr3t-bearer-VALUE"

func lookupOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func valid() map[string]string {
	return map[string]string{
		VarBearer:      secret,
		VarRelayOrigin: "https://relay.example.test",
		VarNodeID:      "node-1",
	}
}

func TestReadValid(t *testing.T) {
	cfg, err := Read(lookupOf(valid()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Bearer.Reveal() != secret || cfg.RelayOrigin != "https://relay.example.test" || cfg.NodeID != "node-1" {
		t.Fatalf("unexpected config %+v", cfg)
	}
}

func TestReadProblems(t *testing.T) {
	files := map[string]string{
		"/run/bearer":        secret + "\n",
		"/run/bearer-2nl":    secret + "\n\n",
		"/run/bearer-empty":  "",
		"/run/bearer-spaces": "a b",
	}
	readFile := func(p string) ([]byte, error) {
		if v, ok := files[p]; ok {
			return []byte(v), nil
		}
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	tests := []struct {
		name   string
		change map[string]*string // nil value deletes
		want   []string           // substrings, one per expected problem
		opts   Options
	}{
		{name: "bearer missing", change: map[string]*string{VarBearer: nil}, want: []string{VarBearer + " is not set"}},
		{name: "bearer empty", change: map[string]*string{VarBearer: ptr("")}, want: []string{VarBearer + " is empty"}},
		{name: "bearer too long", change: map[string]*string{VarBearer: ptr(strings.Repeat("a", 4097))}, want: []string{"longer than 4096"}},
		{name: "bearer 4096 ok", change: map[string]*string{VarBearer: ptr(strings.Repeat("a", 4096))}},
		{name: "bearer space", change: map[string]*string{VarBearer: ptr("ab cd")}, want: []string{"visible ASCII"}},
		{name: "bearer non-ascii", change: map[string]*string{VarBearer: ptr("abé")}, want: []string{"visible ASCII"}},
		{name: "bearer and file", change: map[string]*string{VarBearerFile: ptr("/run/bearer")}, want: []string{"both set"}},
		{name: "file ok", change: map[string]*string{VarBearer: nil, VarBearerFile: ptr("/run/bearer")}},
		{name: "file two newlines", change: map[string]*string{VarBearer: nil, VarBearerFile: ptr("/run/bearer-2nl")}, want: []string{"visible ASCII"}},
		{name: "file empty", change: map[string]*string{VarBearer: nil, VarBearerFile: ptr("/run/bearer-empty")}, want: []string{"is empty"}},
		{name: "file missing", change: map[string]*string{VarBearer: nil, VarBearerFile: ptr("/run/nope")}, want: []string{VarBearerFile + ": cannot read"}},
		{name: "file name empty", change: map[string]*string{VarBearer: nil, VarBearerFile: ptr("")}, want: []string{VarBearerFile + " is empty"}},
		{name: "origin missing", change: map[string]*string{VarRelayOrigin: nil}, want: []string{VarRelayOrigin + " is not set"}},
		{name: "origin path", change: map[string]*string{VarRelayOrigin: ptr("https://relay.test/x")}, want: []string{"path"}},
		{name: "origin slash", change: map[string]*string{VarRelayOrigin: ptr("https://relay.test/")}, want: []string{"path"}},
		{name: "origin query", change: map[string]*string{VarRelayOrigin: ptr("https://relay.test?a=1")}, want: []string{"query"}},
		{name: "origin fragment", change: map[string]*string{VarRelayOrigin: ptr("https://relay.test#x")}, want: []string{"fragment"}},
		{name: "origin user", change: map[string]*string{VarRelayOrigin: ptr("https://u:p@relay.test")}, want: []string{"user info"}},
		{name: "origin scheme", change: map[string]*string{VarRelayOrigin: ptr("wss://relay.test")}, want: []string{"https://"}},
		{name: "origin no host", change: map[string]*string{VarRelayOrigin: ptr("https://")}, want: []string{"host"}},
		{name: "origin port", change: map[string]*string{VarRelayOrigin: ptr("https://relay.test:8443")}},
		{name: "origin bad port", change: map[string]*string{VarRelayOrigin: ptr("https://relay.test:70000")}, want: []string{"port"}},
		{name: "http loopback ip", change: map[string]*string{VarRelayOrigin: ptr("http://127.0.0.5:9000")}},
		{name: "http localhost", change: map[string]*string{VarRelayOrigin: ptr("http://localhost:9000")}},
		{name: "http v6 loopback", change: map[string]*string{VarRelayOrigin: ptr("http://[::1]:9000")}},
		{name: "http remote", change: map[string]*string{VarRelayOrigin: ptr("http://relay.test")}, want: []string{"--allow-insecure-relay"}},
		{name: "http remote allowed", change: map[string]*string{VarRelayOrigin: ptr("http://relay.test")}, opts: Options{AllowInsecureRelay: true}},
		{name: "node missing", change: map[string]*string{VarNodeID: nil}, want: []string{VarNodeID + " is not set"}},
		{name: "node bad", change: map[string]*string{VarNodeID: ptr("-node")}, want: []string{VarNodeID + " must be"}},
		{name: "node too long", change: map[string]*string{VarNodeID: ptr(strings.Repeat("n", 129))}, want: []string{VarNodeID + " must be"}},
		{name: "all at once", change: map[string]*string{VarBearer: nil, VarRelayOrigin: ptr("ftp://x"), VarNodeID: ptr("")},
			want: []string{VarBearer, VarRelayOrigin, VarNodeID}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := valid()
			for k, v := range tc.change {
				if v == nil {
					delete(m, k)
				} else {
					m[k] = *v
				}
			}
			opts := tc.opts
			opts.ReadFile = readFile
			_, err := Read(lookupOf(m), opts)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("expected problems %q, got none", tc.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("want %d problems, got %d: %q", len(tc.want), len(lines), lines)
			}
			for i, w := range tc.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, lines[i], w)
				}
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatal("error text quotes the bearer")
			}
		})
	}
}

func ptr(s string) *string { return &s }

type holder struct {
	Name   string
	Bearer Bearer
}

func TestBearerNeverPrinted(t *testing.T) {
	b := NewBearer(secret)
	h := holder{Name: "x", Bearer: b}
	outs := []string{
		b.String(), b.GoString(),
		fmt.Sprintf("%v %+v %#v %s %q %x %X %d", b, b, b, b, b, b, b, b),
		fmt.Sprintf("%v %+v %#v", h, h, h),
		fmt.Sprintf("%v", &h),
		fmt.Sprint(errors.New("x"), b),
	}
	j, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	outs = append(outs, string(j))

	core, logs := observer.New(zap.DebugLevel)
	log := zap.New(core)
	log.Info("m", zap.Any("h", h), zap.Any("b", b), zap.Stringer("s", b), zap.Object("o", b), zap.Reflect("r", h))
	for _, e := range logs.All() {
		outs = append(outs, fmt.Sprint(e.ContextMap()))
	}
	for _, o := range outs {
		if strings.Contains(o, secret) {
			t.Fatalf("bearer leaked in %q", o)
		}
		if !strings.Contains(o, redacted) {
			t.Fatalf("placeholder missing in %q", o)
		}
	}
	if b.Reveal() != secret {
		t.Fatal("Reveal lost the value")
	}
}
