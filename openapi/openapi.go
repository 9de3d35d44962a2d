// Package openapi holds the OpenAPI 3.1 document of the service's HTTP API
// and serves it at GET /openapi.json.
package openapi

import (
	_ "embed"
	"net/http"
	"strconv"
)

// Path is where Handler is mounted.
const Path = "/openapi.json"

//go:embed openapi.json
var document []byte

// Document returns a copy of the OpenAPI document, JSON.
func Document() []byte { return append([]byte(nil), document...) }

// Handler serves the document. It is public, like the API's shape: it
// holds no data, and the admin routes it lists answer 401 without the token.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(document)))
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(document)
	})
}
