package routetable

import (
	"github.com/serve-zone/ingress/internal/testwait"

	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/testcert"
)

// writeCertFiles writes a certificate covering hosts and its key into dir/name.crt and
// dir/name.key.
func writeCertFiles(t *testing.T, dir, name string, o testcert.Options) (certPEM string) {
	t.Helper()
	c, k, err := testcert.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, name+".crt"), []byte(c))
	writeFile(t, filepath.Join(dir, name+".key"), []byte(k))
	return c
}

// unordered is a valid standalone file with routes, targets and certificates out of
// contract order and its certificate as files below certs/.
const unordered = `{
  "revision": 2,
  "routes": [
    {"hostname": "plain.example.test", "targets": [{"leaseId": "p", "address": "127.0.0.3", "port": 80}], "tls": null},
    {"hostname": "api.example.test", "targets": [
      {"leaseId": "b", "address": "127.0.0.2", "port": 3000},
      {"leaseId": "a", "address": "127.0.0.1", "port": 3001},
      {"leaseId": "a", "address": "127.0.0.1", "port": 3000}
    ], "tls": {"certificateId": "z-inline", "redirectHttp": false}},
    {"hostname": "*.example.test", "targets": [{"leaseId": "w", "address": "127.0.0.1", "port": 8080}],
     "tls": {"certificateId": "a-files", "redirectHttp": true}}
  ],
  "certificates": [
    {"id": "z-inline", "certificatePem": %CERT%, "privateKeyPem": %KEY%},
    {"id": "a-files", "certificateFile": "certs/site.crt", "privateKeyFile": "certs/site.key"}
  ]
}`

func unorderedFile(t *testing.T, dir string) []byte {
	t.Helper()
	writeCertFiles(t, filepath.Join(dir, "certs"), "site", testcert.Options{Hosts: []string{"*.example.test"}})
	p := pairFor(t, "api.example.test")
	q := func(s string) string { return string(tableJSONString(t, s)) }
	doc := strings.NewReplacer("%CERT%", q(p.cert), "%KEY%", q(p.key)).Replace(unordered)
	return []byte(doc)
}

func tableJSONString(t *testing.T, s string) []byte {
	t.Helper()
	b := appendString(nil, s)
	return b
}

// TestStandaloneFileAnyOrderAndCertificateFiles: a person's file in any order, with a
// certificate from files relative to it, is valid, and applied in contract order; the same
// file is refused as a relay table, which keeps contract §6 exactly.
func TestStandaloneFileAnyOrderAndCertificateFiles(t *testing.T) {
	dir := t.TempDir()
	data := unorderedFile(t, dir)

	tb, files, err := DecodeFile(data, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "certs/site.crt"), filepath.Join(dir, "certs/site.key")}
	if !slices.Equal(files, want) {
		t.Fatalf("files %q, want %q", files, want)
	}
	if c := tb.Certificates[1]; c.CertificateFile != want[0] || c.PrivateKeyFile != want[1] ||
		!strings.HasPrefix(c.CertificatePEM, "-----BEGIN CERTIFICATE-----") || !strings.Contains(c.PrivateKeyPEM, "PRIVATE KEY") {
		t.Fatalf("certificate from files not read: %#v", c)
	}
	if _, err := Validate(tb, ModeStandalone); err != nil {
		t.Fatalf("standalone: %v", err)
	}
	if _, err := Validate(tb, ModeRelay); err == nil {
		t.Fatal("an unordered table passed as a relay table")
	}
	s := NewStore(StoreOptions{Mode: ModeStandalone})
	if err := s.ApplyStandalone(tb, true); err != nil {
		t.Fatal(err)
	}
	src := s.Load().Source
	var hosts []string
	for _, r := range src.Routes {
		hosts = append(hosts, r.Hostname)
	}
	if !slices.Equal(hosts, []string{"*.example.test", "api.example.test", "plain.example.test"}) {
		t.Fatalf("routes applied in order %q", hosts)
	}
	api := src.Routes[1].Targets
	if api[0].Port != 3000 || api[1].Port != 3001 || api[2].Address != "127.0.0.2" {
		t.Fatalf("targets applied in order %+v", api)
	}
	if src.Certificates[0].ID != "a-files" {
		t.Fatalf("certificates applied in order %v", src.Certificates)
	}
	// The persisted form is a contract table: it decodes and validates as a relay table.
	out, _ := src.MarshalJSON()
	back, err := Decode(out, ModeRelay)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Validate(back, ModeRelay); err != nil {
		t.Fatalf("the applied standalone table is not a contract table: %v", err)
	}
	if c := s.Load().GetCertificate("x.example.test"); c == nil || c.Leaf.DNSNames[0] != "*.example.test" {
		t.Fatal("the certificate from files is not served")
	}

	// Relay mode decoding knows no file keys.
	if _, err := Decode(data, ModeRelay); err == nil {
		t.Fatal("certificateFile accepted in a relay table")
	} else {
		wantViolation(t, err, "certificates[1].certificateFile is not allowed")
	}
}

