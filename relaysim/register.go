package relaysim

import (
	"encoding/json"
	"regexp"

	"github.com/serve-zone/ingress/internal/jsonx"
)

// ProtocolName is the contract's protocol name.
const ProtocolName = "serve.zone/cluster-ingress"

// Offer is an IProtocolOffer.
type Offer struct {
	Name       string `json:"name"`
	MinVersion int64  `json:"minVersion"`
	MaxVersion int64  `json:"maxVersion"`
}

// OwnOffer is the offer relaysim makes: version 1 only.
var OwnOffer = Offer{Name: ProtocolName, MinVersion: 1, MaxVersion: 1}

// Registration refusal reasons (contract §4).
const (
	ReasonNotReady             = "not-ready"
	ReasonRegistrationInvalid  = "registration-invalid"
	ReasonRelayNotConnected    = "relay-not-connected"
	ReasonIngressNotDesignated = "ingress-not-designated"
	ReasonNodeMismatch         = "node-mismatch"
	ReasonAssignmentNotRunning = "assignment-not-running"
	ReasonBearerRefused        = "bearer-refused"
	ReasonConflict             = "conflict"
)

// Error texts of the refusals, as the examples show them.
const (
	registrationRefusedText = "cluster ingress registration refused"
	protocolRefusedText     = "protocol refused"
)

var capabilities = map[string]bool{
	"http1": true, "http2": true, "http3": true, "websocket": true,
	"tls-termination": true, "traffic-statistics": true,
}

var semver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// registration is a judged registration body.
type registration struct {
	NodeID string
	Bearer string
	Offer  Offer
}

// judgeRegistration reads a registerClusterIngress body under the exact schema. offerOK
// reports whether the protocol offer itself was well formed (so it can be judged first);
// e holds every violation of the whole body.
func judgeRegistration(raw json.RawMessage) (reg registration, offerOK bool, e *jsonx.Errors) {
	e = &jsonx.Errors{}
	m := jsonx.ObjectBody(raw, "", e, []string{"bearer", "version", "nodeId", "protocol"}, []string{"capabilities"})
	if m == nil {
		return reg, false, e
	}
	if v, ok := m.Lookup("protocol"); ok {
		reg.Offer, offerOK = judgeOffer(v, "protocol", e)
	}
	if v, ok := m.Lookup("bearer"); ok {
		if s, ok := jsonx.String(v, "bearer", e); ok {
			if !visibleASCII(s) || len(s) > 4096 {
				e.Addf("bearer", "must be 1 to 4096 visible ASCII characters")
			}
			reg.Bearer = s
		}
	}
	if v, ok := m.Lookup("version"); ok {
		if s, ok := jsonx.String(v, "version", e); ok && !semver.MatchString(s) {
			e.Addf("version", "must be a semantic version like 1.2.3 or 1.2.3-pre")
		}
	}
	if v, ok := m.Lookup("nodeId"); ok {
		if s, ok := jsonx.String(v, "nodeId", e); ok {
			if !jsonx.IsID(s) {
				e.Addf("nodeId", "must be an Id")
			}
			reg.NodeID = s
		}
	}
	if v, ok := m.Lookup("capabilities"); ok {
		judgeCapabilities(v, e)
	}
	return reg, offerOK, e
}

func judgeOffer(raw jsonx.Value, path string, e *jsonx.Errors) (Offer, bool) {
	var o Offer
	before := e.Len()
	m := jsonx.Object(raw, path, e, []string{"name", "minVersion", "maxVersion"}, nil)
	if m == nil {
		return o, false
	}
	if v, ok := m.Lookup("name"); ok {
		o.Name, _ = jsonx.String(v, jsonx.Join(path, "name"), e)
	}
	if v, ok := m.Lookup("minVersion"); ok {
		o.MinVersion, _ = jsonx.Int(v, jsonx.Join(path, "minVersion"), e, 1, jsonx.MaxSafeInteger)
	}
	if v, ok := m.Lookup("maxVersion"); ok {
		o.MaxVersion, _ = jsonx.Int(v, jsonx.Join(path, "maxVersion"), e, 1, jsonx.MaxSafeInteger)
	}
	if e.Len() == before && o.MinVersion > o.MaxVersion {
		e.Addf(jsonx.Join(path, "minVersion"), "must not exceed maxVersion")
	}
	return o, e.Len() == before
}

func judgeCapabilities(raw jsonx.Value, e *jsonx.Errors) {
	list, ok := jsonx.Array(raw, "capabilities", e)
	if !ok {
		return
	}
	if len(list) == 0 {
		e.Addf("capabilities", "must not be empty when present")
	}
	prev := ""
	for i, v := range list {
		p := jsonx.Index("capabilities", i)
		s, ok := jsonx.String(v, p, e)
		if !ok {
			continue
		}
		if !capabilities[s] {
			e.Addf(p, "must be one of http1, http2, http3, websocket, tls-termination, traffic-statistics")
		}
		if i > 0 && s <= prev {
			e.Addf(p, "must sort after the one before it (sorted, unique)")
		}
		prev = s
	}
}

func visibleASCII(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// shares reports whether o's range contains a version of ours.
func shares(o Offer) bool {
	return o.Name == OwnOffer.Name && o.MinVersion <= OwnOffer.MaxVersion && OwnOffer.MinVersion <= o.MaxVersion
}

// judgeTableRequest reads {"knownRevision": Counter | null}.
func judgeTableRequest(raw json.RawMessage) []string {
	e := &jsonx.Errors{}
	m := jsonx.ObjectBody(raw, "", e, []string{"knownRevision"}, nil)
	if v, ok := m.Lookup("knownRevision"); ok && !v.IsNull() {
		jsonx.Counter(v, "knownRevision", e)
	}
	return e.List()
}
