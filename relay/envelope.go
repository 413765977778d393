package relay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/serve-zone/ingress/internal/jsonx"
)

// Correlation phases.
const (
	PhaseRequest  = "request"
	PhaseResponse = "response"
)

// Correlation pairs a request with its answer.
type Correlation struct {
	ID    string `json:"id"`
	Phase string `json:"phase"` // "request" | "response"
}

// Envelope is one TypedRequest message. Request and Response are raw bodies; a nil
// Response (in a decoded envelope: absent or null) is sent as null.
type Envelope struct {
	Method      string          `json:"method"`
	Request     json.RawMessage `json:"request"`
	Response    json.RawMessage `json:"response"`
	Correlation Correlation     `json:"correlation"`
	Error       *ErrorBody      `json:"error,omitempty"`
	Retry       *Retry          `json:"retry,omitempty"`
}

// ErrorBody is an envelope's `error`. An absent data is decoded as {}.
type ErrorBody struct {
	Text string          `json:"text"`
	Data json.RawMessage `json:"data,omitempty"`
}

// Retry is an envelope's `retry`: send the same request again after WaitForMs.
type Retry struct {
	WaitForMs float64 `json:"waitForMs"`
	Reason    string  `json:"reason"`
}

// decodeEnvelope reads one text frame as an envelope. Keys beyond the envelope's are
// ignored; the bodies are returned raw, for their handlers to judge (the whole frame,
// bodies included, has been checked by jsonx.Parse: no repeated name anywhere). The
// errors name every violation with its JSON path and never quote the frame. Even with
// violations the returned envelope holds what could be read (method, correlation), so
// that a request with a usable correlation id can be answered.
func decodeEnvelope(frame []byte) (Envelope, *jsonx.Errors) {
	var env Envelope
	e := &jsonx.Errors{}
	doc, err := jsonx.Parse(frame)
	if err != nil && jsonx.IsRepeated(err) {
		e.AddSyntax(err, "", "")
		return env, e
	}
	m, ok := doc.Fields()
	if err != nil || !ok {
		e.Addf("", "the message must be a JSON object")
		return env, e
	}
	if raw, ok := m.Lookup("method"); !ok {
		e.Addf("method", "is missing")
	} else if s, ok := jsonx.String(raw, "method", e); ok {
		env.Method = s
	}
	if raw, ok := m.Lookup("correlation"); !ok {
		e.Addf("correlation", "is missing")
	} else {
		decodeCorrelation(raw, &env.Correlation, e)
	}
	if raw, ok := m.Lookup("request"); ok {
		env.Request = json.RawMessage(raw)
	} else if env.Correlation.Phase == PhaseRequest {
		e.Addf("request", "is missing")
	}
	if raw, ok := m.Lookup("response"); ok && !raw.IsNull() {
		env.Response = json.RawMessage(raw)
	}
	errRaw, hasErr := m.Lookup("error")
	if hasErr && !errRaw.IsNull() {
		env.Error = decodeError(errRaw, e)
	}
	if raw, ok := m.Lookup("retry"); ok && !raw.IsNull() {
		env.Retry = decodeRetry(raw, e)
	}
	if env.Correlation.Phase == PhaseResponse && env.Response == nil && env.Error == nil && env.Retry == nil {
		if !hasErr || e.Len() == 0 {
			e.Addf("", "an answer must carry response or error")
		}
	}
	return env, e
}

func decodeCorrelation(raw jsonx.Value, c *Correlation, e *jsonx.Errors) {
	m, ok := raw.Fields()
	if !ok {
		e.Addf("correlation", "must be an object")
		return
	}
	if v, ok := m.Lookup("id"); !ok {
		e.Addf("correlation.id", "is missing")
	} else if s, ok := jsonx.String(v, "correlation.id", e); ok {
		if s == "" {
			e.Addf("correlation.id", "must not be empty")
		}
		c.ID = s
	}
	if v, ok := m.Lookup("phase"); !ok {
		e.Addf("correlation.phase", "is missing")
	} else if s, ok := jsonx.String(v, "correlation.phase", e); ok {
		if s != PhaseRequest && s != PhaseResponse {
			e.Addf("correlation.phase", "must be %q or %q", PhaseRequest, PhaseResponse)
		}
		c.Phase = s
	}
}

