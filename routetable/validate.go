package routetable

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/serve-zone/ingress/internal/jsonx"
)

const (
	msgID       = "must be an Id (1–128 characters of [A-Za-z0-9._:-], starting with a letter or digit)"
	msgHostname = "must be a lowercase A-label DNS name without trailing dot (at most 253 characters, " +
		"labels of 1–63 [a-z0-9-] neither starting nor ending with '-'), or '*.' followed by one"
	msgAddress = "must be a dotted-quad IPv4 address without leading zeros, outside 0.0.0.0/8, 224.0.0.0/4 and 240.0.0.0/4"
)

// quoteHostname names a refused hostname in its violation. It is quoted when it looks like
// a mistyped name (at most 253 bytes, a dot, no space or control character); anything
// else, a PEM block or a key's base64 line that a peer echoed into the field among it,
// is named by its length only, so that no key material reaches a violation.
func quoteHostname(h string) string {
	if h == "" {
		return `""`
	}
	if len(h) <= 253 && strings.Contains(h, ".") && !strings.ContainsFunc(h, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || r == utf8.RuneError
	}) {
		return strconv.Quote(h)
	}
	return fmt.Sprintf("(%d bytes, not quoted)", len(h))
}

// validated is what Validate learns on the way: the violations, the warnings and the
// parsed certificates, which compile reuses instead of parsing every key pair twice.
type validated struct {
	violations []string
	warnings   []string
	certs      map[string]*tls.Certificate // by id; only certificates that parsed and matched
	byPEM      keyPairs                    // the same, by their PEM: the next table's prior
	expired    int
}

// pemPair is a certificate's PEM and its key's, as the table gives them.
type pemPair struct{ cert, key string }

// keyPairs are parsed key pairs by their PEM. A table often repeats a certificate (a
// wildcard under several ids), and a new table mostly repeats the last one's: each
// distinct pair is parsed once, and not again while it stays in the served table.
type keyPairs map[pemPair]*tls.Certificate

// ExpiryWarningWindow is how close to its end a leaf's validity is reported as a warning.
const ExpiryWarningWindow = 14 * 24 * time.Hour

// Validate judges every rule of contract §6 (and §7 for ModeStandalone) and returns all
// violations at once as an *Error with CodeInvalid, each naming its JSON path. warnings
// lists what is served but reported: a certificate that expired, is not valid yet or
// expires within ExpiryWarningWindow. It never mutates t and is safe to call concurrently
// on a table nobody mutates. A nil table is invalid.
//
// In ModeStandalone the order of routes, targets and certificates is free (the Store
// sorts them when it applies the table); a repeated hostname, target or certificate id is
// still a violation, naming the entry it repeats. ModeRelay keeps contract §6's strict
// order.
func Validate(t *Table, mode Mode) (warnings []string, err error) {
	v := validate(t, mode, time.Now(), nil)
	if len(v.violations) > 0 {
		return v.warnings, newInvalid(revisionOf(t), v.violations)
	}
	return v.warnings, nil
}

func revisionOf(t *Table) int64 {
	if t == nil || t.Revision < 0 {
		return -1
	}
	return t.Revision
}

