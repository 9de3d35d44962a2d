package openapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

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
