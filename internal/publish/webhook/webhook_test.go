package webhook_test

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/publish/webhook"
	"github.com/postingsvc/posting/internal/publish/webhook/webhooktest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// The test vector of the Standard Webhooks reference libraries (the same in
// each language's tests): this secret, id, timestamp and payload sign to
// this signature.
func TestSignerMatchesTheStandardWebhooksTestVector(t *testing.T) {
	t.Parallel()
	s, err := webhook.NewSigner("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.NoError(t, err)
	got := s.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", got)
}

// With several secrets the header holds one signature per secret, in the
// order given, each the one that secret alone makes.
func TestSignerSignsWithEachSecret(t *testing.T) {
	t.Parallel()
	a, b := "whsec_"+strings.Repeat("A", 32), "whsec_"+strings.Repeat("Bm9v", 16) // 24 and 48 bytes
	at, body := time.Unix(1700000000, 0), []byte(`{"id":1}`)
	both, err := webhook.NewSigner(a + "  " + b)
	require.NoError(t, err)
	var want []string
	for _, one := range []string{a, b} {
		s, err := webhook.NewSigner(one)
		require.NoError(t, err)
		want = append(want, s.Sign("id-1", at, body))
	}
	require.Equal(t, strings.Join(want, " "), both.Sign("id-1", at, body))
	require.NotEqual(t, want[0], want[1])
}

// A secret that is not whsec_ + standard base64 of 24 to 64 bytes is
// refused with a reason naming its place in the list, never its value.
func TestNewSignerRefusesBadSecrets(t *testing.T) {
	t.Parallel()
	good := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	for secrets, reason := range map[string]string{
		"":                                 "no secret",
		"   ":                              "no secret",
		"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw": "secret 1 of 1 does not begin with whsec_",
		good + " whsec_not*base64!":        "secret 2 of 2 is not whsec_ followed by standard base64",
		"whsec_" + strings.Repeat("QUFB", 5) + "Q": "secret 1 of 1 is not whsec_ followed by standard base64",
		"whsec_" + strings.Repeat("QUFB", 5):       "secret 1 of 1 is a key of 15 bytes; the Standard Webhooks specification wants 24 to 64",
		"whsec_" + strings.Repeat("QUFB", 22):      "secret 1 of 1 is a key of 66 bytes",
	} {
		_, err := webhook.NewSigner(secrets)
		require.ErrorContains(t, err, reason, secrets)
		for _, f := range strings.Fields(secrets) {
			require.NotContains(t, err.Error(), strings.TrimPrefix(f, "whsec_"), "the error shows a secret")
		}
	}
	_, err := webhook.NewSigner("whsec_" + strings.Repeat("QUFB", 8)) // 24 bytes
	require.NoError(t, err)
	_, err = webhook.NewSigner("whsec_" + strings.Repeat("QUFB", 21) + "QQ==") // 64 bytes
	require.NoError(t, err)
}

// The schema names exactly Body's JSON fields, all required, no others
// allowed; a body NewBody makes validates, and one with a field more or a
// status other than PUBLISHED does not.
func TestSchemaDescribesBody(t *testing.T) {
	t.Parallel()
	var doc struct {
		Properties           map[string]json.RawMessage `json:"properties"`
		Required             []string                   `json:"required"`
		AdditionalProperties *bool                      `json:"additionalProperties"`
	}
	require.NoError(t, json.Unmarshal(webhook.Schema(), &doc))
	var fields []string
	typ := reflect.TypeFor[webhook.Body]()
	for i := range typ.NumField() {
		name, opts, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		require.NotEmpty(t, name, "field %s has no JSON name", typ.Field(i).Name)
		require.NotContains(t, opts, "omitempty", "every field is always sent")
		fields = append(fields, name)
	}
	slices.Sort(fields)
	var props []string
	for k := range doc.Properties {
		props = append(props, k)
	}
	slices.Sort(props)
	required := slices.Sorted(slices.Values(doc.Required))
	require.Equal(t, fields, props, "schema properties vs Body's fields")
	require.Equal(t, fields, required, "schema required vs Body's fields")
	require.NotNil(t, doc.AdditionalProperties)
	require.False(t, *doc.AdditionalProperties)

	schema := webhooktest.Schema(t)
	at := time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC)
	body, err := webhook.NewBody(&reservation.Post{ID: 7, Title: "t", Content: "c", Status: reservation.StatusPublished,
		ScheduledAt: at, CreatedAt: at, UpdatedAt: at, PublishedAt: &at, OwnerID: "alice"})
	require.NoError(t, err)
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	webhooktest.RequireValid(t, schema, raw)

	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	m["extra"] = 1
	require.Error(t, schema.Validate(m), "a field the schema does not name")
	delete(m, "extra")
	m["status"] = "WORKING"
	require.Error(t, schema.Validate(m))

	_, err = webhook.NewBody(&reservation.Post{ID: 7, Status: reservation.StatusWorking})
	require.Error(t, err, "only a published post is announced")
}

// The AsyncAPI document describes the webhook call too: its message's
// payload is this package's schema word for word (AsyncAPI's dialect
// carries no $schema), its headers name the call's headers, and an
// operation sends it with POST.
func TestAsyncAPIDescribesTheWebhook(t *testing.T) {
	t.Parallel()
	var doc struct {
		Operations map[string]struct {
			Channel struct {
				Ref string `json:"$ref"`
			} `json:"channel"`
			Bindings struct {
				HTTP struct{ Method string } `json:"http"`
			} `json:"bindings"`
		} `json:"operations"`
		Components struct {
			Schemas  map[string]map[string]any `json:"schemas"`
			Messages map[string]struct {
				Headers struct {
					Ref string `json:"$ref"`
				} `json:"headers"`
				Payload struct {
					Ref string `json:"$ref"`
				} `json:"payload"`
			} `json:"messages"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(event.AsyncAPIDocument(), &doc))
	msg, ok := doc.Components.Messages["publishedPost"]
	require.True(t, ok, "components.messages.publishedPost")
	require.Equal(t, "#/components/schemas/PublishedPost", msg.Payload.Ref)
	require.Equal(t, "#/components/schemas/webhookHeaders", msg.Headers.Ref)
	var own map[string]any
	require.NoError(t, json.Unmarshal(webhook.Schema(), &own))
	delete(own, "$schema")
	require.Equal(t, own, doc.Components.Schemas["PublishedPost"])
	props, _ := doc.Components.Schemas["webhookHeaders"]["properties"].(map[string]any)
	require.Subset(t, slices.Sorted(maps.Keys(props)), []string{"Content-Type", "Idempotency-Key", webhook.HeaderID, webhook.HeaderTimestamp, webhook.HeaderSignature})
	op := doc.Operations["sendPublishedPostWebhook"]
	require.Equal(t, "#/channels/"+event.AsyncAPIChannelWebhook, op.Channel.Ref)
	require.Equal(t, "POST", op.Bindings.HTTP.Method)
}
