package register

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"

	"github.com/serve-zone/ingress/internal/echotest"
	"github.com/serve-zone/ingress/relay"
)

// echoRefusals runs a session against a relay that refuses its registration once per
// echo, each time with the echo as the error's text, code and reason (no usable refusal:
// the session retries at once, its jitter being 0), then accepts it. It returns the log.
func echoRefusals(t *testing.T, echoes []string) *logWatch {
	t.Helper()
	w := echoSession(t, func(r *relayConn, reg relay.Envelope, _ string) {
		for _, m := range echoes {
			data := `{"code":` + jsonString(m) + `,"reason":` + jsonString(m) + `,"retryAfterMs":1000}`
			if !r.answer(reg, "", &relay.ErrorBody{Text: m, Data: json.RawMessage(data)}) {
				return
			}
			var ok bool
			if reg, ok = r.request(MethodRegister); !ok {
				return
			}
		}
		r.accept(reg, "null")
	})
	w.waitFor(t, "registered with the relay")
	if got := len(w.logs.FilterMessage("registration failed").All()); got != len(echoes) {
		t.Fatalf("%d refusals logged, want %d", got, len(echoes))
	}
	return w
}

// assertNoEcho checks every log line: above debug level none holds a run of 8 bytes of any
// echo as it was sent, nor the bearer after any chain of up to three decodings; at debug
// level none holds the bearer after such decodings either.
func assertNoEcho(t *testing.T, w *logWatch, echoes []string) {
	t.Helper()
	debugTexts := 0
	for _, e := range w.logs.All() {
		line := e.LoggerName + " " + e.Message + " " + fmt.Sprint(e.ContextMap())
		if e.Level > zapcore.DebugLevel {
			for _, m := range echoes {
				if win, ok := echotest.SharesWindow(line, m, 8); ok {
					t.Fatalf("a %s line holds %q of the relay's text %q: %s", e.Level, win, m, line)
				}
			}
		}
		if e.Message == "relay-sent text" {
			debugTexts++
		}
		if echotest.HoldsSecret(line, echoSecret, 8, 3) {
			t.Fatalf("a %s line holds the bearer: %s", e.Level, line)
		}
	}
	if debugTexts < 3*len(echoes) { // the error's text, code and reason of each
		t.Fatalf("%d debug lines hold the relay's texts, want at least %d: the debug check proves nothing", debugTexts, 3*len(echoes))
	}
}

// TestBearerEchoedInEveryEncodingNeverLogged: issue 25 finding 4's hostile relay, which
// echoed the bearer in 24 encodings of which 19 reached the log through the scrubber.
func TestBearerEchoedInEveryEncodingNeverLogged(t *testing.T) {
	var echoes []string
	for _, e := range echotest.Encodings {
		m := e.Fn(echoSecret)
		if !echotest.HoldsSecret(m, echoSecret, 8, 3) {
			t.Fatalf("%s: the decoders do not find the bearer in %q: the check would prove nothing", e.Name, m)
		}
		echoes = append(echoes, m)
	}
	assertNoEcho(t, echoRefusals(t, echoes), echoes)
}

// TestBearerEchoedInRandomChainsNeverLogged is the property: the relay echoes the bearer
// transformed by a random chain of up to three encodings, inside other text.
func TestBearerEchoedInRandomChainsNeverLogged(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 4))
	n := 150 // each echoed three times: as the error's text, code and reason
	if testing.Short() {
		n = 40
	}
	echoes := make([]string, n)
	for i := range echoes {
		enc, name := echotest.Chain(rng, 3)
		for strings.Count(name, "half") > 1 { // a quarter of the bearer is under 8 bytes
			enc, name = echotest.Chain(rng, 3)
		}
		echoes[i] = strings.Repeat("refused ", i%3) + enc(echoSecret)
	}
	assertNoEcho(t, echoRefusals(t, echoes), echoes)
}
