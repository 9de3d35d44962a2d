// Package webhooktest helps tests that check webhook bodies against the
// webhook's own JSON Schema (webhook.Schema).
package webhooktest

import (
	"bytes"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/publish/webhook"
)

// Schema compiles webhook.Schema with its formats (date-time) asserted.
func Schema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(webhook.Schema()))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(t, c.AddResource("webhook.json", doc))
	s, err := c.Compile("webhook.json")
	require.NoError(t, err)
	return s
}

// RequireValid fails t unless body, a JSON document, validates against
// schema.
func RequireValid(t testing.TB, schema *jsonschema.Schema, body []byte) {
	t.Helper()
	value, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	require.NoError(t, err)
	require.NoError(t, schema.Validate(value), "%s", body)
}
