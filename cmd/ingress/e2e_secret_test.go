package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/serve-zone/ingress/internal/binarytest"
)

// TestE2ERelayEchoOfTheBearerIsScrubbed: a relay that echoes the bearer in a refusal reason
// and in a route table (as a key the schema does not allow) gets both logged, with the
// marker where the bearer was. It checks the wiring: the session scrubs what the relay
// answers, and the store it applies tables to scrubs its violations.
func TestE2ERelayEchoOfTheBearerIsScrubbed(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	rs, origin := startRelay(t, "127.0.0.1:0")
	rs.RefuseRegistrations("bearer-refused: "+e2eBearer, 1000, 1) // an unknown reason
	rs.SetTable([]byte(`{"revision":1,"routes":[],"certificates":[],"`+e2eBearer+`":true}`), 1)

	p := startIngress(t, binarytest.RelayEnv(e2eBearer, origin, e2eNode), binarytest.BaseArgs()...)
	failed := p.WaitLine(e2eWait, func(m map[string]any) bool { return m["msg"] == "registration failed" })
	if got := fmt.Sprint(failed["reason"]); got != "bearer-refused: [redacted]" {
		t.Errorf("registration failed with reason %q, want the echoed bearer as [redacted]", got)
	}
	violation := p.WaitLine(e2eWait, func(m map[string]any) bool { return m["msg"] == "route table violation" })
	if got := fmt.Sprint(violation["violation"]); !strings.Contains(got, "[redacted] is not allowed") {
		t.Errorf("route table violation %q, want the echoed bearer as [redacted]", got)
	}
	p.Stop(e2eWait)
	p.AssertNoSecret(e2eBearer)
}
