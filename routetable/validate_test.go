package routetable

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/testcert"
)

// wantViolation asserts that err is an invalid-table error naming want (a substring
// starting with the path).
func wantViolation(t *testing.T, err error, want string) {
	t.Helper()
	var re *Error
	if !errors.As(err, &re) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("want an invalid-table error naming %q, got %v", want, err)
	}
	for _, v := range re.Violations {
		if strings.HasPrefix(v, want) || strings.Contains(v, want) {
			return
		}
	}
	t.Fatalf("no violation names %q:\n%s", want, strings.Join(re.Violations, "\n"))
}

func TestValidateEachRule(t *testing.T) {
	other := pairFor(t, "other.test")
	narrow := pairFor(t, "example.test")
	expiredCert, expiredKey, err := testcert.New(testcert.Options{Hosts: []string{"*.example.test", "example.test"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	route := func(h string) Route {
		return Route{Hostname: h, Targets: []Target{{LeaseID: "l", Address: "127.0.0.1", Port: 1}}}
	}
	cases := []struct {
		name string
		mode Mode
		edit func(tb *Table)
		want string // "" means valid
	}{
		{"valid", ModeRelay, func(tb *Table) {}, ""},
		{"revision negative", ModeRelay, func(tb *Table) { tb.Revision = -1 }, "revision must be a non-negative safe integer"},
		{"revision unsafe", ModeRelay, func(tb *Table) { tb.Revision = 1 << 53 }, "revision must be a non-negative safe integer"},
		{"too many routes", ModeRelay, func(tb *Table) {
			rs := make([]Route, MaxRoutes+1)
			for i := range rs {
				rs[i] = route(fmt.Sprintf("h%06d.test", i))
			}
			tb.Routes = append(tb.Routes, rs...)
		}, "routes must hold at most 100000 routes (it holds 100004)"},
		{"routes unordered", ModeRelay, func(tb *Table) { tb.Routes[1], tb.Routes[2] = tb.Routes[2], tb.Routes[1] },
			"routes[2].hostname must sort strictly after routes[1].hostname"},
		{"routes duplicate", ModeRelay, func(tb *Table) { tb.Routes[2].Hostname = "api.example.test"; tb.Routes[2].TLS = nil },
			"routes[2].hostname must sort strictly after routes[1].hostname"},
		{"hostname uppercase", ModeRelay, func(tb *Table) { tb.Routes[2].Hostname = "plain.Example.test" }, `routes[2].hostname "plain.Example.test" must be a lowercase`},
		{"hostname trailing dot", ModeRelay, func(tb *Table) { tb.Routes[2].Hostname = "plain.example.test." }, `routes[2].hostname "plain.example.test." must be`},
		{"hostname empty", ModeRelay, func(tb *Table) { tb.Routes[0].Hostname = "" }, `routes[0].hostname "" must be`},
		{"hostname empty label", ModeRelay, func(tb *Table) { tb.Routes[2].Hostname = "plain..example.test" }, `routes[2].hostname "plain..example.test" must be`},
		{"hostname label starts with dash", ModeRelay, func(tb *Table) { tb.Routes[2].Hostname = "plain.-example.test" }, `routes[2].hostname "plain.-example.test" must be`},
		{"hostname label ends with dash", ModeRelay, func(tb *Table) { tb.Routes[2].Hostname = "plain-.example.test" }, `routes[2].hostname "plain-.example.test" must be`},
		{"hostname underscore", ModeRelay, func(tb *Table) { tb.Routes[2].Hostname = "plain_x.example.test" }, `routes[2].hostname "plain_x.example.test" must be`},
		{"hostname unicode", ModeRelay, func(tb *Table) { tb.Routes[2].Hostname = "pläin.example.test" }, `routes[2].hostname "pläin.example.test" must be`},
		{"hostname label 64", ModeRelay, func(tb *Table) { tb.Routes[2].Hostname = "p" + strings.Repeat("a", 63) + ".example.test" }, `routes[2].hostname "paaaa`},
		{"hostname 254", ModeRelay, func(tb *Table) { tb.Routes[2].Hostname = "plain." + longName(248) }, `routes[2].hostname (254 bytes, not quoted) must be a lowercase`},
		{"wildcard 254", ModeRelay, func(tb *Table) { tb.Routes[2].Hostname = "x"; tb.Routes = append(tb.Routes, route("*."+longName(252))) },
			`routes[3].hostname (254 bytes, not quoted) must be`},
		{"hostname a key's base64 line", ModeRelay, func(tb *Table) {
			tb.Routes[2].Hostname = "MHcCAQEEIBkg4LVWM9nVIqp4K1hJ9vNZq0Yq+ZxJ3KZ9lY4kq0aoAoGCCqGSM49"
		},
			`routes[2].hostname (63 bytes, not quoted) must be`},
		{"wildcard inside", ModeRelay, func(tb *Table) { tb.Routes[2].Hostname = "plain.*.example.test" }, `routes[2].hostname "plain.*.example.test" must be`},
		{"wildcard bare", ModeRelay, func(tb *Table) { tb.Routes[0].Hostname = "*." }, `routes[0].hostname "*." must be`},
		{"wildcard partial", ModeRelay, func(tb *Table) { tb.Routes[0].Hostname = "*a.example.test" }, `routes[0].hostname "*a.example.test" must be`},
		{"no targets", ModeRelay, func(tb *Table) { tb.Routes[2].Targets = nil }, "routes[2].targets must hold 1 to 64 targets (it holds 0)"},
		{"65 targets", ModeRelay, func(tb *Table) {
			ts := make([]Target, 65)
			for i := range ts {
				ts[i] = Target{LeaseID: "l", Address: "127.0.0.1", Port: i + 1}
			}
			tb.Routes[2].Targets = ts
		}, "routes[2].targets must hold 1 to 64 targets (it holds 65)"},
		{"targets unordered by address string", ModeRelay, func(tb *Table) {
			tb.Routes[2].Targets = []Target{{"a", "127.0.0.2", 1}, {"b", "127.0.0.10", 1}}
		}, "routes[2].targets[1] must sort strictly after routes[2].targets[0]"},
		{"targets unordered by port number", ModeRelay, func(tb *Table) {
			tb.Routes[2].Targets = []Target{{"a", "127.0.0.2", 10}, {"b", "127.0.0.2", 9}}
		}, "routes[2].targets[1] must sort strictly after"},
		{"targets duplicate", ModeRelay, func(tb *Table) {
			tb.Routes[2].Targets = []Target{{"a", "127.0.0.2", 10}, {"b", "127.0.0.2", 10}}
		}, "routes[2].targets[1] must sort strictly after"},
		{"leaseId empty", ModeRelay, func(tb *Table) { tb.Routes[1].Targets[0].LeaseID = "" }, "routes[1].targets[0].leaseId must be an Id"},
		{"leaseId leading dash", ModeRelay, func(tb *Table) { tb.Routes[1].Targets[0].LeaseID = "-x" }, "routes[1].targets[0].leaseId must be an Id"},
		{"leaseId space", ModeRelay, func(tb *Table) { tb.Routes[1].Targets[0].LeaseID = "a b" }, "routes[1].targets[0].leaseId must be an Id"},
		{"leaseId 129", ModeRelay, func(tb *Table) { tb.Routes[1].Targets[0].LeaseID = strings.Repeat("a", 129) }, "routes[1].targets[0].leaseId must be an Id"},
		{"port zero", ModeRelay, func(tb *Table) { tb.Routes[2].Targets[0].Port = 0 }, "routes[2].targets[0].port must be an integer from 1 to 65535"},
		{"port 65536", ModeRelay, func(tb *Table) { tb.Routes[2].Targets[0].Port = 65536 }, "routes[2].targets[0].port must be an integer from 1 to 65535"},
		{"unknown certificate", ModeRelay, func(tb *Table) { tb.Routes[1].TLS = &RouteTLS{CertificateID: "nope"} },
			`routes[1].tls.certificateId names "nope", which is not in certificates`},
		{"certificateId not an Id", ModeRelay, func(tb *Table) { tb.Routes[1].TLS = &RouteTLS{CertificateID: ""} },
			"routes[1].tls.certificateId must be an Id"},
		{"acme in relay mode", ModeRelay, func(tb *Table) { tb.Routes[2].TLS = &RouteTLS{ACME: true} },
			"routes[2].tls.acme is only allowed in standalone mode"},
		{"acme and certificateId", ModeStandalone, func(tb *Table) { tb.Routes[2].TLS = &RouteTLS{ACME: true, CertificateID: "cert-a"} },
			"routes[2].tls must name either certificateId or acme, not both"},
		{"acme standalone", ModeStandalone, func(tb *Table) { tb.Routes[2].TLS = &RouteTLS{ACME: true} }, ""},
		{"too many certificates", ModeRelay, func(tb *Table) {
			for i := range MaxCertificates {
				tb.Certificates = append(tb.Certificates, Certificate{ID: fmt.Sprintf("z%05d", i)})
			}
		}, "certificates must hold at most 10000 certificates (it holds 10001)"},
		{"certificates unordered", ModeRelay, func(tb *Table) {
			tb.Certificates = append([]Certificate{{ID: "cert-b", CertificatePEM: other.cert, PrivateKeyPEM: other.key}}, tb.Certificates...)
			tb.Routes = append(tb.Routes, Route{Hostname: "other.test", Targets: tb.Routes[2].Targets, TLS: &RouteTLS{CertificateID: "cert-b"}})
		}, "certificates[1].id must sort strictly after certificates[0].id"},
		{"certificates duplicate", ModeRelay, func(tb *Table) { tb.Certificates = append(tb.Certificates, tb.Certificates[0]) },
			"certificates[1].id must sort strictly after certificates[0].id"},
		{"certificate id invalid", ModeRelay, func(tb *Table) { tb.Certificates[0].ID = "_a" }, "certificates[0].id must be an Id"},
		{"certificate unreferenced", ModeRelay, func(tb *Table) {
			tb.Certificates = append(tb.Certificates, Certificate{ID: "cert-b", CertificatePEM: other.cert, PrivateKeyPEM: other.key})
		}, "certificates[1] is referenced by no route"},
		{"certificatePem empty", ModeRelay, func(tb *Table) { tb.Certificates[0].CertificatePEM = "" },
			"certificates[0].certificatePem must hold PEM CERTIFICATE blocks"},
		{"certificatePem garbage block", ModeRelay, func(tb *Table) {
			tb.Certificates[0].CertificatePEM = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
		}, "certificates[0].certificatePem block 0 is not a parsable X.509 certificate"},
		{"certificatePem holds a key", ModeRelay, func(tb *Table) { tb.Certificates[0].CertificatePEM += tb.Certificates[0].PrivateKeyPEM },
			"certificates[0].certificatePem block 1 must be a PEM CERTIFICATE block"},
		{"privateKeyPem empty", ModeRelay, func(tb *Table) { tb.Certificates[0].PrivateKeyPEM = "" },
			"certificates[0].privateKeyPem must hold exactly one PEM private key"},
		{"privateKeyPem two keys", ModeRelay, func(tb *Table) { tb.Certificates[0].PrivateKeyPEM += other.key },
			"certificates[0].privateKeyPem must hold exactly one PEM private key"},
		{"privateKeyPem encrypted", ModeRelay, func(tb *Table) {
			tb.Certificates[0].PrivateKeyPEM = strings.ReplaceAll(tb.Certificates[0].PrivateKeyPEM, "PRIVATE KEY", "ENCRYPTED PRIVATE KEY")
		}, "certificates[0].privateKeyPem must hold exactly one PEM private key"},
		{"privateKeyPem corrupt", ModeRelay, func(tb *Table) {
			tb.Certificates[0].PrivateKeyPEM = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
		}, "certificates[0].privateKeyPem is not a parsable PRIVATE KEY"},
		{"privateKeyPem mismatch", ModeRelay, func(tb *Table) { tb.Certificates[0].PrivateKeyPEM = other.key },
			"certificates[0].privateKeyPem does not match the leaf certificate's public key"},
		{"leaf does not cover exact", ModeRelay, func(tb *Table) {
			tb.Certificates[0].CertificatePEM, tb.Certificates[0].PrivateKeyPEM = other.cert, other.key
		}, `routes[1].tls.certificateId names certificates[0], whose leaf does not cover "api.example.test"`},
		{"leaf does not cover wildcard", ModeRelay, func(tb *Table) {
			tb.Certificates[0].CertificatePEM, tb.Certificates[0].PrivateKeyPEM = narrow.cert, narrow.key
		}, `routes[0].tls.certificateId names certificates[0], whose leaf does not cover "*.example.test"`},
		{"wildcard SAN does not cover two labels", ModeRelay, func(tb *Table) {
			tb.Routes[1].Hostname = "a.api.example.test"
		}, `routes[1].tls.certificateId names certificates[0], whose leaf does not cover "a.api.example.test"`},
		{"expired leaf is accepted", ModeRelay, func(tb *Table) {
			tb.Certificates[0].CertificatePEM, tb.Certificates[0].PrivateKeyPEM = expiredCert, expiredKey
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tb := validTable(t)
			tc.edit(tb)
			_, err := Validate(tb, tc.mode)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantViolation(t, err, tc.want)
			var re *Error
			errors.As(err, &re)
			if re.Revision != revisionOf(tb) {
				t.Errorf("error revision %d, want %d", re.Revision, tb.Revision)
			}
		})
	}
}

// longName returns a valid DNS name of exactly n characters (labels of up to 63).
func longName(n int) string {
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		l := min(63, n-b.Len())
		if l <= 0 {
			break
		}
		b.WriteString(strings.Repeat("a", l))
	}
	s := b.String()
	if strings.HasSuffix(s, ".") { // a final label of length 0: lengthen the previous one
		s = s[:len(s)-2] + "ab"
	}
	return s[:n]
}

func TestHostnameLengthLimits(t *testing.T) {
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{longName(253), true},
		{longName(254), false},
		{"*." + longName(251), true},
		{"*." + longName(252), false},
		{"a", true},
		{"1.2.3.4", true}, // all-digit labels are DNS labels
		{"xn--bcher-kva.example", true},
		{"a.b-c.d", true},
	} {
		if got := ValidHostname(tc.host); got != tc.ok {
			t.Errorf("ValidHostname(len %d %.20q…) = %v, want %v", len(tc.host), tc.host, got, tc.ok)
		}
	}
}

func TestTargetAddress(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1", true}, {"192.0.2.7", true}, {"1.0.0.0", true}, {"223.255.255.255", true}, {"10.0.0.0", true},
		{"0.1.2.3", false}, {"224.0.0.1", false}, {"239.255.255.255", false}, {"240.0.0.1", false}, {"255.255.255.255", false},
		{"127.0.0.01", false}, {"127.00.0.1", false}, {"256.1.1.1", false}, {"1.2.3", false}, {"1.2.3.4.5", false},
		{"1.2.3.", false}, {".1.2.3", false}, {"::1", false}, {" 1.2.3.4", false}, {"1.2.3.4 ", false}, {"", false},
		{"1.2.3.1000", false}, {"a.b.c.d", false}, {"localhost", false},
	} {
		if got := ValidTargetAddress(tc.addr); got != tc.ok {
			t.Errorf("ValidTargetAddress(%q) = %v, want %v", tc.addr, got, tc.ok)
		}
	}
}

