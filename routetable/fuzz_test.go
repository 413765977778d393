package routetable

import (
	"encoding/json"
	"strings"
	"testing"
)

func FuzzDecode(f *testing.F) {
	for _, data := range exampleTables(f) {
		f.Add(data, false)
		f.Add(data, true)
	}
	f.Add([]byte(`{"revision":0,"routes":[],"certificates":[]}`), false)
	f.Add([]byte(`{"revision":1,"routes":[{"hostname":"*.a.test","targets":[{"leaseId":"l","address":"127.0.0.1","port":1},`+
		`{"leaseId":"l","address":"127.0.0.1","port":2}],"tls":null},{"hostname":"b.a.test","targets":[{"leaseId":"m",`+
		`"address":"10.0.0.1","port":65535}],"tls":null}],"certificates":[]}`), false)
	f.Add([]byte(`{"revision":2,"routes":[{"hostname":"a.test","targets":[{"leaseId":"l","address":"127.0.0.1","port":80}],`+
		`"tls":{"acme":true,"redirectHttp":false}}],"certificates":[]}`), true)
	f.Add([]byte(`{"revision":1e3,"routes":[],"certificates":[],"x":null}`), false)

	f.Fuzz(func(t *testing.T, data []byte, standalone bool) {
		mode := ModeRelay
		if standalone {
			mode = ModeStandalone
		}
		tb, err := Decode(data, mode)
		if err != nil {
			if tb != nil {
				t.Fatal("a refused decode returned a table")
			}
			if re, ok := err.(*Error); !ok || re.Code != CodeInvalid || len(re.Violations) == 0 {
				t.Fatalf("decode error %#v", err)
			}
			return
		}
		// Differential check: encoding/json reads an accepted document the same way.
		// (It refuses integral numbers written as 8e1 or 80.0, which the contract accepts.)
		var std Table
		if err := json.Unmarshal(data, &std); err == nil && mustJSON(tb) != mustJSON(&std) {
			a, b := mustJSON(tb), mustJSON(&std)
			t.Fatalf("decoded differently from encoding/json:\n%s\n%s", a, b)
		}
		if _, err := Validate(tb, mode); err != nil {
			return
		}
		checkInvariants(t, tb, mode)

		// A valid table compiles, and every route answers for its own names.
		s := NewStore(StoreOptions{Mode: mode})
		if err := s.Apply(tb); err != nil {
			t.Fatalf("a valid table was not applied: %v", err)
		}
		c := s.Load()
		exact := map[string]bool{}
		for _, r := range tb.Routes {
			exact[r.Hostname] = true
		}
		for _, r := range tb.Routes {
			probe := r.Hostname
			if parent, ok := strings.CutPrefix(r.Hostname, "*."); ok {
				probe = "x." + parent
				if exact[probe] {
					continue
				}
			}
			if e := c.Lookup(strings.ToUpper(probe) + ":443"); e == nil || e.Hostname != r.Hostname {
				t.Fatalf("Lookup(%q) = %v, want route %q", probe, e, r.Hostname)
			}
		}
		// The persisted form decodes back to the same table.
		out, err := json.Marshal(tb)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(out, mode)
		if err != nil {
			t.Fatalf("re-encoded table refused: %v", err)
		}
		if again, _ := json.Marshal(back); string(again) != string(out) {
			t.Fatal("re-encoding is not stable")
		}
	})
}

// checkInvariants re-checks, independently of Validate, what an accepted table promises.
// A relay table is strictly ordered; a standalone file may list things in any order
// (contract §7) but repeats nothing.
func checkInvariants(t *testing.T, tb *Table, mode Mode) {
	t.Helper()
	relay := mode == ModeRelay
	hosts := map[string]bool{}
	if tb.Revision < 0 || len(tb.Routes) > MaxRoutes || len(tb.Certificates) > MaxCertificates {
		t.Fatal("limits broken")
	}
	ids := map[string]bool{}
	for i, c := range tb.Certificates {
		if relay && i > 0 && c.ID <= tb.Certificates[i-1].ID {
			t.Fatal("certificates not strictly ordered")
		}
		if _, dup := ids[c.ID]; dup {
			t.Fatalf("certificate %q twice", c.ID)
		}
		ids[c.ID] = false
	}
	for i, r := range tb.Routes {
		if relay && i > 0 && r.Hostname <= tb.Routes[i-1].Hostname {
			t.Fatal("routes not strictly ordered")
		}
		if hosts[r.Hostname] {
			t.Fatalf("hostname %q twice", r.Hostname)
		}
		hosts[r.Hostname] = true
		if !ValidHostname(r.Hostname) || strings.ToLower(r.Hostname) != r.Hostname || strings.HasSuffix(r.Hostname, ".") {
			t.Fatalf("hostname %q accepted", r.Hostname)
		}
		if len(r.Targets) < 1 || len(r.Targets) > MaxTargetsPerRoute {
			t.Fatal("target count broken")
		}
		for j, tg := range r.Targets {
			if relay && j > 0 && compareTargets(&tg, &r.Targets[j-1]) <= 0 {
				t.Fatal("targets not strictly ordered")
			}
			for _, other := range r.Targets[:j] {
				if other.Address == tg.Address && other.Port == tg.Port {
					t.Fatalf("target %s:%d twice", tg.Address, tg.Port)
				}
			}
			if tg.Port < 1 || tg.Port > 65535 || !ValidTargetAddress(tg.Address) {
				t.Fatalf("target %+v accepted", tg)
			}
		}
		if r.TLS != nil {
			if r.TLS.ACME {
				if mode != ModeStandalone || r.TLS.CertificateID != "" {
					t.Fatal("acme accepted outside its shape")
				}
				continue
			}
			if _, ok := ids[r.TLS.CertificateID]; !ok {
				t.Fatal("route names a missing certificate")
			}
			ids[r.TLS.CertificateID] = true
		}
	}
	for id, used := range ids {
		if !used {
			t.Fatalf("certificate %q unreferenced", id)
		}
	}
}
