package register

import (
	"context"
	"testing"
	"time"

	"github.com/serve-zone/ingress/relaysim"
)

// TestFailedPullIsRetriedWhileNewerIsKnown: a pull the relay fails is tried again about
// pullRetryMin later (not at the next hint or periodic pull) while the hinted revision is
// still newer than the applied one, the wait doubling.
func TestFailedPullIsRetriedWhileNewerIsKnown(t *testing.T) {
	h := newHarness(t, func(s *relaysim.Server) { s.SetTable(table(1), 1) }, repull(time.Hour))
	h.waitApplied(1)
	h.sim.SetTable(table(2), 2)
	h.sim.FailCalls(MethodGetRouteTable, "relay busy", nil, 2)
	if err := h.sim.PushHint(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	h.waitApplied(2)
	pulls := h.calls(MethodGetRouteTable)
	if len(pulls) != 4 { // the acceptance's, the failed two, the one that applied
		t.Fatalf("%d pulls, want 4", len(pulls))
	}
	if gap := pulls[2].At.Sub(pulls[1].At); gap < pullRetryMin {
		t.Errorf("retried %s after the failure, want at least %s", gap, pullRetryMin)
	}
	if gap := pulls[3].At.Sub(pulls[2].At); gap < 2*pullRetryMin {
		t.Errorf("second retry %s after the first, want the wait doubled (%s)", gap, 2*pullRetryMin)
	}
}
