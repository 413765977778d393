package main

import (
	"strings"
	"testing"

	"github.com/serve-zone/ingress/routetable"
)

// TestTableIsValid: the tables bigtable writes are accepted by the ingress in both modes
// (sorted as the relay's contract wants), their sizes are as asked, -variant changes
// every target and nothing else, and -shared-cert repeats one PEM under every id.
func TestTableIsValid(t *testing.T) {
	s := spec{routes: 250, certs: 5, redirect: true, revision: 3}
	tb, err := s.table()
	if err != nil {
		t.Fatal(err)
	}
	data, err := tb.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []routetable.Mode{routetable.ModeRelay, routetable.ModeStandalone} {
		got, err := routetable.Decode(data, mode)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := routetable.Validate(got, mode); err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
		if len(got.Routes) != 250 || len(got.Certificates) != 5 || got.Revision != 3 {
			t.Fatalf("%d routes, %d certificates, revision %d", len(got.Routes), len(got.Certificates), got.Revision)
		}
	}

	v := spec{routes: 250, certs: 5, redirect: false, revision: 4, variant: 1, target: "127.0.0.1:9000", pairs: s.pairs}
	other, err := v.table()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := routetable.Validate(other, routetable.ModeRelay); err != nil {
		t.Fatal(err)
	}
	for i, r := range other.Routes {
		if r.Hostname != tb.Routes[i].Hostname || r.TLS.RedirectHTTP || r.Targets[0].LeaseID == tb.Routes[i].Targets[0].LeaseID ||
			r.Targets[0].Address != "127.0.0.1" || r.Targets[0].Port != 9000 || r.Targets[1].Port != 9001 {
			t.Fatalf("route %d: %+v against %+v", i, r, tb.Routes[i])
		}
	}
	if other.Certificates[2].CertificatePEM != tb.Certificates[2].CertificatePEM {
		t.Fatal("reused certificates differ")
	}

	shared := spec{routes: 40, certs: 4, sharedCert: true, revision: 1}
	st, err := shared.table()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := routetable.Validate(st, routetable.ModeRelay); err != nil {
		t.Fatal(err)
	}
	if st.Certificates[0].CertificatePEM != st.Certificates[3].CertificatePEM || !strings.HasSuffix(st.Routes[0].Hostname, ".bench.test") {
		t.Fatal("-shared-cert does not repeat one certificate")
	}
	if _, err := (&spec{routes: 10, certs: 20}).table(); err == nil {
		t.Fatal("more certificates than routes accepted")
	}
}
