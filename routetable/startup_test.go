package routetable

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/jsonx"
	"github.com/serve-zone/ingress/internal/testcert"
)

// TestCertificateParsedOncePerPEM: a PEM pair repeated under several ids is parsed once
// (every id serves the same key pair), and the next table reuses the served table's key
// pairs instead of parsing them again; a new PEM is parsed.
func TestCertificateParsedOncePerPEM(t *testing.T) {
	p := pairFor(t, "example.test", "*.example.test")
	tb := validTable(t)
	tb.Certificates = append(tb.Certificates, Certificate{ID: "cert-b", CertificatePEM: p.cert, PrivateKeyPEM: p.key})
	tb.Routes[1].TLS = &RouteTLS{CertificateID: "cert-b"}
	s := NewStore(StoreOptions{})
	if err := s.Apply(tb); err != nil {
		t.Fatal(err)
	}
	c := s.Load()
	a, b := c.CertificateByID("cert-a"), c.CertificateByID("cert-b")
	if a == nil || a != b {
		t.Fatalf("cert-a %p and cert-b %p: want one key pair for one PEM", a, b)
	}

	next := validTable(t)
	next.Revision = 8
	other := pairFor(t, "plain.example.test")
	next.Certificates = append(next.Certificates, Certificate{ID: "cert-c", CertificatePEM: other.cert, PrivateKeyPEM: other.key})
	next.Routes[2].TLS = &RouteTLS{CertificateID: "cert-c"}
	if err := s.Apply(next); err != nil {
		t.Fatal(err)
	}
	c = s.Load()
	if got := c.CertificateByID("cert-a"); got != a {
		t.Errorf("the next table parsed cert-a again (%p, served %p)", got, a)
	}
	if got := c.CertificateByID("cert-c"); got == nil || got == a {
		t.Errorf("cert-c = %p: a new PEM must be parsed", got)
	}

	// A repeated PEM whose key does not match is refused at each id's path, parsed or
	// not.
	bad := validTable(t)
	bad.Revision = 9
	bad.Certificates[0].PrivateKeyPEM = other.key
	bad.Certificates = append(bad.Certificates, Certificate{ID: "cert-b", CertificatePEM: p.cert, PrivateKeyPEM: other.key})
	bad.Routes[1].TLS = &RouteTLS{CertificateID: "cert-b"}
	err := s.Apply(bad)
	wantViolation(t, err, "certificates[0].privateKeyPem does not match the leaf certificate's public key")
	wantViolation(t, err, "certificates[1].privateKeyPem does not match the leaf certificate's public key")
}

// TestCoversAgreesWithVerifyHostname: the fast hostname check answers as
// x509.Certificate.VerifyHostname does.
func TestCoversAgreesWithVerifyHostname(t *testing.T) {
	leaves := map[string]*x509.Certificate{}
	for _, sans := range [][]string{
		{"*.example.test", "example.test"},
		{"API.Example.test"},
		{"*.test"},
		{"a.example.test."},
		{"127.0.0.1"},
		{"*.*.example.test", "x*.example.test"},
	} {
		c, _, err := testcert.Generate(sans...)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode([]byte(c))
		leaf, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		leaves[fmt.Sprint(sans)] = leaf
	}
	hosts := []string{"example.test", "www.example.test", "a.b.example.test", "*.example.test", "api.example.test",
		"a.example.test", "test", "x.test", "127.0.0.1", "x.example.test", "xa.example.test", "*.test", "a.test"}
	for name, leaf := range leaves {
		for _, h := range hosts {
			if got, want := covers(leaf, h), leaf.VerifyHostname(h) == nil; got != want {
				t.Errorf("leaf %s, host %q: covers %v, VerifyHostname %v", name, h, got, want)
			}
		}
	}
}

// TestStreamPathsOnlyForViolations: a large valid table decodes without writing a JSON
// path, and the paths of violations deep in it are those of the Value readers.
func TestStreamPathsOnlyForViolations(t *testing.T) {
	var p jsonx.Path
	r := p.Key("routes")
	i := r.Index(12)
	tg := i.Key("targets")
	j := tg.Index(0)
	port := j.Key("port")
	if got := port.String(); got != "routes[12].targets[0].port" {
		t.Fatalf("path %q", got)
	}
	tb := benchTable(t, 2000, 10, nil)
	data, err := tb.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(3, func() {
		if _, err := Decode(data, ModeRelay); err != nil {
			t.Fatal(err)
		}
	})
	// Per route: its hostname, its two targets' lease ids and their address (interned:
	// both targets of a route here share one), about 4; the rest (slices, the intern
	// table) is shared or amortised. Writing the paths would add at least 3 more.
	if perRoute := allocs / 2000; perRoute > 6 {
		t.Errorf("%.2f allocations per route, want at most 6", perRoute)
	}
}