// validate judges t (Validate). prior, which may be nil, holds key pairs parsed before
// (the served table's): a certificate whose PEM is there is not parsed again.
func validate(t *Table, mode Mode, now time.Time, prior keyPairs) *validated {
	v := &validated{}
	if t == nil {
		v.violations = append(v.violations, "the route table is missing")
		return v
	}
	e := &jsonx.Errors{}
	if t.Revision < 0 || t.Revision > jsonx.MaxSafeInteger {
		e.Addf("revision", "must be a non-negative safe integer")
	}

	// Certificates first: routes refer to them.
	if n := len(t.Certificates); n > MaxCertificates {
		e.Addf("certificates", "must hold at most %d certificates (it holds %d)", MaxCertificates, n)
	}
	v.certs = make(map[string]*tls.Certificate, len(t.Certificates))
	v.byPEM = make(keyPairs)
	index := make(map[string]int, len(t.Certificates)) // id -> first position
	standalone := mode == ModeStandalone
	for i := range t.Certificates {
		c := &t.Certificates[i]
		p := jsonx.Index("certificates", i)
		first, dup := index[c.ID]
		if !jsonx.IsID(c.ID) {
			e.Addf(p+".id", msgID)
		} else if !dup {
			index[c.ID] = i
		}
		switch {
		case standalone && dup:
			e.Addf(p+".id", "repeats certificates[%d].id %q (each id once)", first, c.ID)
		case !standalone && i > 0 && c.ID <= t.Certificates[i-1].ID:
			e.Addf(p+".id", "must sort strictly after certificates[%d].id (byte order, no duplicates)", i-1)
		}
		var (
			w       string
			expired bool
			pair    = pemPair{c.CertificatePEM, c.PrivateKeyPEM}
		)
		kp := v.byPEM[pair]
		if kp == nil {
			kp = prior[pair]
		}
		if kp != nil { // parsed before, without a violation: only the dates are judged again
			w, expired = expiryWarning(p, c.ID, kp.Leaf.NotBefore, kp.Leaf.NotAfter, now)
		} else {
			kp, w, expired = parseCertificate(c, p, now, e)
		}
		if kp != nil {
			v.byPEM[pair] = kp
		}
		if w != "" {
			v.warnings = append(v.warnings, w)
		}
		if expired {
			v.expired++
		}
		if kp != nil && jsonx.IsID(c.ID) {
			if _, ok := v.certs[c.ID]; !ok {
				v.certs[c.ID] = kp
			}
		}
	}
	referenced := make([]bool, len(t.Certificates))

	if n := len(t.Routes); n > MaxRoutes {
		e.Addf("routes", "must hold at most %d routes (it holds %d)", MaxRoutes, n)
	}
	// Standalone: hostname -> first position, to name the route a hostname repeats. A
	// file in strictly ascending order (as generated files are) repeats none, and needs
	// no map.
	var hosts map[string]int
	if standalone && !strictlyAscending(t.Routes) {
		hosts = make(map[string]int, len(t.Routes))
	}
	for i := range t.Routes {
		r := &t.Routes[i]
		// Paths are written only for a violation: 100,000 routes have none.
		p := func(member string) string { return jsonx.Index("routes", i) + member }
		okHost := ValidHostname(r.Hostname)
		if !okHost {
			e.Addf(p(".hostname"), "%s "+msgHostname, quoteHostname(r.Hostname))
		}
		if hosts != nil {
			if first, dup := hosts[r.Hostname]; dup && okHost {
				e.Addf(p(".hostname"), "repeats routes[%d].hostname %q (one route per hostname)", first, r.Hostname)
			} else if !dup {
				hosts[r.Hostname] = i
			}
		} else if !standalone && i > 0 && r.Hostname <= t.Routes[i-1].Hostname {
			e.Addf(p(".hostname"), "must sort strictly after routes[%d].hostname (byte order, no duplicates)", i-1)
		}
		validateTargets(r.Targets, i, standalone, e)
		if r.TLS == nil {
			continue
		}
		tp := func(member string) string { return p(".tls" + member) }
		switch {
		case r.TLS.ACME && mode != ModeStandalone:
			e.Addf(tp(".acme"), "is only allowed in standalone mode")
		case r.TLS.ACME && r.TLS.CertificateID != "":
			e.Addf(tp(""), "must name either certificateId or acme, not both")
		case r.TLS.ACME:
			// The acme package obtains it. A wildcard is valid by the contract, but only
			// the DNS-01 challenge can prove one, and the ingress answers HTTP-01 and
			// TLS-ALPN-01 only: say so rather than let handshakes fail without a word.
			if strings.HasPrefix(r.Hostname, "*.") {
				v.warnings = append(v.warnings, tp(".acme")+": a wildcard certificate needs the DNS-01 challenge, "+
					"which this ingress does not answer; none is requested and TLS handshakes for "+r.Hostname+
					" fail (plain HTTP is served unless redirectHttp is true)")
			}
		case !jsonx.IsID(r.TLS.CertificateID):
			e.Addf(tp(".certificateId"), msgID)
		default:
			ci, ok := index[r.TLS.CertificateID]
			if !ok {
				e.Addf(tp(".certificateId"), "names %q, which is not in certificates", r.TLS.CertificateID)
				break
			}
			referenced[ci] = true
			kp := v.certs[r.TLS.CertificateID]
			if kp == nil || !okHost {
				break // the certificate's own violations are reported at its path
			}
			if !covers(kp.Leaf, r.Hostname) {
				e.Addf(tp(".certificateId"), "names certificates[%d], whose leaf does not cover %q", ci, r.Hostname)
			}
		}
	}
	for i, ref := range referenced {
		if !ref {
			e.Addf(jsonx.Index("certificates", i), "is referenced by no route")
		}
	}
	v.violations = e.List()
	return v
}

