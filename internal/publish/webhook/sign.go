package webhook

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The headers of a signed call (Standard Webhooks specification).
const (
	// HeaderID is the message's id: the same on every attempt at one
	// publication (the worker's Idempotency-Key).
	HeaderID = "webhook-id"
	// HeaderTimestamp is the attempt's time in Unix seconds.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature is "v1,<base64 HMAC-SHA256 of id.timestamp.body>", one
	// per secret, space-separated.
	HeaderSignature = "webhook-signature"
)

// SecretPrefix begins every secret; the rest is the key in base64.
const SecretPrefix = "whsec_"

// The key lengths the specification allows, in bytes.
const (
	MinSecretBytes = 24
	MaxSecretBytes = 64
)

// Signer signs calls with one or more secrets. It is safe for concurrent use.
type Signer struct {
	keys []*standardwebhooks.Webhook
}

// NewSigner reads secrets, a space-separated list of "whsec_" + base64 keys
// of 24 to 64 bytes (several while a receiver moves from one to the next),
// and returns a Signer that signs with each. Its error names the secret by
// its place in the list, never its value.
func NewSigner(secrets string) (*Signer, error) {
	fields := strings.Fields(secrets)
	if len(fields) == 0 {
		return nil, fmt.Errorf("no secret: want %s followed by a base64 key of %d to %d bytes", SecretPrefix, MinSecretBytes, MaxSecretBytes)
	}
	s := &Signer{}
	for i, f := range fields {
		which := fmt.Sprintf("secret %d of %d", i+1, len(fields))
		rest, ok := strings.CutPrefix(f, SecretPrefix)
		if !ok {
			return nil, fmt.Errorf("%s does not begin with %s", which, SecretPrefix)
		}
		key, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return nil, fmt.Errorf("%s is not %s followed by standard base64 (with padding)", which, SecretPrefix)
		}
		if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
			return nil, fmt.Errorf("%s is a key of %d bytes; the Standard Webhooks specification wants %d to %d",
				which, len(key), MinSecretBytes, MaxSecretBytes)
		}
		wh, err := standardwebhooks.NewWebhookRaw(key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", which, err)
		}
		s.keys = append(s.keys, wh)
	}
	return s, nil
}

// Sign returns the webhook-signature of a call: "v1,<signature>" for each
// secret, space-separated, over id, at (in whole seconds) and body.
func (s *Signer) Sign(id string, at time.Time, body []byte) string {
	sigs := make([]string, 0, len(s.keys))
	for _, k := range s.keys {
		// The library's Sign returns no error for an HMAC key.
		sig, _ := k.Sign(id, at, body)
		sigs = append(sigs, sig)
	}
	return strings.Join(sigs, " ")
}
