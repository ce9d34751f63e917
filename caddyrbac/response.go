package caddyrbac

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// errorBody is the JSON body of a 401 or 403:
// {"error":"forbidden","reason":"missing role"}.
type errorBody struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

// writeJSONError writes the documented error answer. The reason must be
// client-safe (it never holds a token or a claim value).
func writeJSONError(w http.ResponseWriter, status int, code, reason string) {
	body, err := json.Marshal(errorBody{Error: code, Reason: reason})
	if err != nil { // cannot happen for two strings
		body = []byte(`{"error":"` + code + `"}`)
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
