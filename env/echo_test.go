package env

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/serve-zone/ingress/internal/echotest"
)

// echoBearer holds characters every escaping changes, and is long enough for its halves
// to hold runs of 8 bytes.
const echoBearer = `s3cr3t"<&>\BEARER-value-0x7e-Zq9`

// TestScrubberTakesOutEveryEncoding: text holding the bearer in any of the encodings a
// hostile relay used (issue 25 finding 4) comes out of the scrubber with no run of 8 of the
// bearer's bytes, even after decoding it every way the test knows.
func TestScrubberTakesOutEveryEncoding(t *testing.T) {
	scrub := NewBearer(echoBearer).Scrubber()
	for _, e := range echotest.Encodings {
		text := "refused: " + e.Fn(echoBearer) + " (try again)"
		if !echotest.HoldsSecret(text, echoBearer, 8, 3) {
			t.Fatalf("%s: the test's decoders do not find the bearer in %q: the check proves nothing", e.Name, text)
		}
		if got := scrub(text); echotest.HoldsSecret(got, echoBearer, 8, 3) {
			t.Errorf("%s: scrubbed %q to %q, which still holds the bearer", e.Name, text, got)
		}
	}
}

// TestScrubberTakesOutChainsOfEncodings is the property: the bearer transformed by a random
// chain of up to three encodings, inside other text, is never readable in the scrubber's
// output.
func TestScrubberTakesOutChainsOfEncodings(t *testing.T) {
	scrub := NewBearer(echoBearer).Scrubber()
	rng := rand.New(rand.NewPCG(25, 4))
	found := 0
	for range 1000 {
		enc, name := echotest.Chain(rng, 3)
		text := "x " + enc(echoBearer) + " y"
		if echotest.HoldsSecret(text, echoBearer, 8, 3) {
			found++
		}
		if got := scrub(text); echotest.HoldsSecret(got, echoBearer, 8, 3) {
			t.Fatalf("%s: scrubbed %q to %q, which still holds the bearer", name, text, got)
		}
	}
	if found < 500 {
		t.Fatalf("the test's decoders found the bearer in only %d of 1000 echoes: the check proves little", found)
	}
}

// TestScrubberKeepsOtherText: text that holds no run of the bearer is left readable.
func TestScrubberKeepsOtherText(t *testing.T) {
	scrub := NewBearer(echoBearer).Scrubber()
	for _, s := range []string{
		"registration refused: bearer-refused",
		"response.unexpected is not allowed",
		"aGVsbG8gd29ybGQsIG5vdGhpbmcgc2VjcmV0IGhlcmU=", // base64 of other text
		strings.Repeat("0a:1b:", 20),
	} {
		if got := scrub(s); got != s {
			t.Errorf("scrubbed %q to %q, want it unchanged", s, got)
		}
	}
}
