package proxy

import (
	"net/http"
	"testing"
)

// TestHopByHopRuleIsTheFastPaths: net/http's path removes what a Connection value
// names by h1wire's rule (EachConnectionOption: never a framing field or Host), and
// reads tokens by the ASCII fold the fast path's parser uses: "trailer\u017f" (a long
// s, which Unicode folds to s) asks for no trailers.
func TestHopByHopRuleIsTheFastPaths(t *testing.T) {
	h := http.Header{
		"Connection":     {" X-Foo ,\tclose, Content-Length, host, transfer-encoding", "x-bar"},
		"X-Foo":          {"1"},
		"X-Bar":          {"2"},
		"X-Kept":         {"3"},
		"Content-Length": {"5"},
		"Host":           {"a.test"},
		"Te":             {"trailer\u017f"},
	}
	if removeHopByHop(h) {
		t.Error(`TE "trailer\u017f" taken for trailers`)
	}
	for _, k := range []string{"X-Foo", "X-Bar", "Connection", "Te"} {
		if _, ok := h[k]; ok {
			t.Errorf("%s survived", k)
		}
	}
	for _, k := range []string{"X-Kept", "Content-Length", "Host"} {
		if _, ok := h[k]; !ok {
			t.Errorf("%s was removed", k)
		}
	}
	for _, tc := range []struct {
		v    string
		want bool
	}{
		{"trailers", true},
		{"gzip, TRAILERS;q=1", true},
		{"trailer\u017f", false},
		{"Trailers2", false},
	} {
		if got := hasToken(tc.v, "trailers"); got != tc.want {
			t.Errorf("hasToken(%q, trailers) = %v", tc.v, got)
		}
	}
}