func TestValidateKeyFormatsAndChains(t *testing.T) {
	hosts := []string{"example.test", "*.example.test"}
	ecParams := "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n"
	for name, o := range map[string]testcert.Options{
		"pkcs8 ecdsa": {Hosts: hosts},
		"sec1":        {Hosts: hosts, Format: testcert.SEC1},
		"pkcs1 rsa":   {Hosts: hosts, RSA: true, Format: testcert.PKCS1},
		"pkcs8 rsa":   {Hosts: hosts, RSA: true},
		"chain":       {Hosts: hosts, Chain: true},
	} {
		t.Run(name, func(t *testing.T) {
			c, k, err := testcert.New(o)
			if err != nil {
				t.Fatal(err)
			}
			if o.Format == testcert.SEC1 {
				k = ecParams + k // as `openssl ecparam -genkey` writes it
			}
			tb := validTable(t)
			tb.Certificates[0].CertificatePEM, tb.Certificates[0].PrivateKeyPEM = c, k
			w, err := Validate(tb, ModeRelay)
			if err != nil || len(w) != 0 {
				t.Fatalf("warnings %q, error %v", w, err)
			}
			s := NewStore(StoreOptions{})
			if err := s.Apply(tb); err != nil {
				t.Fatal(err)
			}
			want := 1
			if o.Chain {
				want = 2
			}
			if got := len(s.Load().GetCertificate("x.example.test").Certificate); got != want {
				t.Fatalf("served chain of %d, want %d", got, want)
			}
		})
	}
}

