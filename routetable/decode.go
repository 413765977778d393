package routetable

import (
	"strings"
	"time"

	"github.com/serve-zone/ingress/internal/jsonx"
)

// Mode selects which route TLS shapes a table may use.
type Mode uint8

const (
	// ModeRelay (the zero value) accepts the relay's tables: tls is
	// {certificateId, redirectHttp} or null.
	ModeRelay Mode = iota
	// ModeStandalone also accepts {acme: true, redirectHttp} (contract §7).
	ModeStandalone
)

func (m Mode) String() string {
	if m == ModeStandalone {
		return "standalone"
	}
	return "relay"
}

var (
	tableKeys       = []string{"revision", "routes", "certificates"}
	routeKeys       = []string{"hostname", "targets", "tls"}
	targetKeys      = []string{"leaseId", "address", "port"}
	tlsKeys         = []string{"certificateId", "redirectHttp"}
	tlsACMEKeys     = []string{"acme", "redirectHttp"}
	certificateKeys = []string{"id", "certificatePem", "privateKeyPem"}
)

// Decode reads one IClusterIngressRouteTable under the exact-schema rule (internal/jsonx):
// every missing key, extra key and wrongly typed value is reported with its JSON path; a
// key repeated in any object refuses the text with that key's path alone. It judges the
// shape only; [Validate] (which Store.Apply runs) judges the rules of contract §6. The
// error is an *Error with CodeInvalid whose Revision is the table's when that much
// decoded, else -1; text that is not JSON is one violation naming the line and column
// where it stops being JSON. data is not retained. A standalone file that names
// certificate files is read with [DecodeFile].
func Decode(data []byte, mode Mode) (*Table, error) { return decode(data, mode, nil) }

// decode is Decode; with fr, certificates may name PEM files, which fr reads.
func decode(data []byte, mode Mode, fr *fileReader) (*Table, error) {
	doc, err := jsonx.Parse(data)
	if err != nil {
		var e jsonx.Errors
		e.AddSyntax(err, "", "the route table")
		return nil, newInvalid(-1, e.List())
	}
	var e jsonx.Errors
	t, rev := decodeTable(doc, "", mode, fr, &e)
	if e.Len() > 0 {
		return nil, newInvalid(rev, withRuleViolations(t, mode, e.List()))
	}
	return t, nil
}

// withRuleViolations adds to the shape violations of a table that failed to decode the
// rule violations of what did decode, so that a broken port does not hide a bad
// hostname elsewhere. A rule violation at or below a path that already has a shape
// violation is left out: it would only restate it.
func withRuleViolations(t *Table, mode Mode, shape []string) []string {
	if t == nil {
		return shape
	}
	out := shape
	for _, v := range validate(t, mode, time.Now()).violations {
		p := violationPath(v)
		covered := false
		for _, sv := range shape {
			sp := violationPath(sv)
			if p == sp || strings.HasPrefix(p, sp+".") || strings.HasPrefix(p, sp+"[") {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, v)
		}
	}
	return out
}

// violationPath is the JSON path a violation starts with. A certificate's file member
// and its PEM member name the same thing (a file that could not be read leaves its PEM
// empty), so they share one path here.
func violationPath(v string) string {
	if i := strings.IndexByte(v, ' '); i > 0 {
		v = v[:i]
	}
	return fileMemberAsPEM.Replace(v)
}

var fileMemberAsPEM = strings.NewReplacer(".certificateFile", ".certificatePem", ".privateKeyFile", ".privateKeyPem")

// decodeTable reads a checked table. It also returns the revision when it decoded (-1
// otherwise), so that a refusal can name the revision it refuses. Every plain string of
// the table is a substring of doc, Parse's one copy of the text.
func decodeTable(doc jsonx.Value, path string, mode Mode, fr *fileReader, e *jsonx.Errors) (*Table, int64) {
	m := jsonx.Object(doc, path, e, tableKeys, nil)
	if m == nil {
		return nil, -1
	}
	t := &Table{}
	rev := int64(-1)
	if v, ok := m.Lookup("revision"); ok {
		if n, ok := counter(v, path, "revision", e); ok {
			t.Revision, rev = n, n
		}
	}
	if v, ok := m.Lookup("routes"); ok {
		p := jsonx.Join(path, "routes")
		if a, ok := jsonx.Array(v, p, e); ok {
			t.Routes = make([]Route, len(a))
			targets := 0
			for _, r := range a {
				targets += countHint(r)
			}
			pool := make([]Target, 0, targets) // one allocation for every route's targets
			for i, r := range a {
				pool = decodeRoute(r, jsonx.Index(p, i), mode, e, &t.Routes[i], pool)
			}
		}
	}
	if v, ok := m.Lookup("certificates"); ok {
		p := jsonx.Join(path, "certificates")
		if a, ok := jsonx.Array(v, p, e); ok {
			t.Certificates = make([]Certificate, len(a))
			for i, c := range a {
				decodeCertificate(c, jsonx.Index(p, i), fr, e, &t.Certificates[i])
			}
		}
	}
	return t, rev
}

// countHint guesses how many targets a route span holds (a count of "leaseId"), to size
// the shared target pool; a wrong guess only costs a reallocation.
func countHint(r jsonx.Value) int {
	n := 0
	for i := 0; i+9 <= len(r); i++ {
		if r[i] == '"' && r[i+1] == 'l' && r[i:i+9] == `"leaseId"` {
			n++
			i += 8
		}
	}
	return n
}

