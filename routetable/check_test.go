package routetable

import (
	"errors"
	"slices"
	"testing"
)

// TestStoreCheckRefusesWhole: what StoreOptions.Check returns refuses the table like any
// violation (counted, remembered, the serving table kept); a table it accepts applies.
func TestStoreCheckRefusesWhole(t *testing.T) {
	s := NewStore(StoreOptions{Mode: ModeStandalone, Check: func(t *Table) []string {
		for i := range t.Routes {
			if t.Routes[i].TLS != nil && t.Routes[i].TLS.ACME {
				return []string{"routes: tls.acme needs a state directory"}
			}
		}
		return nil
	}})
	good := validTable(t)
	if err := s.Apply(good); err != nil {
		t.Fatal(err)
	}
	acme := validTable(t)
	acme.Revision = good.Revision + 1
	acme.Routes[2].TLS = &RouteTLS{ACME: true}
	err := s.Apply(acme)
	var te *Error
	if !errors.As(err, &te) || te.Code != CodeInvalid || !slices.Contains(te.Violations, "routes: tls.acme needs a state directory") {
		t.Fatalf("Apply = %v, want the check's violation", err)
	}
	if rev, _ := s.Applied(); rev != good.Revision || !s.Refused(acme.Revision) {
		t.Errorf("applied %d, refused %v: the refused table must not replace the serving one", rev, s.Refused(acme.Revision))
	}
}
