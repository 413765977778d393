package stats

import "encoding/json"

// ParseQuery is parseQuery with its violations listed, for tests.
func ParseQuery(raw json.RawMessage) (Query, []string) {
	q, e, _ := parseQuery(raw)
	return q, e.List()
}
