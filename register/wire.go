package register

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/serve-zone/ingress/internal/jsonx"
)

// The method names of contract §4 and §5.
const (
	MethodRegister         = "registerClusterIngress"
	MethodGetRouteTable    = "getClusterIngressRouteTable"
	MethodRouteTableChange = "pushClusterIngressRouteTableChanged"
	MethodStatistics       = "getClusterTrafficStatistics"
)

// ProtocolName is the protocol this ingress offers.
const ProtocolName = "serve.zone/cluster-ingress"

// Offer is an IProtocolOffer.
type Offer struct {
	Name       string `json:"name"`
	MinVersion int64  `json:"minVersion"`
	MaxVersion int64  `json:"maxVersion"`
}

// OwnOffer is the offer this ingress makes: version 1 only.
var OwnOffer = Offer{Name: ProtocolName, MinVersion: 1, MaxVersion: 1}

// String renders the offer for log lines.
func (o Offer) String() string { return fmt.Sprintf("%s %d..%d", o.Name, o.MinVersion, o.MaxVersion) }

// shared returns the highest version both offers contain, or 0.
func (o Offer) shared(p Offer) int64 {
	if o.Name != p.Name {
		return 0
	}
	hi := min(o.MaxVersion, p.MaxVersion)
	if hi >= max(o.MinVersion, p.MinVersion) {
		return hi
	}
	return 0
}

// registration is the registerClusterIngress request body. The bearer is a plain string
// only here, in the one body that must carry it; the value is built per call and never
// logged.
type registration struct {
	Bearer       string   `json:"bearer"`
	Version      string   `json:"version"`
	NodeID       string   `json:"nodeId"`
	Capabilities []string `json:"capabilities,omitempty"`
	Protocol     Offer    `json:"protocol"`
}

// accepted is a decoded registerClusterIngress response.
type accepted struct {
	revision    int64 // -1 for null
	protocol    Offer
	useVersion  int64
	hasRevision bool
}

func decodeOffer(raw jsonx.Value, path string, e *jsonx.Errors) (Offer, bool) {
	n := e.Len()
	m := jsonx.Object(raw, path, e, []string{"name", "minVersion", "maxVersion"}, nil)
	if m == nil {
		return Offer{}, false
	}
	var o Offer
	if v, ok := m.Lookup("name"); ok {
		o.Name, _ = jsonx.String(v, jsonx.Join(path, "name"), e)
	}
	if v, ok := m.Lookup("minVersion"); ok {
		o.MinVersion, _ = jsonx.Int(v, jsonx.Join(path, "minVersion"), e, 1, jsonx.MaxSafeInteger)
	}
	if v, ok := m.Lookup("maxVersion"); ok {
		o.MaxVersion, _ = jsonx.Int(v, jsonx.Join(path, "maxVersion"), e, 1, jsonx.MaxSafeInteger)
	}
	if e.Len() == n && o.MinVersion > o.MaxVersion {
		e.Addf(path, "minVersion must not exceed maxVersion")
	}
	return o, e.Len() == n
}

// decodeAccepted reads `{ accepted: true, revision: Counter | null, protocol }` exactly.
func decodeAccepted(raw json.RawMessage) (accepted, error) {
	var e jsonx.Errors
	var a accepted
	m := jsonx.ObjectBody(raw, "response", &e, []string{"accepted", "revision", "protocol"}, nil)
	if m != nil {
		if v, ok := m.Lookup("accepted"); ok {
			if b, ok := jsonx.Bool(v, "response.accepted", &e); ok && !b {
				e.Addf("response.accepted", "must be true")
			}
		}
		if v, ok := m.Lookup("revision"); ok {
			if v.IsNull() {
				a.revision = -1
			} else if r, ok := jsonx.Counter(v, "response.revision", &e); ok {
				a.revision, a.hasRevision = r, true
			}
		}
		if v, ok := m.Lookup("protocol"); ok {
			if o, ok := decodeOffer(v, "response.protocol", &e); ok {
				a.protocol = o
				if a.useVersion = OwnOffer.shared(o); a.useVersion == 0 {
					e.Addf("response.protocol", "shares no version with %s", OwnOffer)
				}
			}
		}
	}
	return a, e.Err()
}

// refusal is an IClusterIngressRegistrationRefusal.
type refusal struct {
	Reason       string
	RetryAfterMs int64
}

// RefusalReasons lists every reason contract §4 names, in the order Cloudly judges them.
var RefusalReasons = []string{
	"not-ready", "registration-invalid", "relay-not-connected", "ingress-not-designated",
	"node-mismatch", "assignment-not-running", "bearer-refused", "conflict",
}

// readRefusal answers the registration refusal in data, or false when data is not exactly
// one (wrong code, extra or missing key, unknown reason, retryAfterMs out of range): such
// an answer is "anything else", not a refusal.
func readRefusal(data json.RawMessage) (refusal, bool) {
	var e jsonx.Errors
	m := jsonx.ObjectBody(data, "data", &e, []string{"code", "reason", "retryAfterMs"}, nil)
	if m == nil || e.Len() > 0 {
		return refusal{}, false
	}
	code, ok := jsonx.String(m.Get("code"), "code", &e)
	if !ok || code != "cluster-ingress-registration-refused" {
		return refusal{}, false
	}
	reason, ok := jsonx.String(m.Get("reason"), "reason", &e)
	if !ok || !slices.Contains(RefusalReasons, reason) {
		return refusal{}, false
	}
	ms, ok := jsonx.Int(m.Get("retryAfterMs"), "retryAfterMs", &e, 1000, 300000)
	if !ok {
		return refusal{}, false
	}
	return refusal{Reason: reason, RetryAfterMs: ms}, true
}

// remoteReason returns data.reason when data is an object whose "reason" is a string,
// whatever else it holds: what a malformed refusal meant, for the log line.
func remoteReason(data json.RawMessage) (string, bool) {
	v, err := jsonx.Parse(data)
	if err != nil {
		return "", false
	}
	m, _ := v.Fields()
	return m.Get("reason").AsString()
}

// readProtocolRefusal answers the refusing side's offer when data is exactly an
// IProtocolRefusal.
func readProtocolRefusal(data json.RawMessage) (Offer, bool) {
	var e jsonx.Errors
	m := jsonx.ObjectBody(data, "data", &e, []string{"code", "offer"}, nil)
	if m == nil || e.Len() > 0 {
		return Offer{}, false
	}
	code, ok := jsonx.String(m.Get("code"), "code", &e)
	if !ok || code != "protocol-refused" {
		return Offer{}, false
	}
	return decodeOffer(m.Get("offer"), "offer", &e)
}

// decodeHint reads `{ revision: Counter }` exactly.
func decodeHint(raw json.RawMessage) (int64, []string) {
	var e jsonx.Errors
	m := jsonx.ObjectBody(raw, "request", &e, []string{"revision"}, nil)
	var rev int64
	if v, ok := m.Lookup("revision"); ok {
		rev, _ = jsonx.Counter(v, "revision", &e)
	}
	return rev, e.List()
}

// decodeTableAnswer reads `{ table: IClusterIngressRouteTable | null }` and returns the raw
// table (nil for null); the table itself is judged by Tables.ApplyJSON.
func decodeTableAnswer(raw json.RawMessage) (json.RawMessage, error) {
	var e jsonx.Errors
	m := jsonx.ObjectBody(raw, "response", &e, []string{"table"}, nil)
	if err := e.Err(); err != nil {
		return nil, err
	}
	t := m.Get("table")
	if t.IsNull() {
		return nil, nil
	}
	return json.RawMessage(t), nil
}