// validateTargets judges the targets of routes[route]. standalone: any order, no repeats.
// Paths are written only for a violation.
func validateTargets(ts []Target, route int, standalone bool, e *jsonx.Errors) {
	path := func() string { return jsonx.Index("routes", route) + ".targets" }
	if n := len(ts); n < 1 || n > MaxTargetsPerRoute {
		e.Addf(path(), "must hold 1 to %d targets (it holds %d)", MaxTargetsPerRoute, n)
	}
	for j := range ts {
		tg := &ts[j]
		p := func(member string) string { return path() + "[" + strconv.Itoa(j) + "]" + member }
		if !jsonx.IsID(tg.LeaseID) {
			e.Addf(p(".leaseId"), msgID)
		}
		if !ValidTargetAddress(tg.Address) {
			e.Addf(p(".address"), msgAddress)
		}
		if tg.Port < 1 || tg.Port > 65535 {
			e.Addf(p(".port"), "must be an integer from 1 to 65535")
		}
		if standalone {
			for k := range j { // at most 64 targets: no map needed
				if ts[k].Address == tg.Address && ts[k].Port == tg.Port {
					e.Addf(p(""), "repeats %s[%d] (the same address and port)", path(), k)
					break
				}
			}
		} else if j > 0 && compareTargets(tg, &ts[j-1]) <= 0 {
			e.Addf(p(""), "must sort strictly after %s[%d] (address as a string, then port as a number; no duplicates)", path(), j-1)
		}
	}
}

// strictlyAscending reports whether the routes' hostnames ascend strictly (byte order).
func strictlyAscending(routes []Route) bool {
	for i := 1; i < len(routes); i++ {
		if routes[i].Hostname <= routes[i-1].Hostname {
			return false
		}
	}
	return true
}

// covers reports whether leaf is valid for the route hostname host, as
// leaf.VerifyHostname(host) == nil does. The common cases (a SAN equal to host, or a
// wildcard SAN for host's parent domain) are answered without VerifyHostname's
// allocations; everything else (an IP-like name, a SAN in upper case, a miss) is left
// to it.
func covers(leaf *x509.Certificate, host string) bool {
	if _, err := netip.ParseAddr(host); err != nil { // VerifyHostname matches IPs otherwise
		_, parent, dotted := strings.Cut(host, ".")
		wild := strings.HasPrefix(host, "*.") // not a valid name to match: exact SANs only
		for _, san := range leaf.DNSNames {
			if san == host || !wild && dotted && len(san) == len(parent)+2 &&
				strings.HasPrefix(san, "*.") && san[2:] == parent {
				return true
			}
		}
	}
	return leaf.VerifyHostname(host) == nil
}

// expiryWarning describes a leaf outside its validity window (expired: true) or within
// ExpiryWarningWindow of its end; empty when neither.
func expiryWarning(path string, id string, notBefore, notAfter, now time.Time) (warning string, expired bool) {
	switch {
	case now.After(notAfter):
		return fmt.Sprintf("%s (id %q): the leaf expired at %s; it is served anyway",
			path, safeID(id), notAfter.UTC().Format(time.RFC3339)), true
	case now.Before(notBefore):
		return fmt.Sprintf("%s (id %q): the leaf is not valid before %s; it is served anyway",
			path, safeID(id), notBefore.UTC().Format(time.RFC3339)), true
	case notAfter.Sub(now) < ExpiryWarningWindow:
		return fmt.Sprintf("%s (id %q): the leaf expires at %s, in %s; renew it",
			path, safeID(id), notAfter.UTC().Format(time.RFC3339), roughly(notAfter.Sub(now))), false
	}
	return "", false
}

// roughly writes a duration of up to a few weeks for people: "3 days", "5h20m".
func roughly(d time.Duration) string {
	switch days := int(d / (24 * time.Hour)); {
	case days >= 2:
		return strconv.Itoa(days) + " days"
	case days == 1:
		return "1 day"
	}
	return d.Round(time.Minute).String()
}

// safeID echoes an id only when it is a valid Id, which key material never is.
func safeID(id string) string {
	if jsonx.IsID(id) {
		return id
	}
	return "(invalid)"
}
