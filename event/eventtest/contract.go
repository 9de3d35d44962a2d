// Package eventtest checks messages against the contract, the AsyncAPI
// document event/asyncapi.json, for tests that read what the service sent.
// Events as the service writes them are built by internal/write/reservation/reservationtest.
package eventtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
)

// asyncAPIURL is where the compiler files the AsyncAPI document; nothing
// is fetched from it.
const asyncAPIURL = "https://postingsvc.invalid/asyncapi.json"

// Message is one message as a consumer receives it: the Kafka key or AMQP
// routing key, the headers and the value (body).
type Message struct {
	Key     string
	Headers map[string]string
	Value   []byte
}

// Validator checks messages against the AsyncAPI document of the event
// package (event/asyncapi.json): the key, the headers and the value against
// the schemas its messages name, and what no schema can say: the headers
// event-id and event-type agree with the value's eventId and eventType, and
// the key is the value's postId in decimal.
type Validator struct {
	key     *jsonschema.Schema
	headers map[event.Type]*jsonschema.Schema
	value   map[event.Type]*jsonschema.Schema
}

// NewValidator compiles the document's schemas. The schemas are the
// AsyncAPI Schema format, a superset of JSON Schema draft 07, and formats
// (date-time) are asserted.
func NewValidator() (*Validator, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(event.AsyncAPIDocument()))
	if err != nil {
		return nil, fmt.Errorf("asyncapi document: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.AssertFormat()
	if err := c.AddResource(asyncAPIURL, doc); err != nil {
		return nil, fmt.Errorf("asyncapi document: %w", err)
	}
	var parsed struct {
		Components struct {
			Messages map[string]struct {
				Name     string `json:"name"`
				Headers  ref    `json:"headers"`
				Payload  ref    `json:"payload"`
				Bindings struct {
					Kafka struct {
						Key ref `json:"key"`
					} `json:"kafka"`
				} `json:"bindings"`
			} `json:"messages"`
		} `json:"components"`
	}
	if err := json.Unmarshal(event.AsyncAPIDocument(), &parsed); err != nil {
		return nil, fmt.Errorf("asyncapi document: %w", err)
	}
	v := &Validator{headers: map[event.Type]*jsonschema.Schema{}, value: map[event.Type]*jsonschema.Schema{}}
	for id, m := range parsed.Components.Messages {
		if m.Bindings.Kafka.Key.Ref == "" {
			continue // the webhook's call: no broker message
		}
		typ := event.Type(m.Name)
		if !typ.Valid() {
			return nil, fmt.Errorf("asyncapi message %s: name %q is no event type", id, m.Name)
		}
		if v.headers[typ], err = compileRef(c, m.Headers); err != nil {
			return nil, fmt.Errorf("asyncapi message %s headers: %w", id, err)
		}
		if v.value[typ], err = compileRef(c, m.Payload); err != nil {
			return nil, fmt.Errorf("asyncapi message %s payload: %w", id, err)
		}
		if v.key, err = compileRef(c, m.Bindings.Kafka.Key); err != nil {
			return nil, fmt.Errorf("asyncapi message %s key: %w", id, err)
		}
	}
	for _, typ := range event.Types {
		if v.value[typ] == nil {
			return nil, fmt.Errorf("asyncapi document: no message for %s", typ)
		}
	}
	return v, nil
}

// ref is a JSON reference within the document.
type ref struct {
	Ref string `json:"$ref"`
}

func compileRef(c *jsonschema.Compiler, r ref) (*jsonschema.Schema, error) {
	if !strings.HasPrefix(r.Ref, "#/") {
		return nil, fmt.Errorf("want a $ref into the document, got %q", r.Ref)
	}
	return c.Compile(asyncAPIURL + r.Ref)
}

// Validate reports every way m breaks the contract, or nil.
func (v *Validator) Validate(m Message) error {
	typ := event.Type(m.Headers[event.HeaderEventType])
	if !typ.Valid() {
		return fmt.Errorf("header %s %q is no event type of the contract", event.HeaderEventType, typ)
	}
	var errs []error
	headers := make(map[string]any, len(m.Headers))
	for k, h := range m.Headers {
		headers[k] = h
	}
	if err := v.headers[typ].Validate(headers); err != nil {
		errs = append(errs, fmt.Errorf("headers: %w", err))
	}
	if err := v.key.Validate(m.Key); err != nil {
		errs = append(errs, fmt.Errorf("key: %w", err))
	}
	value, err := jsonschema.UnmarshalJSON(bytes.NewReader(m.Value))
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("value is not JSON: %w", err))...)
	}
	if err := v.value[typ].Validate(value); err != nil {
		errs = append(errs, fmt.Errorf("value: %w", err))
	}
	obj, _ := value.(map[string]any)
	if id, _ := obj["eventId"].(string); id != m.Headers[event.HeaderEventID] {
		errs = append(errs, fmt.Errorf("value eventId %q differs from header %s %q", id, event.HeaderEventID, m.Headers[event.HeaderEventID]))
	}
	if et, _ := obj["eventType"].(string); et != string(typ) {
		errs = append(errs, fmt.Errorf("value eventType %q differs from header %s %q", et, event.HeaderEventType, typ))
	}
	if n, ok := obj["postId"].(json.Number); !ok || n.String() != m.Key {
		errs = append(errs, fmt.Errorf("key %q is not the value's postId %v", m.Key, obj["postId"]))
	} else if _, err := strconv.ParseInt(n.String(), 10, 64); err != nil {
		errs = append(errs, fmt.Errorf("postId %s: %w", n, err))
	}
	return errors.Join(errs...)
}

// NewTestValidator is NewValidator for a test, which it fails on error.
func NewTestValidator(t testing.TB) *Validator {
	t.Helper()
	v, err := NewValidator()
	require.NoError(t, err, "eventtest: the AsyncAPI document's schemas")
	return v
}

// RequireValid fails t unless every message keeps the contract of the
// AsyncAPI document, naming each one that does not.
func RequireValid(t testing.TB, msgs ...Message) {
	t.Helper()
	if len(msgs) == 0 {
		return
	}
	v := NewTestValidator(t)
	for i, m := range msgs {
		if err := v.Validate(m); err != nil {
			hs := slices.Sorted(maps.Keys(m.Headers))
			require.NoError(t, err, "message %d (key %q, headers %v) breaks the AsyncAPI contract (event/asyncapi.json): value %s", i, m.Key, hs, m.Value)
		}
	}
}
