package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestParseFlagsEnvironment: INGRESS_* variables set flags before the command line, which
// wins; every bad variable is named.
func TestParseFlagsEnvironment(t *testing.T) {
	env := map[string]string{
		"INGRESS_STATE_DIR":     "/var/lib/ingress",
		"INGRESS_DRAIN_TIMEOUT": "10s",
		"INGRESS_HTTP3":         "false",
		"INGRESS_ADMIN_ADDR":    ":9090",
		"UNRELATED":             "x",

		"INGRESS_PROXY_PROTOCOL_FROM":    "10.0.0.0/24, 2001:db8::1",
		"INGRESS_PROXY_PROTOCOL_TIMEOUT": "2s",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	o := defaultOptions()
	if err := parseFlags(o.flagSet("ingress", io.Discard), "", []string{"--routes", "/etc/r.json", "--drain-timeout", "20s"}, lookup); err != nil {
		t.Fatal(err)
	}
	if o.StateDir != "/var/lib/ingress" || o.Routes != "/etc/r.json" || o.DrainTimeout != 20*time.Second || o.HTTP3 || o.AdminAddr != ":9090" {
		t.Fatalf("options %+v", o)
	}
	if err := o.validate(); err != nil || fmt.Sprint(o.balancers) != "[10.0.0.0/24 2001:db8::1/128]" || o.ProxyProtocolTimeout != 2*time.Second {
		t.Fatalf("INGRESS_PROXY_PROTOCOL_*: %v, %v, %s", err, o.balancers, o.ProxyProtocolTimeout)
	}

	env = map[string]string{"INGRESS_DRAIN_TIMEOUT": "30", "INGRESS_HTTP3": "maybe"}
	o = defaultOptions()
	err := parseFlags(o.flagSet("ingress", io.Discard), "", nil, lookup)
	var ce configError
	if !errors.As(err, &ce) {
		t.Fatalf("want a configError, got %v", err)
	}
	for _, want := range []string{`INGRESS_DRAIN_TIMEOUT="30": must be a duration such as 30s`, `INGRESS_HTTP3="maybe": must be true or false`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}

func TestParseFlagsMessages(t *testing.T) {
	cases := []struct {
		args []string
		want string // "" means accepted; "help" a helpRequest
	}{
		{[]string{"--http3=false", "--drain-timeout=1m30s"}, ""},
		{[]string{"-h"}, "help"},
		{[]string{"--help"}, "help"},
		{[]string{"--drain-timeout", "30"}, `invalid value "30" for flag --drain-timeout: must be a duration such as 30s: a number needs a unit (ms, s, m or h), for example 30s (ingress -h lists every flag)`},
		{[]string{"--idle-timeout", "two minutes"}, `invalid value "two minutes" for flag --idle-timeout: must be a duration such as 30s (a number with a unit: ms, s, m or h; 1m30s)`},
		{[]string{"--http3", "false"}, "--http3 false: a boolean flag takes its value after '=' (write --http3=false; --http3 alone means true)"},
		{[]string{"--access-log", "true"}, "--access-log true: a boolean flag takes its value after '='"},
		{[]string{"--http3=nope"}, `invalid boolean value "nope" for --http3: must be true or false`},
		{[]string{"--routes"}, "flag needs an argument: --routes"},
		{[]string{"--nope"}, "flag provided but not defined: --nope"},
		{[]string{"--routes", "a.json", "b.json"}, `unexpected arguments ["b.json"]: ingress takes flags only (ingress -h lists them)`},
	}
	for _, tc := range cases {
		o := defaultOptions()
		err := parseFlags(o.flagSet("ingress", io.Discard), "", tc.args, nil)
		var hr helpRequest
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.want == "help" && !errors.As(err, &hr):
			t.Errorf("%q: want a help request, got %v", tc.args, err)
		case tc.want != "" && tc.want != "help" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: got %v\nwant %s", tc.args, err, tc.want)
		}
	}
}

func TestHealthURL(t *testing.T) {
	cases := map[string]string{
		":9090":                       "http://127.0.0.1:9090/readyz",
		"0.0.0.0:9090":                "http://127.0.0.1:9090/readyz",
		"[::]:9090":                   "http://[::1]:9090/readyz",
		"10.1.2.3:9090":               "http://10.1.2.3:9090/readyz",
		"localhost:9090":              "http://localhost:9090/readyz",
		"http://10.0.0.1:9090":        "http://10.0.0.1:9090/readyz",
		"https://admin.example/ready": "https://admin.example/ready",
	}
	for in, want := range cases {
		if got, err := healthURL(in, "/readyz"); err != nil || got != want {
			t.Errorf("healthURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"-h", "9090", "ftp://x:1", "http://"} {
		if got, err := healthURL(in, "/readyz"); err == nil {
			t.Errorf("healthURL(%q) = %q, want an error", in, got)
		}
	}
}

func TestQuickTarget(t *testing.T) {
	for in, want := range map[string]string{"127.0.0.1:3000": "127.0.0.1:3000", "localhost:80": "127.0.0.1:80",
		":8080": "127.0.0.1:8080", "8080": "127.0.0.1:8080", "10.0.0.5:1": "10.0.0.5:1"} {
		addr, port, err := quickTarget(in)
		if err != nil || net.JoinHostPort(addr, strconv.Itoa(port)) != want {
			t.Errorf("quickTarget(%q) = %s %d %v, want %s", in, addr, port, err, want)
		}
	}
	for _, in := range []string{"db.internal:5432", "[::1]:80", "10.0.0.5:0", "10.0.0.5:70000", "x", "0.0.0.0:80"} {
		if _, _, err := quickTarget(in); err == nil {
			t.Errorf("quickTarget(%q) accepted", in)
		}
	}
}

func TestSameListenAddr(t *testing.T) {
	for _, tc := range []struct {
		got, flag string
		same      bool
	}{
		{":80", ":80", true},
		{"127.0.0.1:8080", "127.0.0.1:8080", true},
		{"127.0.0.1:8080", "localhost:8080", true},
		{":443", "0.0.0.0:443", true},
		{"127.0.0.1:80", "127.0.0.2:80", false},
		{":80", ":443", false},
		{":80", "", false},
	} {
		if got := sameListenAddr(tc.got, tc.flag); got != tc.same {
			t.Errorf("sameListenAddr(%q, %q) = %v", tc.got, tc.flag, got)
		}
	}
}
