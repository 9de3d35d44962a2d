package rabbitmq

import (
	"hash/fnv"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
)

// TestSpreadKeepsEachPostOnOneLaneInOrder checks how a batch is dealt to
// the channels: every message once, each post's messages on one channel in
// the batch's order, and every channel used by a batch of many posts.
func TestSpreadKeepsEachPostOnOneLaneInOrder(t *testing.T) {
	const posts, perPost = 100, 10
	var msgs []event.Message
	for range perPost {
		for p := 1; p <= posts; p++ {
			msgs = append(msgs, event.Message{Key: event.Key(int64(p))})
		}
	}
	for _, n := range []int{1, 2, 4, 16} {
		parts := spread(msgs, n)
		require.Len(t, parts, n)
		seen := make([]int, len(msgs))
		laneOf := map[string]int{}
		for lane, idx := range parts {
			require.NotEmpty(t, idx, "lane %d of %d unused", lane, n)
			for j, i := range idx {
				seen[i]++
				if j > 0 {
					require.Greater(t, i, idx[j-1], "lane %d out of order", lane)
				}
				key := msgs[i].Key
				if l, ok := laneOf[key]; ok {
					require.Equal(t, l, lane, "post %s on two lanes", key)
				}
				laneOf[key] = lane
			}
		}
		for i, c := range seen {
			require.Equal(t, 1, c, "message %d dealt %d times", i, c)
		}
	}
}

func TestFNV32aMatchesTheStandardLibrary(t *testing.T) {
	for _, s := range []string{"", "1", "42", "9223372036854775807", strconv.Itoa(123456)} {
		h := fnv.New32a()
		_, _ = h.Write([]byte(s))
		require.Equal(t, h.Sum32(), fnv32a(s), s)
	}
}
