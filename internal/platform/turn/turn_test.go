package turn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWithinWaitsForTheHolderOnly(t *testing.T) {
	tn := New()
	release, ok := tn.Within(time.Second)
	require.True(t, ok, "a free turn is taken")
	_, ok = tn.Within(10 * time.Millisecond)
	require.False(t, ok, "a held turn is not taken")
	release()
	release, ok = tn.Within(time.Second)
	require.True(t, ok, "a released turn is taken again")
	release()
}