func TestExpiredLeafIsServedAndReported(t *testing.T) {
	c, k, err := testcert.New(testcert.Options{Hosts: []string{"*.example.test", "example.test"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	tb := validTable(t)
	tb.Certificates[0].CertificatePEM, tb.Certificates[0].PrivateKeyPEM = c, k
	w, err := Validate(tb, ModeRelay)
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != 1 || !strings.HasPrefix(w[0], `certificates[0] (id "cert-a"): the leaf expired at`) {
		t.Fatalf("warnings %q", w)
	}
	s := NewStore(StoreOptions{})
	if err := s.Apply(tb); err != nil {
		t.Fatal(err)
	}
	if c := s.Load(); c.ExpiredCertificates != 1 || len(c.Warnings) != 1 || c.GetCertificate("a.example.test") == nil {
		t.Fatalf("expired %d warnings %q", c.ExpiredCertificates, c.Warnings)
	}
}

func TestValidateReportsEveryViolation(t *testing.T) {
	tb := validTable(t)
	tb.Revision = -3
	tb.Routes[0].Hostname = "*.Example.test"
	tb.Routes[1].Targets[1].Address = "224.0.0.1"
	tb.Routes[1].Targets[0].Port = 0
	tb.Routes[2].Targets = nil
	tb.Routes = append(tb.Routes, Route{Hostname: "a.test", Targets: []Target{{LeaseID: "", Address: "1.2.3.4", Port: 1}},
		TLS: &RouteTLS{CertificateID: "missing"}})
	tb.Certificates[0].PrivateKeyPEM = "junk"
	_, err := Validate(tb, ModeRelay)
	want := []string{
		"revision must be a non-negative safe integer",
		"certificates[0].privateKeyPem must hold exactly one PEM private key",
		`routes[0].hostname "*.Example.test" must be a lowercase`,
		"routes[1].targets[0].port must be an integer from 1 to 65535",
		"routes[1].targets[1].address must be a dotted-quad IPv4 address",
		"routes[2].targets must hold 1 to 64 targets (it holds 0)",
		"routes[3].hostname must sort strictly after routes[2].hostname",
		"routes[3].targets[0].leaseId must be an Id",
		`routes[3].tls.certificateId names "missing", which is not in certificates`,
	}
	var re *Error
	if !errors.As(err, &re) {
		t.Fatalf("%v", err)
	}
	for _, w := range want {
		if !slices.ContainsFunc(re.Violations, func(v string) bool { return strings.HasPrefix(v, w) }) {
			t.Errorf("missing %q", w)
		}
	}
	if len(re.Violations) != len(want) {
		t.Errorf("%d violations, want %d:\n%s", len(re.Violations), len(want), strings.Join(re.Violations, "\n"))
	}
	if re.Revision != -1 {
		t.Errorf("revision %d for an invalid revision, want -1", re.Revision)
	}
	if lines := strings.Split(err.Error(), "\n"); len(lines) != len(want)+1 {
		t.Errorf("error text has %d lines, want a header and one per violation", len(lines))
	}
}

func TestViolationsAreCapped(t *testing.T) {
	tb := &Table{Revision: 1}
	for i := range 3000 {
		tb.Routes = append(tb.Routes, Route{Hostname: fmt.Sprintf("h%05d.test", i)}) // no targets
	}
	_, err := Validate(tb, ModeRelay)
	var re *Error
	errors.As(err, &re)
	if len(re.Violations) != maxReportedViolations+1 || re.Violations[maxReportedViolations] != "… and 2000 more violations" {
		t.Fatalf("%d violations, last %q", len(re.Violations), re.Violations[len(re.Violations)-1])
	}
}

func TestErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		err   error
		match error
	}{
		{&Error{Code: CodeInvalid, Revision: 3, Violations: []string{"x"}}, ErrInvalid},
		{&Error{Code: CodeStale, Revision: 3}, ErrStale},
		{fmt.Errorf("wrapped: %w", &Error{Code: CodeAlreadyRefused}), ErrAlreadyRefused},
	} {
		for _, s := range []error{ErrInvalid, ErrStale, ErrAlreadyRefused} {
			if got := errors.Is(tc.err, s); got != (s == tc.match) {
				t.Errorf("errors.Is(%v, %v) = %v", tc.err, s, got)
			}
		}
	}
}

// TestDecodeReportsRulesBesideShapeViolations: a shape violation (an out-of-range port,
// a wrongly typed key) does not hide the rule violations elsewhere in the table, and a
// rule violation under a path that already has a shape violation is not repeated.
func TestDecodeReportsRulesBesideShapeViolations(t *testing.T) {
	raw := `{"revision":1,"routes":[` +
		`{"hostname":"Bad.Example.test","targets":[{"leaseId":"l1","address":"127.0.0.1","port":80}],"tls":null},` +
		`{"hostname":"b.test","targets":[{"leaseId":"l1","address":"127.0.0.1","port":0}],"tls":{"certificateId":"nope","redirectHttp":"yes"}}` +
		`],"certificates":[]}`
	_, err := Decode([]byte(raw), ModeRelay)
	var re *Error
	if !errors.As(err, &re) {
		t.Fatalf("%v", err)
	}
	want := []string{
		"routes[1].targets[0].port must be an integer from 1 to 65535",
		"routes[1].tls.redirectHttp must be a boolean",
		`routes[0].hostname "Bad.Example.test" must be a lowercase`,
		`routes[1].tls.certificateId names "nope"`,
	}
	for _, w := range want {
		if !slices.ContainsFunc(re.Violations, func(v string) bool { return strings.HasPrefix(v, w) }) {
			t.Errorf("missing %q in\n%s", w, strings.Join(re.Violations, "\n"))
		}
	}
	if len(re.Violations) != len(want) {
		t.Errorf("%d violations, want %d:\n%s", len(re.Violations), len(want), strings.Join(re.Violations, "\n"))
	}
}

// TestACMERouteIsWarnedAbout: an ACME route is valid in standalone mode without a word;
// a wildcard one is valid too, but the operator is told that no certificate can be
// requested for it (only DNS-01 proves a wildcard).
func TestACMERouteIsWarnedAbout(t *testing.T) {
	tb := validTable(t)
	tb.Routes[2].TLS = &RouteTLS{ACME: true}
	warnings, err := Validate(tb, ModeStandalone)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, ".acme") }) {
		t.Errorf("an ACME route was warned about: %q", warnings)
	}
	tb.Routes[0].TLS = &RouteTLS{ACME: true} // *.example.test
	warnings, err = Validate(tb, ModeStandalone)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(warnings, func(w string) bool {
		return strings.HasPrefix(w, "routes[0].tls.acme: a wildcard certificate needs the DNS-01 challenge")
	}) {
		t.Fatalf("no wildcard ACME warning in %q", warnings)
	}
}
