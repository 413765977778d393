package routetable

import (
	"encoding/json"
	"strconv"
)

// MarshalJSON encodes the table in its wire schema: keys in contract order, nil slices as
// [] (never null), tls as null or exactly one of its two shapes, so the output decodes
// again under the exact-schema rule. A hand-written encoder because the last-known-good
// file of a 100,000-route table is written on every apply. The output holds private keys:
// it is for the 0600 state file, never for a log.
func (t Table) MarshalJSON() ([]byte, error) {
	size := 64
	for i := range t.Certificates {
		size += 64 + len(t.Certificates[i].CertificatePEM) + len(t.Certificates[i].PrivateKeyPEM)
	}
	size += len(t.Routes) * 160
	b := make([]byte, 0, size)
	b = append(b, `{"revision":`...)
	b = strconv.AppendInt(b, t.Revision, 10)
	b = append(b, `,"routes":[`...)
	for i := range t.Routes {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendRoute(b, &t.Routes[i])
	}
	b = append(b, `],"certificates":[`...)
	for i := range t.Certificates {
		c := &t.Certificates[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendString(b, c.ID)
		b = append(b, `,"certificatePem":`...)
		b = appendString(b, c.CertificatePEM)
		b = append(b, `,"privateKeyPem":`...)
		b = appendString(b, c.PrivateKeyPEM)
		b = append(b, '}')
	}
	return append(b, "]}"...), nil
}

// MarshalJSON encodes the route in its wire schema.
func (r Route) MarshalJSON() ([]byte, error) { return appendRoute(nil, &r), nil }

func appendRoute(b []byte, r *Route) []byte {
	b = append(b, `{"hostname":`...)
	b = appendString(b, r.Hostname)
	b = append(b, `,"targets":[`...)
	for j := range r.Targets {
		tg := &r.Targets[j]
		if j > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"leaseId":`...)
		b = appendString(b, tg.LeaseID)
		b = append(b, `,"address":`...)
		b = appendString(b, tg.Address)
		b = append(b, `,"port":`...)
		b = strconv.AppendInt(b, int64(tg.Port), 10)
		b = append(b, '}')
	}
	b = append(b, `],"tls":`...)
	switch {
	case r.TLS == nil:
		b = append(b, "null"...)
	case r.TLS.ACME:
		b = append(b, `{"acme":true,"redirectHttp":`...)
		b = strconv.AppendBool(b, r.TLS.RedirectHTTP)
		b = append(b, '}')
	default:
		b = append(b, `{"certificateId":`...)
		b = appendString(b, r.TLS.CertificateID)
		b = append(b, `,"redirectHttp":`...)
		b = strconv.AppendBool(b, r.TLS.RedirectHTTP)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendString appends s as a JSON string. Plain printable ASCII is copied as is; anything
// else goes through encoding/json for its escaping rules.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