// TestPrepareFileAppliesOnce: a FileSource given a PreparedFile applies it without reading
// the file again, and a later Load of the unchanged file changes nothing.
func TestPrepareFileAppliesOnce(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "routes.json")
	data, err := validTable(t).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	prep, err := PrepareFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The file is gone: the first load can only apply what was prepared.
	if err := os.Rename(file, file+".moved"); err != nil {
		t.Fatal(err)
	}
	s := NewStore(StoreOptions{Mode: ModeStandalone})
	f := NewFileSource(file, s, FileSourceOptions{Prepared: prep, Debounce: time.Millisecond})
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	if rev, ok := s.Applied(); !ok || rev != 7 {
		t.Fatalf("applied %d %v", rev, ok)
	}
	if err := os.Rename(file+".moved", file); err != nil {
		t.Fatal(err)
	}
	first := s.Load()
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	if s.Load() != first {
		t.Error("the unchanged file was applied again")
	}
}

// TestDecodeRepeatedNamesAnywhere: the decoder does not have jsontext track names, yet
// a name repeated anywhere refuses the text with that name's path alone: in a member
// read past (an extra key, a value of the wrong type), in a certificate, as an extra key.
func TestDecodeRepeatedNamesAnywhere(t *testing.T) {
	route := `{"hostname":"a.test","targets":[{"leaseId":"l","address":"127.0.0.1","port":80}],"tls":null}`
	for doc, want := range map[string]string{
		`{"revision":1,"routes":[],"certificates":[],"x":{"a":1,"a":2}}`:                        "x.a is repeated",
		`{"revision":1,"routes":[` + route + `],"certificates":[{"id":"c","id":"d"}]}`:          "certificates[0].id is repeated",
		`{"revision":{"n":1,"n":2},"routes":[],"certificates":[]}`:                              "revision.n is repeated",
		`{"revision":1,"routes":[],"certificates":[],"x":1,"x":2}`:                              "x is repeated",
		`{"revision":1,"routes":[{"hostname":"a.test","hostname":"b.test"}],"certificates":[]}`: "routes[0].hostname is repeated",
	} {
		_, err := Decode([]byte(doc), ModeRelay)
		var re *Error
		if !errors.As(err, &re) || len(re.Violations) != 1 || re.Violations[0] != want {
			t.Errorf("Decode(%s) = %v, want only %q", doc, err, want)
		}
	}
}

// TestStatesSharedByTarget: a target named by two routes of one table has one state; the
// same lease at another port, or another lease at the same address and port, has its
// own; the next table keeps the states of the targets it still names, whatever route
// names them now, across thousands of targets (the hashes are sorted, not looked up).
func TestStatesSharedByTarget(t *testing.T) {
	tb := benchTable(t, 3000, 10, nil)
	shared := Target{LeaseID: "lease-shared", Address: "10.9.9.9", Port: 80}
	tb.Routes[5].Targets = []Target{shared}
	tb.Routes[2500].Targets = []Target{shared, {LeaseID: "lease-shared", Address: "10.9.9.9", Port: 81}}
	tb.Routes[7].Targets = []Target{{LeaseID: "lease-other", Address: "10.9.9.9", Port: 80}}
	s := NewStore(StoreOptions{})
	if err := s.Apply(tb); err != nil {
		t.Fatal(err)
	}
	c := s.Load()
	st := func(c *Compiled, route, target int) *TargetState {
		host := tb.Routes[route].Hostname
		if parent, ok := strings.CutPrefix(host, "*."); ok {
			host = "www." + parent // served by the wildcard route
		}
		return c.Lookup(host).Backends[target].State
	}
	if st(c, 5, 0) != st(c, 2500, 0) || st(c, 2500, 0) == st(c, 2500, 1) || st(c, 5, 0) == st(c, 7, 0) {
		t.Fatal("states are not shared by target exactly")
	}
	seen := map[*TargetState]bool{}
	for i := range tb.Routes {
		for j := range tb.Routes[i].Targets {
			if i == 2500 && j == 0 {
				continue
			}
			if x := st(c, i, j); x == nil || seen[x] {
				t.Fatalf("route %d target %d: state %p nil or shared", i, j, x)
			} else {
				seen[x] = true
			}
		}
	}

	next := benchTable(t, 3000, 10, nil)
	next.Revision = 2
	next.Routes[9].Targets = []Target{shared} // moved to another route
	if err := s.Apply(next); err != nil {
		t.Fatal(err)
	}
	c2 := s.Load()
	if st(c2, 9, 0) != st(c, 5, 0) || st(c2, 100, 1) != st(c, 100, 1) {
		t.Error("the next table did not keep the states of the targets it still names")
	}
	if st(c2, 5, 0) == st(c, 5, 0) {
		t.Error("a route's new target got the state of the target it replaced")
	}
}