func decodeError(raw jsonx.Value, e *jsonx.Errors) *ErrorBody {
	m, ok := raw.Fields()
	if !ok {
		e.Addf("error", "must be an object")
		return nil
	}
	b := &ErrorBody{Data: json.RawMessage(`{}`)}
	ok = true
	if v, present := m.Lookup("text"); !present {
		e.Addf("error.text", "is missing")
		ok = false
	} else if s, good := jsonx.String(v, "error.text", e); good {
		b.Text = s
	} else {
		ok = false
	}
	if v, present := m.Lookup("data"); present {
		b.Data = json.RawMessage(v)
	}
	if !ok {
		return nil
	}
	return b
}

func decodeRetry(raw jsonx.Value, e *jsonx.Errors) *Retry {
	m, ok := raw.Fields()
	if !ok {
		e.Addf("retry", "must be an object")
		return nil
	}
	r := &Retry{}
	ok = true
	if v, present := m.Lookup("waitForMs"); !present {
		e.Addf("retry.waitForMs", "is missing")
		ok = false
	} else if f, good := v.AsFloat(); !good || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		e.Addf("retry.waitForMs", "must be a non-negative number")
		ok = false
	} else {
		r.WaitForMs = f
	}
	if v, present := m.Lookup("reason"); !present {
		e.Addf("retry.reason", "is missing")
		ok = false
	} else if s, good := jsonx.String(v, "retry.reason", e); good {
		r.Reason = s
	} else {
		ok = false
	}
	if !ok {
		return nil
	}
	return r
}

// Encode writes env as one frame, keys in the order the contract's examples use. The raw
// bodies must be valid JSON (nil is null); they are copied as they are, not re-encoded, so
// a large table is not compacted again.
func (env *Envelope) Encode() ([]byte, error) {
	size := len(env.Request) + len(env.Response) + len(env.Method) + len(env.Correlation.ID) + 128
	if env.Error != nil {
		size += len(env.Error.Text) + len(env.Error.Data)
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	buf.WriteString(`{"method":`)
	if err := enc.Encode(env.Method); err != nil {
		return nil, err
	}
	trimNewline(buf)
	buf.WriteString(`,"request":`)
	writeRaw(buf, env.Request)
	buf.WriteString(`,"response":`)
	writeRaw(buf, env.Response)
	buf.WriteString(`,"correlation":`)
	if err := enc.Encode(env.Correlation); err != nil {
		return nil, err
	}
	trimNewline(buf)
	if env.Error != nil {
		buf.WriteString(`,"error":`)
		body := ErrorBody{Text: env.Error.Text, Data: env.Error.Data}
		if len(bytes.TrimSpace(body.Data)) == 0 {
			body.Data = json.RawMessage(`{}`)
		}
		if err := enc.Encode(body); err != nil {
			return nil, fmt.Errorf("relay: encode error body: %w", err)
		}
		trimNewline(buf)
	}
	if env.Retry != nil {
		buf.WriteString(`,"retry":`)
		if err := enc.Encode(env.Retry); err != nil {
			return nil, fmt.Errorf("relay: encode retry: %w", err)
		}
		trimNewline(buf)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

func writeRaw(buf *bytes.Buffer, raw json.RawMessage) {
	if len(bytes.TrimSpace(raw)) == 0 {
		buf.WriteString("null")
		return
	}
	buf.Write(raw)
}

func trimNewline(buf *bytes.Buffer) {
	if n := buf.Len(); n > 0 && buf.Bytes()[n-1] == '\n' {
		buf.Truncate(n - 1)
	}
}
