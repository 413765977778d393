package routetable

import (
	"bytes"
	"encoding/json"
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

// Decode reads one IClusterIngressRouteTable under the exact-schema rule: every missing
// key, extra key and wrongly typed value is reported with its JSON path. It judges the
// shape only; [Validate] (which Store.Apply runs) judges the rules of contract §6. The
// error is an *Error with CodeInvalid whose Revision is the table's when that much
// decoded, else -1. data is not retained.
func Decode(data []byte, mode Mode) (*Table, error) {
	if !json.Valid(data) {
		return nil, newInvalid(-1, []string{"the route table is not valid JSON"})
	}
	var e jsonx.Errors
	t, rev := decodeTable(data, "", mode, &e)
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

// violationPath is the JSON path a violation starts with.
func violationPath(v string) string {
	if i := strings.IndexByte(v, ' '); i > 0 {
		return v[:i]
	}
	return v
}

// DecodeRaw is Decode for a table embedded in a larger body (the relay's
// `{ "table": ... }` answer), reporting violations below path into e. It returns nil
// when it added any violation; a JSON null is a violation too (the caller handles the
// nullable `table` itself). raw is not retained.
func DecodeRaw(raw json.RawMessage, path string, mode Mode, e *jsonx.Errors) *Table {
	before := e.Len()
	if !json.Valid(raw) {
		e.Addf("", "%s must be an object", pathName(path))
		return nil
	}
	t, _ := decodeTable(raw, path, mode, e)
	if e.Len() > before {
		return nil
	}
	return t
}

// decodeTable reads valid JSON text. It also returns the revision when it decoded (-1
// otherwise), so that a refusal can name the revision it refuses.
func decodeTable(raw []byte, path string, mode Mode, e *jsonx.Errors) (*Table, int64) {
	// One copy of the text: every plain string of the table is a substring of it.
	doc := string(bytes.TrimSpace(raw))
	m := object(doc, path, e, tableKeys)
	if m == nil {
		return nil, -1
	}
	t := &Table{}
	rev := int64(-1)
	if v, ok := get(m, "revision"); ok {
		if n, ok := counter(v, path, "revision", e); ok {
			t.Revision, rev = n, n
		}
	}
	if v, ok := get(m, "routes"); ok {
		p := jsonx.Join(path, "routes")
		if a, ok := array(v, p, e); ok {
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
	if v, ok := get(m, "certificates"); ok {
		p := jsonx.Join(path, "certificates")
		if a, ok := array(v, p, e); ok {
			t.Certificates = make([]Certificate, len(a))
			for i, c := range a {
				decodeCertificate(c, jsonx.Index(p, i), e, &t.Certificates[i])
			}
		}
	}
	return t, rev
}

// countHint guesses how many targets a route span holds (a count of "leaseId"), to size
// the shared target pool; a wrong guess only costs a reallocation.
func countHint(r string) int {
	n := 0
	for i := 0; i+9 <= len(r); i++ {
		if r[i] == '"' && r[i+1] == 'l' && r[i:i+9] == `"leaseId"` {
			n++
			i += 8
		}
	}
	return n
}

func decodeRoute(raw, path string, mode Mode, e *jsonx.Errors, r *Route, pool []Target) []Target {
	m := object(raw, path, e, routeKeys)
	if m == nil {
		return pool
	}
	if v, ok := get(m, "hostname"); ok {
		r.Hostname = str(v, path, "hostname", e)
	}
	if v, ok := get(m, "targets"); ok {
		p := jsonx.Join(path, "targets")
		if a, ok := array(v, p, e); ok {
			start := len(pool)
			for j, tg := range a {
				pool = append(pool, Target{})
				decodeTarget(tg, jsonx.Index(p, j), e, &pool[len(pool)-1])
			}
			r.Targets = pool[start:len(pool):len(pool)]
		}
	}
	if v, ok := get(m, "tls"); ok && v != "null" {
		r.TLS = decodeRouteTLS(v, jsonx.Join(path, "tls"), mode, e)
	}
	return pool
}

func decodeTarget(raw, path string, e *jsonx.Errors, t *Target) {
	m := object(raw, path, e, targetKeys)
	if m == nil {
		return
	}
	if v, ok := get(m, "leaseId"); ok {
		t.LeaseID = str(v, path, "leaseId", e)
	}
	if v, ok := get(m, "address"); ok {
		t.Address = str(v, path, "address", e)
	}
	if v, ok := get(m, "port"); ok {
		t.Port = int(integer(v, path, "port", e, 1, 65535))
	}
}

func decodeRouteTLS(raw, path string, mode Mode, e *jsonx.Errors) *RouteTLS {
	keys := tlsKeys
	if mode == ModeStandalone && len(raw) > 0 && raw[0] == '{' {
		if _, acme := get(members(raw), "acme"); acme {
			keys = tlsACMEKeys
		}
	}
	m := object(raw, path, e, keys)
	if m == nil {
		return nil
	}
	t := &RouteTLS{}
	if &keys[0] == &tlsKeys[0] {
		if v, ok := get(m, "certificateId"); ok {
			t.CertificateID = str(v, path, "certificateId", e)
		}
	} else if v, ok := get(m, "acme"); ok {
		before := e.Len()
		t.ACME = boolean(v, path, "acme", e)
		if !t.ACME && e.Len() == before {
			e.Addf(jsonx.Join(path, "acme"), "must be true")
		}
	}
	if v, ok := get(m, "redirectHttp"); ok {
		t.RedirectHTTP = boolean(v, path, "redirectHttp", e)
	}
	return t
}

func decodeCertificate(raw, path string, e *jsonx.Errors, c *Certificate) {
	m := object(raw, path, e, certificateKeys)
	if m == nil {
		return
	}
	if v, ok := get(m, "id"); ok {
		c.ID = str(v, path, "id", e)
	}
	if v, ok := get(m, "certificatePem"); ok {
		c.CertificatePEM = str(v, path, "certificatePem", e)
	}
	if v, ok := get(m, "privateKeyPem"); ok {
		c.PrivateKeyPEM = str(v, path, "privateKeyPem", e)
	}
}
