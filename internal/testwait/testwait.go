// Package testwait is the one polling helper of the module's tests: it waits for a
// condition that the code under test makes true, instead of sleeping for a guessed time.
// A test that must show something does NOT happen waits for a later event that would
// have come after it, then checks; it does not sleep and look.
package testwait

import (
	"testing"
	"time"
)

// Poll is how often a condition is tried again.
const Poll = 5 * time.Millisecond

// Until tries cond every Poll until it holds; if it still does not after timeout, the
// test fails with "timed out after TIMEOUT waiting for WHAT".
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	UntilWhy(t, timeout, what, func() (bool, string) { return cond(), "" })
}

// UntilWhy is Until for a condition that says why it does not hold yet; the last reason
// is in the failure.
func UntilWhy(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(Poll)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if why != "" {
				why = ": " + why
			}
			t.Fatalf("timed out after %s waiting for %s%s", timeout, what, why)
		}
		<-tick.C
	}
}
