package env

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// The bearer holds characters that every escaping changes, so each encoded form differs
// from the raw one.
const scrubbed = `tok-"<&>\/+?=%~END`

func TestScrubberRemovesEveryEchoedForm(t *testing.T) {
	scrub := NewBearer(scrubbed).Scrubber()
	quoted := strconv.Quote(scrubbed)
	jsonHTML, _ := json.Marshal(scrubbed)
	forms := map[string]string{
		"raw":             scrubbed,
		"Go-quoted":       quoted[1 : len(quoted)-1],
		"JSON":            string(jsonHTML[1 : len(jsonHTML)-1]),
		"query-escaped":   url.QueryEscape(scrubbed),
		"path-escaped":    url.PathEscape(scrubbed),
		"base64":          base64.StdEncoding.EncodeToString([]byte(scrubbed)),
		"base64 unpadded": base64.RawStdEncoding.EncodeToString([]byte(scrubbed)),
		"base64 URL":      base64.URLEncoding.EncodeToString([]byte(scrubbed)),
		"upper-cased":     strings.ToUpper(scrubbed),
		"lower-cased":     strings.ToLower(scrubbed),
		"hex":             hex.EncodeToString([]byte(scrubbed)),
		"hex upper-cased": strings.ToUpper(hex.EncodeToString([]byte(scrubbed))),
	}
	for name, form := range forms {
		in := "before " + form + " between " + form + " after"
		got := scrub(in)
		if strings.Contains(got, form[:len(form)*3/4]) || strings.Count(got, redacted) != 2 ||
			!strings.HasPrefix(got, "before [redacted]") || !strings.Contains(got, " between [redacted]") {
			t.Errorf("%s: Scrub(%q) = %q, want both occurrences replaced by the marker", name, in, got)
		}
	}
	// A relay that base64-encodes a whole body puts the bearer at any offset.
	for lead := range 3 {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			prefix := strings.Repeat("x", lead)
			in := enc.EncodeToString([]byte(prefix + scrubbed + `"}`))
			other := enc.EncodeToString([]byte(strings.Repeat("\xff", lead) + scrubbed + "\xff\xff"))
			got := scrub(in)
			if common := commonRun(in, other); len(common) < 8 || strings.Contains(got, common) || !strings.Contains(got, redacted) {
				t.Errorf("lead %d: Scrub(%q) = %q still holds %q, the characters only the bearer determines", lead, in, got, common)
			}
		}
	}
}

// commonRun returns the longest run of characters at the same positions in a and b: in two
// encodings of the bearer between different neighbours, the part only the bearer decides.
func commonRun(a, b string) string {
	best, start := "", -1
	for i := 0; i <= len(a) && i <= len(b); i++ {
		if i < len(a) && i < len(b) && a[i] == b[i] {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 && i-start > len(best) {
			best = a[start:i]
		}
		start = -1
	}
	return best
}

func TestScrubberLeavesOtherTextAlone(t *testing.T) {
	other := base64.StdEncoding.EncodeToString([]byte("another-token-value"))
	for _, text := range []string{"", "relay: remote error \"conflict\"", "tok-", "~END", other} {
		if got := NewBearer(scrubbed).Scrubber()(text); got != text {
			t.Errorf("Scrub(%q) = %q, want it unchanged", text, got)
		}
	}
	if got := (Bearer{}).Scrubber()("anything"); got != "anything" {
		t.Errorf("the zero bearer's scrubber changed text: %q", got)
	}
}