// TestStandaloneDuplicatesRefused: in any order, a repeated hostname, target or certificate
// id is still a violation, naming the entry it repeats by its position in the file.
func TestStandaloneDuplicatesRefused(t *testing.T) {
	tb := validTable(t)
	tb.Routes = append(tb.Routes, Route{Hostname: "api.example.test", Targets: []Target{{LeaseID: "x", Address: "127.0.0.9", Port: 9}}})
	tb.Routes[1].Targets = append(tb.Routes[1].Targets, Target{LeaseID: "other", Address: "127.0.0.1", Port: 3000})
	tb.Certificates = append(tb.Certificates, tb.Certificates[0])
	_, err := Validate(tb, ModeStandalone)
	wantViolation(t, err, `routes[3].hostname repeats routes[1].hostname "api.example.test" (one route per hostname)`)
	wantViolation(t, err, "routes[1].targets[2] repeats routes[1].targets[0] (the same address and port)")
	wantViolation(t, err, `certificates[1].id repeats certificates[0].id "cert-a" (each id once)`)
	var re *Error
	errors.As(err, &re)
	for _, v := range re.Violations {
		if strings.Contains(v, "sort strictly") {
			t.Errorf("standalone mode judged order: %s", v)
		}
	}
}

// TestDecodeFileViolations: file names are judged at their JSON paths.
func TestDecodeFileViolations(t *testing.T) {
	dir := t.TempDir()
	writeCertFiles(t, dir, "ok", testcert.Options{Hosts: []string{"a.test"}})
	if err := os.WriteFile(filepath.Join(dir, "big.crt"), make([]byte, maxPEMFile+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "garbage.crt"), []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := pairFor(t, "other.test")
	if err := os.WriteFile(filepath.Join(dir, "other.key"), []byte(other.key), 0o600); err != nil {
		t.Fatal(err)
	}
	route := func(id string) string {
		return `{"hostname":"` + id + `.test","targets":[{"leaseId":"l","address":"127.0.0.1","port":1}],"tls":{"certificateId":"` + id + `","redirectHttp":false}}`
	}
	cert := func(id, body string) string { return `{"id":"` + id + `",` + body + `}` }
	ids := []string{"missing", "dir", "big", "both", "empty", "garbage", "mismatch", "number"}
	var routes []string
	for _, id := range ids {
		routes = append(routes, route(id))
	}
	certs := []string{
		cert("missing", `"certificateFile":"nope.crt","privateKeyFile":"ok.key"`),
		cert("dir", `"certificateFile":".","privateKeyFile":"ok.key"`),
		cert("big", `"certificateFile":"big.crt","privateKeyFile":"ok.key"`),
		cert("both", `"certificateFile":"ok.crt","certificatePem":"x","privateKeyFile":"ok.key"`),
		cert("empty", `"certificateFile":" ","privateKeyFile":"ok.key"`),
		cert("garbage", `"certificateFile":"garbage.crt","privateKeyFile":"ok.key"`),
		cert("mismatch", `"certificateFile":"ok.crt","privateKeyFile":"`+filepath.Join(dir, "other.key")+`"`),
		cert("number", `"certificateFile":5,"privateKeyFile":"ok.key"`),
	}
	doc := `{"revision":1,"routes":[` + strings.Join(routes, ",") + `],"certificates":[` + strings.Join(certs, ",") + `]}`
	_, files, err := DecodeFile([]byte(doc), dir)
	for _, want := range []string{
		"certificates[0].certificateFile cannot be read: open " + filepath.Join(dir, "nope.crt") + ": no such file or directory",
		"certificates[1].certificateFile cannot be read: read " + dir + ": not a regular file",
		"certificates[2].certificateFile cannot be read: read " + filepath.Join(dir, "big.crt") + ": larger than 1 MiB",
		"certificates[3] must give certificatePem or certificateFile, not both",
		"certificates[4].certificateFile must name a file",
		"certificates[5].certificateFile must hold PEM CERTIFICATE blocks",
		"certificates[6].privateKeyFile does not match the leaf certificate's public key",
		"certificates[7].certificateFile must be a string",
	} {
		wantViolation(t, err, want)
	}
	var re *Error
	errors.As(err, &re)
	if len(re.Violations) != 8 {
		t.Errorf("want exactly one violation per certificate, got:\n%s", strings.Join(re.Violations, "\n"))
	}
	if !slices.Contains(files, filepath.Join(dir, "nope.crt")) {
		t.Errorf("a missing file is not among the files to watch: %q", files)
	}
}

// TestExpiryWarnings: a leaf expiring within 14 days is a warning and still served; it is
// not counted as expired (that is a leaf outside its validity window).
func TestExpiryWarnings(t *testing.T) {
	now := time.Now()
	c, k, err := testcert.New(testcert.Options{Hosts: []string{"example.test", "*.example.test"},
		NotBefore: now.Add(-24 * time.Hour), NotAfter: now.Add(5*24*time.Hour + time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	tb := validTable(t)
	tb.Certificates[0].CertificatePEM, tb.Certificates[0].PrivateKeyPEM = c, k
	warnings, err := Validate(tb, ModeStandalone)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], `certificates[0] (id "cert-a"): the leaf expires at `) ||
		!strings.Contains(warnings[0], "in 5 days; renew it") {
		t.Fatalf("warnings %q", warnings)
	}
	s := NewStore(StoreOptions{})
	if err := s.Apply(tb); err != nil {
		t.Fatal(err)
	}
	if got := s.Load().ExpiredCertificates; got != 0 {
		t.Fatalf("a leaf expiring soon counted as expired (%d)", got)
	}
	// 15 days left: nothing to say.
	c, k, _ = testcert.New(testcert.Options{Hosts: []string{"example.test", "*.example.test"}, NotAfter: now.Add(15 * 24 * time.Hour)})
	tb.Certificates[0].CertificatePEM, tb.Certificates[0].PrivateKeyPEM = c, k
	if warnings, _ := Validate(tb, ModeRelay); len(warnings) != 0 {
		t.Fatalf("warnings %q", warnings)
	}
}

// TestRefusalOfUnparsableFileNamesNoRevision: a text that is not JSON is refused with its
// line and column, and its log lines carry no made-up revision.
func TestRefusalOfUnparsableFileNamesNoRevision(t *testing.T) {
	log, logs := observed()
	s := NewStore(StoreOptions{Mode: ModeStandalone, Logger: log})
	path := filepath.Join(t.TempDir(), "routes.json")
	writeFile(t, path, []byte("{\n  \"revision\": 1,\n  \"routes\": [,\n"))
	src := NewFileSource(path, s, FileSourceOptions{})
	err := src.Load()
	wantViolation(t, err, "line 3, column 14: the route table is not valid JSON: invalid character ',' looking for beginning of value")
	entries := logs.FilterMessage("route table violation").All()
	if len(entries) != 1 || !strings.HasPrefix(entries[0].ContextMap()["violation"].(string), "line 3, column 14: ") {
		t.Fatalf("violation lines %v", entries)
	}
	for _, e := range logs.All() {
		if _, ok := e.ContextMap()["revision"]; ok {
			t.Errorf("%q logs a revision for a table that has none: %v", e.Message, e.ContextMap())
		}
	}
}

// TestFileSourceWatchesCertificateFiles: replacing a certificate file (as certbot or a
// Kubernetes secret update does) applies the table again with the new certificate,
// without touching the route file; a certificate file that goes missing keeps the table.
func TestFileSourceWatchesCertificateFiles(t *testing.T) {
	dir := t.TempDir()
	certDir := filepath.Join(t.TempDir(), "elsewhere") // another directory than the route file's
	writeCertFiles(t, certDir, "site", testcert.Options{Hosts: []string{"a.example.test"}})
	path := filepath.Join(dir, "routes.json")
	writeFile(t, path, []byte(`{"revision":1,"routes":[{"hostname":"a.example.test","targets":[{"leaseId":"l","address":"127.0.0.1","port":1}],`+
		`"tls":{"certificateId":"c","redirectHttp":false}}],"certificates":[{"id":"c","certificateFile":"`+
		filepath.Join(certDir, "site.crt")+`","privateKeyFile":"`+filepath.Join(certDir, "site.key")+`"}]}`))
	log, logs := observed()
	s := NewStore(StoreOptions{Mode: ModeStandalone, Logger: log})
	src := NewFileSource(path, s, FileSourceOptions{Logger: log, Debounce: 20 * time.Millisecond})
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	runSource(t, src, logs)
	serial := func() string {
		return s.Load().GetCertificate("a.example.test").Leaf.SerialNumber.String()
	}
	first := serial()

	renewed := writeCertFiles(t, certDir, "site", testcert.Options{Hosts: []string{"a.example.test"}})
	b, _ := pem.Decode([]byte(renewed))
	leaf, _ := x509.ParseCertificate(b.Bytes)
	testwait.Until(t, wait, "the renewed certificate", func() bool { return serial() == leaf.SerialNumber.String() })
	if serial() == first {
		t.Fatal("serial unchanged")
	}

	// The key file goes away: refused, reported at its path; the renewed pair keeps serving.
	serving := s.Load()
	if err := os.Remove(filepath.Join(certDir, "site.key")); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, wait, "the refusal", func() bool {
		for _, e := range logs.FilterMessage("route table violation").All() {
			if strings.HasPrefix(e.ContextMap()["violation"].(string), "certificates[0].privateKeyFile cannot be read") {
				return true
			}
		}
		return false
	})
	if s.Load() != serving {
		t.Fatal("a refused reload replaced the serving table")
	}
}

// TestFileSourceDocument: a Document stands in for the route file (ingress proxy); its
// certificate files are still watched.
func TestFileSourceDocument(t *testing.T) {
	certDir := t.TempDir()
	writeCertFiles(t, certDir, "q", testcert.Options{Hosts: []string{"q.example.test"}})
	doc := []byte(`{"revision":1,"routes":[{"hostname":"q.example.test","targets":[{"leaseId":"l","address":"127.0.0.1","port":1}],` +
		`"tls":{"certificateId":"q","redirectHttp":true}}],"certificates":[{"id":"q","certificateFile":"q.crt","privateKeyFile":"q.key"}]}`)
	s := NewStore(StoreOptions{Mode: ModeStandalone})
	log, logs := observed()
	src := NewFileSource(filepath.Join(certDir, "(command line)"), s, FileSourceOptions{Document: doc, Debounce: 20 * time.Millisecond, Logger: log})
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	runSource(t, src, logs)
	first := s.Load()
	writeCertFiles(t, certDir, "q", testcert.Options{Hosts: []string{"q.example.test"}})
	testwait.Until(t, wait, "the new certificate", func() bool { return s.Load() != first })
}
