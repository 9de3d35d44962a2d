package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/api"
	"github.com/postingsvc/posting/database/databasetest"
)

// The answers of an idempotent create (the first, its replay, another body
// with the key, a bad key) validate against the document, which declares
// the Idempotency-Key header with its rules and the replay header.
func TestOpenAPIIdempotentCreate(t *testing.T) {
	t.Parallel()
	doc, router := loadOpenAPI(t)
	h := oaHandler(t, databasetest.NewSQLite(t), nil)
	const js = "application/json"
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	body := `{"title":"t","content":"c","scheduledAt":"` + future + `"}`
	keyed := func(key string) *oaFixture {
		return &oaFixture{doc: doc, router: router, h: h, header: http.Header{api.IdempotencyKeyHeader: {key}}}
	}

	f := keyed("order-1")
	f.exchange(t, "POST", "/api/v1/posts", js, body, "", http.StatusCreated)
	f.exchange(t, "POST", "/api/v1/posts", js, body, "", http.StatusCreated)
	f.exchange(t, "POST", "/api/v1/posts", js, strings.Replace(body, `"c"`, `"other"`, 1), "", http.StatusUnprocessableEntity)
	keyed(strings.Repeat("k", 256)).exchange(t, "POST", "/api/v1/posts", js, body, "", http.StatusBadRequest)

	op := doc.Paths.Value("/api/v1/posts").Post
	param := op.Parameters.GetByInAndName("header", api.IdempotencyKeyHeader)
	require.NotNil(t, param, "the create declares the Idempotency-Key header")
	require.Error(t, param.Schema.Value.VisitJSON(strings.Repeat("k", 256)), "the schema refuses what the API refuses")
	require.Error(t, param.Schema.Value.VisitJSON("tab\there"))
	require.NoError(t, param.Schema.Value.VisitJSON(strings.Repeat("~", 255)))
	require.NotNil(t, op.Responses.Status(http.StatusCreated).Value.Headers[api.IdempotentReplayedHeader])
}
