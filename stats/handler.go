package stats

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
)

// HandlerPath is the admin path Handler serves.
const HandlerPath = "/v1/traffic-statistics"

// DefaultHandlerLimit is the page size of a query to Handler that names no limit. The
// relay's queries always name one (the contract requires it); a person with curl need not.
const DefaultHandlerLimit = 100

// Handler serves GET HandlerPath?fromDayUtc=…&toDayUtc=…[&limit=…][&cursor=…] on the admin
// listener with the contract's response body (application/json); limit defaults to
// DefaultHandlerLimit. An invalid query is
// 400 with {"errors":[…]} under the same rules as the wire request: limit must be an
// integer, and an unknown or repeated parameter is an error too. Other methods get 405,
// other paths 404. Safe for concurrent use.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(r.serveHTTP)
}

func (r *Registry) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != HandlerPath {
		http.NotFound(w, req)
		return
	}
	if req.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := r.QueryRaw(queryBody(req))
	var qe *QueryError
	switch {
	case errors.As(err, &qe):
		writeJSON(w, http.StatusBadRequest, map[string][]string{"errors": qe.Violations})
	case err != nil:
		http.Error(w, "internal error", http.StatusInternalServerError)
	default:
		writeJSON(w, http.StatusOK, json.RawMessage(body))
	}
}

// queryBody turns the query string into the wire request body, so that both are judged
// by one validator: limit becomes a number when it reads as an integer (a string
// otherwise, which the validator refuses), every other parameter a string, and a
// repeated parameter an array, which no key accepts.
func queryBody(req *http.Request) json.RawMessage {
	values := req.URL.Query()
	m := make(map[string]any, len(values))
	for k, vs := range values {
		switch {
		case len(vs) != 1:
			m[k] = vs
		case k == "limit":
			if n, err := strconv.ParseInt(vs[0], 10, 64); err == nil {
				m[k] = n
			} else {
				m[k] = vs[0]
			}
		default:
			m[k] = vs[0]
		}
	}
	if _, ok := values["limit"]; !ok {
		m["limit"] = DefaultHandlerLimit
	}
	b, _ := json.Marshal(m)
	return b
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
