package routetable

import (
	"strings"
	"testing"
)

func compiledForTest(t testing.TB) *Compiled {
	s := NewStore(StoreOptions{})
	tb := validTable(t)
	tb.Routes = append(tb.Routes, Route{Hostname: "www.example.test", Targets: tb.Routes[2].Targets})
	if err := s.Apply(tb); err != nil {
		t.Fatal(err)
	}
	return s.Load()
}

func TestLookup(t *testing.T) {
	c := compiledForTest(t)
	for host, want := range map[string]string{
		"api.example.test":                        "api.example.test",
		"API.Example.TEST":                        "api.example.test",
		"api.example.test:8443":                   "api.example.test",
		"api.example.test.":                       "api.example.test",
		"Api.Example.Test.:443":                   "api.example.test",
		"www.example.test":                        "www.example.test", // exact wins over the wildcard
		"x.example.test":                          "*.example.test",
		"X-1.EXAMPLE.test:80":                     "*.example.test",
		"under_score.example.test":                "*.example.test",
		"example.test":                            "", // a wildcard needs one more label
		"a.b.example.test":                        "", // and exactly one
		".example.test":                           "",
		"*.example.test":                          "", // the wildcard is not a name clients can ask for
		"a b.example.test":                        "",
		strings.Repeat("a", 64) + ".example.test": "",
		"":           "",
		"[::1]:443":  "",
		"127.0.0.1":  "",
		"other.test": "",
		strings.Repeat("a.", 130) + "example.test": "",
	} {
		if got := hostOf(c.Lookup(host)); got != want {
			t.Errorf("Lookup(%q) = %q, want %q", host, got, want)
		}
	}
	var nilTable *Compiled
	if nilTable.Lookup("api.example.test") != nil || nilTable.Len() != 0 || nilTable.GetCertificate("x") != nil {
		t.Error("a nil table routes nothing")
	}
	if c.Len() != 4 {
		t.Errorf("Len = %d", c.Len())
	}
	if c.GetCertificate("Www.Example.Test") != nil {
		t.Error("the exact plain route www.example.test has no certificate, even though the wildcard has one")
	}
	if c.GetCertificate("api.example.test") == nil || c.GetCertificate("a.example.test") != c.CertificateByID("cert-a") {
		t.Error("GetCertificate must follow the routes")
	}
}

func TestLookupAllocatesNothing(t *testing.T) {
	c := compiledForTest(t)
	for name, host := range map[string]string{
		"exact":                   "api.example.test",
		"wildcard":                "x.example.test",
		"miss":                    "nothing.test",
		"uppercase port trailing": "API.Example.Test.:8443",
		"wildcard uppercase":      "X.EXAMPLE.TEST:443",
	} {
		t.Run(name, func(t *testing.T) {
			var e *Entry
			if n := testing.AllocsPerRun(1000, func() { e = c.Lookup(host) }); n != 0 {
				t.Fatalf("Lookup(%q) allocates %v times", host, n)
			}
			if (e == nil) != (name == "miss") {
				t.Fatalf("Lookup(%q) = %v", host, e)
			}
			if n := testing.AllocsPerRun(1000, func() { c.GetCertificate(host) }); n != 0 {
				t.Fatalf("GetCertificate(%q) allocates %v times", host, n)
			}
		})
	}
}

func TestNormalizeHost(t *testing.T) {
	for in, want := range map[string]string{
		"Example.TEST:443": "example.test",
		"example.test.":    "example.test",
		"example.test":     "example.test",
	} {
		if got, ok := NormalizeHost(in); !ok || got != want {
			t.Errorf("NormalizeHost(%q) = %q %v", in, got, ok)
		}
	}
	for _, in := range []string{"", ":443", "[::1]", strings.Repeat("a", 254)} {
		if _, ok := NormalizeHost(in); ok {
			t.Errorf("NormalizeHost(%q) accepted", in)
		}
	}
}
