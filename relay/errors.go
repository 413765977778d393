package relay

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/serve-zone/ingress/internal/jsonx"
	"github.com/serve-zone/ingress/internal/redact"
)

var (
	// ErrClosed: the socket is closed (or closing); every pending and later Call fails with
	// an error wrapping it, and Run returns one.
	ErrClosed = errors.New("relay: connection closed")
	// ErrTimeout: an attempt got no answer within Options.CallTimeout, or the call as a whole
	// (retry waits included) ran past Options.CallDeadline.
	ErrTimeout = errors.New("relay: call timed out")
	// ErrMalformed: the peer's answer was not a usable envelope (for instance neither
	// `response` nor `error`).
	ErrMalformed = errors.New("relay: malformed answer")
)

// Texts of the answers contract §2 fixes.
const (
	noMethodText       = "There is no available method for this call on the server side"
	requestInvalidText = "request invalid"
	internalErrorText  = "internal error"
)

// ErrNoMethod is the answer to a request for a method nobody handles. Call returns a
// *RemoteError matching it under errors.Is when the peer gave that answer; a handler may
// return it to give that answer itself.
var ErrNoMethod = &RemoteError{Text: noMethodText, Data: json.RawMessage(`{}`)}

// RemoteError is an `error` answer: Call returns it when the peer answered with one, and a
// handler returns it to answer with one. Data is the `error.data` value; nil or empty is sent
// as {} and an absent data reads as {}.
type RemoteError struct {
	Text string
	Data json.RawMessage
	// fingerprint is redact.Fingerprint of the text as the peer sent it (Text is
	// scrubbed), so an error line matches what the peer logged; "" for errors made here.
	fingerprint string
}

// Error quotes the text only when it is one the contract fixes (the answers this package
// makes itself); any other text the peer chose is named by its fingerprint, since it may
// echo the bearer in any encoding. Data, which may carry anything, is never named.
func (e *RemoteError) Error() string {
	switch e.Text {
	case noMethodText, requestInvalidText, internalErrorText:
		return "relay: remote error " + strconv.Quote(e.Text)
	}
	return "relay: remote error (text of " + e.Fingerprint() + ")"
}

// Fingerprint is redact.Fingerprint of the text as the peer sent it (for an error Call
// returned; of Text otherwise): what Error names it by.
func (e *RemoteError) Fingerprint() string {
	if e.fingerprint != "" {
		return e.fingerprint
	}
	return redact.Fingerprint(e.Text)
}

// Is matches another *RemoteError with the same text, so errors.Is(err, ErrNoMethod) works.
func (e *RemoteError) Is(target error) bool {
	t, ok := target.(*RemoteError)
	return ok && t.Text == e.Text
}

// Code returns data.code when data is an object whose "code" is a string, else "".
func (e *RemoteError) Code() string {
	data, err := jsonx.Parse(e.Data)
	if err != nil {
		return ""
	}
	m, _ := data.Fields()
	s, _ := m.Get("code").AsString()
	return s
}

// data returns the data to send: {} when empty.
func (e *RemoteError) data() json.RawMessage {
	if len(bytes.TrimSpace(e.Data)) == 0 {
		return json.RawMessage(`{}`)
	}
	return e.Data
}

// RequestInvalid builds the answer to a request whose body failed validation:
// {"text":"request invalid","data":{"code":"request-invalid","errors":[...]}}. A nil errs
// is sent as an empty list.
func RequestInvalid(errs []string) *RemoteError {
	if errs == nil {
		errs = []string{}
	}
	data, _ := json.Marshal(struct {
		Code   string   `json:"code"`
		Errors []string `json:"errors"`
	}{"request-invalid", errs})
	return &RemoteError{Text: requestInvalidText, Data: data}
}

// RetryError is what a handler returns to answer with a `retry` envelope: the caller is
// asked to send the same request again after Wait.
type RetryError struct {
	Wait   time.Duration
	Reason string
}

func (e *RetryError) Error() string {
	return "relay: retry after " + e.Wait.String() + ": " + strconv.Quote(e.Reason)
}

// RetryLater returns the handler error that answers with retry {waitForMs, reason}. A
// negative wait is sent as 0.
func RetryLater(wait time.Duration, reason string) error {
	if wait < 0 {
		wait = 0
	}
	return &RetryError{Wait: wait, Reason: reason}
}
