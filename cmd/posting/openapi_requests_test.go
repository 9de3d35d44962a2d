package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/api"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/internal/nodetest"
	"github.com/postingsvc/posting/openapi"
	"github.com/postingsvc/posting/reservation"
)

// TestOpenAPIRequestSchemasRefuseWhatTheServerRefuses sends bodies the
// server answers 400 to, and requires the document's request schema to
// refuse each of them too, so that a client generated from /openapi.json
// catches them before sending. Bodies the server accepts must pass the
// schema, so the schema is not merely refusing everything. What no schema
// can say (scheduledAt in the future, at most 365 days ahead) is in the
// descriptions and the README.
func TestOpenAPIRequestSchemasRefuseWhatTheServerRefuses(t *testing.T) {
	t.Parallel()
	_, router := loadOpenAPI(t)
	db := databasetest.NewSQLite(t)
	h := oaHandler(t, db, nil)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	body := func(title, content, scheduledAt string) string {
		b, err := json.Marshal(map[string]string{"title": title, "content": content, "scheduledAt": scheduledAt})
		require.NoError(t, err)
		return string(b)
	}
	// send answers the request's status from the server and the document's
	// verdict on the request.
	send := func(method, target, payload string) (int, string, error) {
		newReq := func() *http.Request {
			r := httptest.NewRequest(method, target, strings.NewReader(payload))
			r.Header.Set("Content-Type", "application/json")
			return r
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, newReq())
		req := newReq()
		route, params, err := router.FindRoute(req)
		require.NoError(t, err)
		verdict := openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}})
		return rec.Code, rec.Body.String(), verdict
	}

	code, answer, verdict := send("POST", "/api/v1/posts", body("hello", "line one\r\n\tline two", future))
	require.Equal(t, http.StatusCreated, code, answer)
	require.NoError(t, verdict, "a body the server accepts")
	var created api.PostJSON
	require.NoError(t, json.Unmarshal([]byte(answer), &created))
	patch := "/api/v1/posts/" + strconv.FormatInt(created.ID, 10)

	accepted := map[string]string{
		"title of 200 characters":     body(strings.Repeat("é", reservation.MaxTitleLength), "c", future),
		"content of 20000 characters": body("t", strings.Repeat("x", reservation.MaxContentLength), future),
		"title with a BOM, not blank": body("\ufeff", "c", future),
	}
	// ajvCases are the same bodies for ajv, a JavaScript client's
	// validator, with the verdict the server gave.
	type ajvCase struct {
		Name   string          `json:"name"`
		Schema string          `json:"schema"`
		Body   json.RawMessage `json:"body"`
		Accept bool            `json:"-"`
	}
	var ajvCases []ajvCase
	for name, b := range accepted {
		code, answer, verdict := send("POST", "/api/v1/posts", b)
		require.Equal(t, http.StatusCreated, code, "%s: %s", name, answer)
		require.NoError(t, verdict, "%s: the server accepts it", name)
		ajvCases = append(ajvCases, ajvCase{name, "PostCreate", json.RawMessage(b), true})
	}
	var before int64
	require.NoError(t, db.Model(&reservation.Post{}).Count(&before).Error)

	refused := map[string]struct{ method, target, body string }{
		"empty title":                 {"POST", "/api/v1/posts", body("", "c", future)},
		"blank title":                 {"POST", "/api/v1/posts", body(" \u00a0\u3000", "c", future)},
		"title of 201 characters":     {"POST", "/api/v1/posts", body(strings.Repeat("t", reservation.MaxTitleLength+1), "c", future)},
		"title with a line feed":      {"POST", "/api/v1/posts", body("a\nb", "c", future)},
		"title with a tab":            {"POST", "/api/v1/posts", body("a\tb", "c", future)},
		"title with a C1 control":     {"POST", "/api/v1/posts", body("a\u0085b", "c", future)},
		"title with DEL":              {"POST", "/api/v1/posts", body("a\u007fb", "c", future)},
		"content of 20001 characters": {"POST", "/api/v1/posts", body("t", strings.Repeat("x", reservation.MaxContentLength+1), future)},
		"blank content":               {"POST", "/api/v1/posts", body("t", "\r\n\t ", future)},
		"content with NUL":            {"POST", "/api/v1/posts", body("t", "a\u0000b", future)},
		"content with ESC":            {"POST", "/api/v1/posts", body("t", "a\u001b[2Jb", future)},
		"scheduledAt not a date-time": {"POST", "/api/v1/posts", body("t", "c", "tomorrow")},
		"scheduledAt without a zone":  {"POST", "/api/v1/posts", body("t", "c", "2030-01-02T15:04:05")},
		"title a number":              {"POST", "/api/v1/posts", `{"title":1,"content":"c","scheduledAt":"` + future + `"}`},
		"title null":                  {"POST", "/api/v1/posts", `{"title":null,"content":"c","scheduledAt":"` + future + `"}`},
		"no scheduledAt":              {"POST", "/api/v1/posts", `{"title":"t","content":"c"}`},
		"unknown field":               {"POST", "/api/v1/posts", `{"title":"t","content":"c","scheduledAt":"` + future + `","owner":"x"}`},
		"PATCH with no field":         {"PATCH", patch, `{}`},
		"PATCH a blank title":         {"PATCH", patch, `{"title":"  "}`},
		"PATCH content of 20001":      {"PATCH", patch, `{"content":"` + strings.Repeat("x", reservation.MaxContentLength+1) + `"}`},
		"PATCH an unknown field":      {"PATCH", patch, `{"status":"PUBLISHED"}`},
		"post id 0":                   {"GET", "/api/v1/posts/0", ""},
	}
	for name, r := range refused {
		code, answer, verdict := send(r.method, r.target, r.body)
		require.Equal(t, http.StatusBadRequest, code, "%s: %s", name, answer)
		require.Error(t, verdict, "%s: the server answers 400 %s, the document's schema accepts it", name, answer)
		if r.body != "" {
			ajvCases = append(ajvCases, ajvCase{name, map[string]string{"POST": "PostCreate", "PATCH": "PostPatch"}[r.method], json.RawMessage(r.body), false})
		}
	}
	var after int64
	require.NoError(t, db.Model(&reservation.Post{}).Count(&after).Error)
	require.Equal(t, before, after, "a refused request writes nothing")

	// ajv reads the patterns as ECMAScript regular expressions, kin-openapi
	// as Go's: both must reach the server's verdicts.
	t.Run("ajv", func(t *testing.T) {
		dir := t.TempDir()
		docFile, casesFile := filepath.Join(dir, "openapi.json"), filepath.Join(dir, "cases.json")
		require.NoError(t, os.WriteFile(docFile, openapi.Document(), 0o600))
		raw, err := json.Marshal(ajvCases)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(casesFile, raw, 0o600))
		res := nodetest.Run(t, time.Minute, nil, "thirdparty/ajv-requests.js", docFile, casesFile)
		require.Equal(t, 0, res.ExitCode, res.Stderr)
		var verdicts []bool
		require.NoError(t, json.Unmarshal([]byte(res.Stdout), &verdicts), res.Stdout)
		require.Len(t, verdicts, len(ajvCases))
		for i, c := range ajvCases {
			require.Equal(t, c.Accept, verdicts[i], "ajv on %s (%s): the server's verdict is accept=%v", c.Name, c.Schema, c.Accept)
		}
	})
}
