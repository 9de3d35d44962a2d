package openapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/publish/webhook"
	"github.com/postingsvc/posting/openapi"
)

// The routes and the handlers' answers are checked against the document in
// cmd/posting (openapi_test.go), where serve's router is built; this checks
// the document alone.
func TestDocumentIsValidOpenAPI31(t *testing.T) {
	t.Parallel()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openapi.Document())
	require.NoError(t, err)
	require.Equal(t, "3.1.0", doc.OpenAPI)
	require.NoError(t, doc.Validate(loader.Context))
	post := doc.Components.Schemas["Post"].Value
	require.Contains(t, post.Properties, "ownerId")
	require.NotContains(t, post.Required, "ownerId", "optional until every post has one")
	require.Equal(t, "bearer", doc.Components.SecuritySchemes["bearerJWT"].Value.Scheme)
	require.NotNil(t, doc.Paths.Value("/api/v1/posts").Post.Responses.Status(http.StatusUnauthorized))
}

func TestHandlerServesTheDocument(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	openapi.Handler().ServeHTTP(rec, httptest.NewRequest("GET", openapi.Path, nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.JSONEq(t, string(openapi.Document()), rec.Body.String())
}

// The document's webhooks entry describes the worker's call: its body is
// components.schemas.PublishedPost, which is the webhook package's own
// schema (the one the real calls are tested against) word for word, and it
// names the headers the call carries.
func TestWebhooksEntryIsTheWebhookContract(t *testing.T) {
	t.Parallel()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openapi.Document())
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context))
	item := doc.Webhooks["postPublished"]
	require.NotNil(t, item, "webhooks.postPublished")
	require.NotNil(t, item.Post)
	body := item.Post.RequestBody.Value.Content.Get("application/json")
	require.NotNil(t, body)
	require.Equal(t, "#/components/schemas/PublishedPost", body.Schema.Ref)
	var headers []string
	for _, p := range item.Post.Parameters {
		require.Equal(t, "header", p.Value.In)
		headers = append(headers, p.Value.Name)
	}
	require.Subset(t, headers, []string{"Idempotency-Key", webhook.HeaderID, webhook.HeaderTimestamp, webhook.HeaderSignature})

	var raw struct {
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(openapi.Document(), &raw))
	var own map[string]any
	require.NoError(t, json.Unmarshal(webhook.Schema(), &own))
	delete(own, "$schema") // the document's dialect is JSON Schema 2020-12 already
	require.Equal(t, own, raw.Components.Schemas["PublishedPost"])
}
