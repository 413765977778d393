package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/redact"
)

// TestE2ERelayEchoOfTheBearerIsScrubbed: a relay that echoes the bearer in a refusal reason
// and in a route table (as a key the schema does not allow). The reason, being no reason
// the contract names, is logged as "unknown" with its fingerprint, and at debug level (the
// harness runs the binary so) scrubbed, with the marker where the bearer was; the table's
// violation names the key scrubbed. It checks the wiring: the session fingerprints and
// scrubs what the relay answers, and the store it applies tables to scrubs its violations.
func TestE2ERelayEchoOfTheBearerIsScrubbed(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	rs, origin := startRelay(t, "127.0.0.1:0")
	reason := "bearer-refused: " + e2eBearer // an unknown reason
	rs.RefuseRegistrations(reason, 1000, 1)
	rs.SetTable([]byte(`{"revision":1,"routes":[],"certificates":[],"`+e2eBearer+`":true}`), 1)

	p := startIngress(t, binarytest.RelayEnv(e2eBearer, origin, e2eNode), binarytest.BaseArgs()...)
	failed := p.WaitLine(e2eWait, func(m map[string]any) bool { return m["msg"] == "registration failed" })
	fp := redact.Fingerprint(reason)
	if got := fmt.Sprint(failed["reason"]); got != "unknown ("+fp+")" {
		t.Errorf("registration failed with reason %q, want it unknown with its fingerprint %s", got, fp)
	}
	debug := p.WaitLine(e2eWait, func(m map[string]any) bool {
		return m["msg"] == "relay-sent text" && m["field"] == "reason" && m["fingerprint"] == fp
	})
	if got := fmt.Sprint(debug["text"]); got != "bearer-refused: [redacted]" || debug["level"] != "debug" {
		t.Errorf("the reason's debug line holds %q at %v, want the echoed bearer as [redacted] at debug", got, debug["level"])
	}
	violation := p.WaitLine(e2eWait, func(m map[string]any) bool { return m["msg"] == "route table violation" })
	if got := fmt.Sprint(violation["violation"]); !strings.Contains(got, "[redacted] is not allowed") {
		t.Errorf("route table violation %q, want the echoed bearer as [redacted]", got)
	}
	p.Stop(e2eWait)
	p.AssertNoSecret(e2eBearer)
}