func decodeRoute(raw jsonx.Value, path string, mode Mode, e *jsonx.Errors, r *Route, pool []Target) []Target {
	m := jsonx.Object(raw, path, e, routeKeys, nil)
	if m == nil {
		return pool
	}
	if v, ok := m.Lookup("hostname"); ok {
		r.Hostname = str(v, path, "hostname", e)
	}
	if v, ok := m.Lookup("targets"); ok {
		p := jsonx.Join(path, "targets")
		if a, ok := jsonx.Array(v, p, e); ok {
			start := len(pool)
			for j, tg := range a {
				pool = append(pool, Target{})
				decodeTarget(tg, jsonx.Index(p, j), e, &pool[len(pool)-1])
			}
			r.Targets = pool[start:len(pool):len(pool)]
		}
	}
	if v, ok := m.Lookup("tls"); ok && v != "null" {
		r.TLS = decodeRouteTLS(v, jsonx.Join(path, "tls"), mode, e)
	}
	return pool
}

func decodeTarget(raw jsonx.Value, path string, e *jsonx.Errors, t *Target) {
	m := jsonx.Object(raw, path, e, targetKeys, nil)
	if m == nil {
		return
	}
	if v, ok := m.Lookup("leaseId"); ok {
		t.LeaseID = str(v, path, "leaseId", e)
	}
	if v, ok := m.Lookup("address"); ok {
		t.Address = str(v, path, "address", e)
	}
	if v, ok := m.Lookup("port"); ok {
		t.Port = int(integer(v, path, "port", e, 1, 65535))
	}
}

func decodeRouteTLS(raw jsonx.Value, path string, mode Mode, e *jsonx.Errors) *RouteTLS {
	keys := tlsKeys
	if mode == ModeStandalone && hasMember(raw, "acme") {
		keys = tlsACMEKeys
	}
	m := jsonx.Object(raw, path, e, keys, nil)
	if m == nil {
		return nil
	}
	t := &RouteTLS{}
	if &keys[0] == &tlsKeys[0] {
		if v, ok := m.Lookup("certificateId"); ok {
			t.CertificateID = str(v, path, "certificateId", e)
		}
	} else if v, ok := m.Lookup("acme"); ok {
		before := e.Len()
		t.ACME = boolean(v, path, "acme", e)
		if !t.ACME && e.Len() == before {
			e.Addf(jsonx.Join(path, "acme"), "must be true")
		}
	}
	if v, ok := m.Lookup("redirectHttp"); ok {
		t.RedirectHTTP = boolean(v, path, "redirectHttp", e)
	}
	return t
}

// certificateSources are the two ways a standalone file gives each half of a key pair.
var certificateSources = [2][2]string{{"certificatePem", "certificateFile"}, {"privateKeyPem", "privateKeyFile"}}

// decodeCertificate reads one certificate. With fr (a standalone file), each of the
// certificate and the key may be given as a file name instead (certificateFile,
// privateKeyFile), which fr reads; giving both forms of one is a violation.
func decodeCertificate(raw jsonx.Value, path string, fr *fileReader, e *jsonx.Errors, c *Certificate) {
	keys := certificateKeys
	fromFile := [2]bool{}
	if fs, ok := raw.Fields(); fr != nil && ok {
		keys = []string{"id"}
		for i, src := range certificateSources {
			hasPEM, hasFile := fs.Has(src[0]), fs.Has(src[1])
			switch {
			case hasPEM && hasFile:
				e.Addf(path, "must give %s or %s, not both", src[0], src[1])
				keys = append(keys, src[0], src[1])
			case hasFile:
				keys = append(keys, src[1])
				fromFile[i] = true
			default:
				keys = append(keys, src[0])
			}
		}
	}
	m := jsonx.Object(raw, path, e, keys, nil)
	if m == nil {
		return
	}
	if v, ok := m.Lookup("id"); ok {
		c.ID = str(v, path, "id", e)
	}
	if fromFile[0] {
		c.CertificateFile, c.CertificatePEM = readFileField(m, "certificateFile", path, fr, e)
	} else if v, ok := m.Lookup("certificatePem"); ok {
		c.CertificatePEM = str(v, path, "certificatePem", e)
	}
	if fromFile[1] {
		c.PrivateKeyFile, c.PrivateKeyPEM = readFileField(m, "privateKeyFile", path, fr, e)
	} else if v, ok := m.Lookup("privateKeyPem"); ok {
		c.PrivateKeyPEM = str(v, path, "privateKeyPem", e)
	}
}

// readFileField reads the file that the string member key of m names; it returns the
// resolved name and the content.
func readFileField(m jsonx.Members, key, path string, fr *fileReader, e *jsonx.Errors) (file, content string) {
	v, ok := m.Lookup(key)
	if !ok {
		return "", ""
	}
	before := e.Len()
	name := str(v, path, key, e)
	if e.Len() > before {
		return "", ""
	}
	return fr.read(name, jsonx.Join(path, key), e)
}

// hasMember reports whether v is an object with a member key.
func hasMember(v jsonx.Value, key string) bool {
	fs, _ := v.Fields()
	return fs.Has(key)
}
