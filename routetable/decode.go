package routetable

import (
	"slices"
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
//
// jsontext's Decoder does all the scanning (jsonx.Stream): the text is read once, value
// by value, into the Table; strings are copied out of it, so the text is not kept alive
// by the table. JSON paths are built only for violations.
func decode(data []byte, mode Mode, fr *fileReader) (*Table, error) {
	var e jsonx.Errors
	s := jsonx.NewStream(data, &e)
	t, rev := decodeTable(s, mode, fr, &e)
	if err := s.Err(); err != nil {
		var se jsonx.Errors
		se.AddSyntax(err, "", "the route table")
		return nil, newInvalid(-1, se.List())
	}
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
	for _, v := range validate(t, mode, time.Now(), nil).violations {
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

// Member names, as jsonx.Stream.Object knows them; the indexes below follow them.
var (
	tableNames = []string{"revision", "routes", "certificates"}
	routeNames = []string{"hostname", "targets", "tls"}
	// tlsNames are the names of both shapes of a route's tls (tlsKeys, tlsACMEKeys).
	tlsNames = []string{"certificateId", "acme", "redirectHttp"}
)

// decodeTable reads the table. It also returns the revision when it decoded (-1
// otherwise), so that a refusal can name the revision it refuses.
func decodeTable(s *jsonx.Stream, mode Mode, fr *fileReader, e *jsonx.Errors) (*Table, int64) {
	var root jsonx.Path
	o, ok := s.Object(&root, tableNames)
	if !ok {
		return nil, -1
	}
	t := &Table{}
	rev := int64(-1)
	d := routeDecoder{s: s, e: e, mode: mode, tls: map[RouteTLS]*RouteTLS{}}
	for {
		i, more := o.Next()
		if !more {
			break
		}
		p := root.Key(tableNames[i])
		switch i {
		case 0:
			if n, ok := s.Counter(&p); ok {
				t.Revision, rev = n, n
			}
		case 1:
			if s.Array(&p) {
				// Sized from the text's length (a route takes over 128 bytes of JSON in
				// practice), so that 100,000 routes are not copied over and over as the
				// slice grows; a guess far too large is trimmed below.
				t.Routes = make([]Route, 0, min(s.Len()/128+1, MaxRoutes+1))
				for j := 0; s.More(); j++ {
					rp := p.Index(j)
					t.Routes = append(t.Routes, Route{})
					d.route(&rp, &t.Routes[len(t.Routes)-1])
				}
				if cap(t.Routes) > 2*len(t.Routes)+64 { // a text mostly certificates
					t.Routes = slices.Clone(t.Routes)
				}
			}
		case 2:
			if s.Array(&p) {
				t.Certificates = []Certificate{}
				for j := 0; s.More(); j++ {
					t.Certificates = append(t.Certificates, Certificate{})
					// Few and small: read as a Value (the shape depends on which members
					// are present), the PEM strings copied once.
					decodeCertificate(s.Value(), jsonx.Index(p.String(), j), fr, e, &t.Certificates[len(t.Certificates)-1])
				}
			}
		}
	}
	o.End(&root, tableKeys)
	return t, rev
}

// targetSlab is how many targets one allocation holds: routes' targets are cut from
// shared slabs rather than allocated route by route.
const targetSlab = 4096

// routeDecoder reads routes, sharing what repeats between them: the target slabs and one
// RouteTLS per distinct value (routes are never modified after decoding).
type routeDecoder struct {
	s    *jsonx.Stream
	e    *jsonx.Errors
	mode Mode
	pool []Target
	tls  map[RouteTLS]*RouteTLS
}

func (d *routeDecoder) route(p *jsonx.Path, r *Route) {
	s := d.s
	o, ok := s.Object(p, routeNames)
	if !ok {
		return
	}
	for {
		i, more := o.Next()
		if !more {
			break
		}
		mp := p.Key(routeNames[i])
		switch i {
		case 0:
			r.Hostname, _ = s.String(&mp)
		case 1:
			if s.Array(&mp) {
				start := len(d.pool)
				for j := 0; s.More(); j++ {
					if len(d.pool) == cap(d.pool) { // a new slab; this route's targets move along
						next := make([]Target, len(d.pool)-start, max(targetSlab, 2*(len(d.pool)-start)))
						copy(next, d.pool[start:])
						d.pool, start = next, 0
					}
					d.pool = append(d.pool, Target{})
					tp := mp.Index(j)
					d.target(&tp, &d.pool[len(d.pool)-1])
				}
				r.Targets = d.pool[start:len(d.pool):len(d.pool)]
			}
		case 2:
			if s.Kind() == 'n' {
				s.Skip() // null: plain HTTP only
			} else {
				r.TLS = d.routeTLS(&mp)
			}
		}
	}
	o.End(p, routeKeys)
}

func (d *routeDecoder) target(p *jsonx.Path, t *Target) {
	s := d.s
	o, ok := s.Object(p, targetKeys)
	if !ok {
		return
	}
	for {
		i, more := o.Next()
		if !more {
			break
		}
		mp := p.Key(targetKeys[i])
		switch i {
		case 0:
			t.LeaseID, _ = s.String(&mp)
		case 1:
			t.Address, _ = s.Intern(&mp)
		case 2:
			n, _ := s.Int(&mp, 1, 65535)
			t.Port = int(n)
		}
	}
	o.End(p, targetKeys)
}

// routeTLS reads a route's tls object: {certificateId, redirectHttp}, or in standalone
// mode {acme, redirectHttp} when acme is a member. Values are judged only for the members
// of the shape in force (a member outside it is reported as not allowed, nothing more).
func (d *routeDecoder) routeTLS(p *jsonx.Path) *RouteTLS {
	s := d.s
	o, ok := s.Object(p, tlsNames)
	if !ok {
		return nil
	}
	var (
		v                     RouteTLS
		kind                  [3]byte // each member's JSON kind, 0 when absent
		certOK, acmeOK, redOK bool
	)
	for {
		i, more := o.Next()
		if !more {
			break
		}
		kind[i] = byte(s.Kind())
		switch {
		case i == 0 && kind[i] == '"':
			v.CertificateID, certOK = s.Intern(p)
		case i == 1 && (kind[i] == 't' || kind[i] == 'f'):
			v.ACME, acmeOK = s.Bool(p)
		case i == 2 && (kind[i] == 't' || kind[i] == 'f'):
			v.RedirectHTTP, redOK = s.Bool(p)
		default:
			s.Skip()
		}
	}
	acme := d.mode == ModeStandalone && o.Has(1)
	if acme {
		o.End(p, tlsACMEKeys)
		v.CertificateID = ""
	} else {
		o.End(p, tlsKeys)
		v.ACME = false
	}
	bad := func(key, what string) {
		mp := p.Key(key)
		d.e.Addf(mp.String(), "%s", what)
	}
	switch {
	case !acme && o.Has(0) && !certOK:
		bad("certificateId", "must be a string")
	case acme && !acmeOK:
		bad("acme", "must be a boolean")
	case acme && !v.ACME:
		bad("acme", "must be true")
	}
	if o.Has(2) && !redOK {
		bad("redirectHttp", "must be a boolean")
	}
	if shared := d.tls[v]; shared != nil {
		return shared
	}
	r := new(RouteTLS)
	*r = v
	if len(d.tls) < 1<<16 {
		d.tls[v] = r
	}
	return r
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
