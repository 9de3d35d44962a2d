package reservation_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/write/reservation"
)

// The key rules, including what HTTP cannot deliver but another caller of
// the service could: a key with a space at either end (MySQL's PAD SPACE
// collations would take "k " for "k").
func TestValidateIdempotencyKey(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", " ", " k", "k ", strings.Repeat("k", 256), "a\tb", "a\x7fb", "clé"} {
		var ve *reservation.ValidationError
		err := reservation.ValidateIdempotencyKey(bad)
		require.True(t, errors.As(err, &ve), "%q: %v", bad, err)
		require.Equal(t, "Idempotency-Key", ve.Field)
	}
	for _, good := range []string{"k", "a b", strings.Repeat("~", 255), `"8e03978e-40d5-43e8-bc93-6894a57f9324"`} {
		require.NoError(t, reservation.ValidateIdempotencyKey(good), "%q", good)
	}
}
