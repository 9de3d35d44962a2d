package inbox_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/inbox"
)

// sequencedEvent decodes a reservation event of post 42 whose value carries
// seq (none when 0), with its own event id.
func sequencedEvent(t *testing.T, seq int64) inbox.Event {
	t.Helper()
	return postEvent(t, 42, seq)
}

// postEvent decodes a reservation event of post whose value carries seq
// (none when 0), with its own event id.
func postEvent(t *testing.T, post, seq int64) inbox.Event {
	t.Helper()
	id := uuid.Must(uuid.NewV7()).String()
	value := strings.ReplaceAll(testValue, testID, id)
	value = strings.Replace(value, `"postId":42`, `"postId":`+strconv.FormatInt(post, 10), 1)
	if seq > 0 {
		value = string(event.WithSequence([]byte(value), seq))
	}
	h := testHeaders()
	h[event.HeaderEventID] = id
	ev, err := inbox.Decode([]byte(strconv.FormatInt(post, 10)), h, []byte(value))
	require.NoError(t, err)
	require.Equal(t, seq, ev.Sequence)
	return ev
}

// An event older than one the consumer applied for its post (by sequence)
// is dropped: recorded, its work not done. Events without a sequence are
// applied as before, and another consumer keeps an order of its own.
func TestProcessDropsEventsOlderThanTheLastApplied(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		var applied []int64
		process := func(consumer string, ev inbox.Event) inbox.Outcome {
			t.Helper()
			out, err := inbox.Process(ctx, db.DB, consumer, ev, time.Now(), func(*gorm.DB) error {
				applied = append(applied, ev.Sequence)
				return nil
			})
			require.NoError(t, err)
			return out
		}
		e1, e2, e3 := sequencedEvent(t, 1), sequencedEvent(t, 2), sequencedEvent(t, 3)
		require.Equal(t, inbox.Applied, process("c1", e2))
		require.Equal(t, inbox.OutOfOrder, process("c1", e1), "an older event after a newer one")
		require.Equal(t, inbox.Duplicate, process("c1", e1), "the dropped event is recorded")
		require.Equal(t, inbox.Applied, process("c1", sequencedEvent(t, 0)), "no sequence: no order check")
		require.Equal(t, inbox.Applied, process("c1", e3))
		require.Equal(t, inbox.OutOfOrder, process("c1", sequencedEvent(t, 3)), "the same sequence twice under another id")
		require.Equal(t, inbox.Applied, process("c2", e1), "another consumer's order is its own")
		require.Equal(t, []int64{2, 0, 3, 1}, applied)
	})
}

// The sequence comes from the value or from either binding's header; a
// header that is not a sequence, or disagrees with the value, makes the
// event malformed.
func TestDecodeSequence(t *testing.T) {
	t.Parallel()
	withSeq := string(event.WithSequence([]byte(testValue), 7))
	require.Contains(t, withSeq, `"sequence":7`)
	header := func(name, v string) map[string]string {
		h := testHeaders()
		h[name] = v
		return h
	}
	kafkaName := event.CloudEventsKafkaPrefix + event.CloudEventsSequence
	amqpName := event.CloudEventsAMQPPrefix + event.CloudEventsSequence
	for name, c := range map[string]struct {
		headers map[string]string
		value   string
		want    int64
	}{
		"value only":                {testHeaders(), withSeq, 7},
		"kafka header and value":    {header(kafkaName, event.FormatSequence(7)), withSeq, 7},
		"amqp header only":          {header(amqpName, event.FormatSequence(9)), testValue, 9},
		"none":                      {testHeaders(), testValue, 0},
		"header without zero pad":   {header(kafkaName, "7"), withSeq, 7},
		"header of max int64 width": {header(kafkaName, strconv.FormatInt(1<<62, 10)), testValue, 1 << 62},
	} {
		ev, err := inbox.Decode([]byte("42"), c.headers, []byte(c.value))
		require.NoError(t, err, name)
		require.Equal(t, c.want, ev.Sequence, name)
	}
	for name, c := range map[string]struct {
		headers map[string]string
		value   string
	}{
		"header differs from value": {header(kafkaName, event.FormatSequence(8)), withSeq},
		"header not digits":         {header(amqpName, "-1"), testValue},
		"header zero":               {header(kafkaName, event.FormatSequence(0)), testValue},
		"negative in value":         {testHeaders(), strings.Replace(withSeq, `"sequence":7`, `"sequence":-7`, 1)},
	} {
		_, err := inbox.Decode([]byte("42"), c.headers, []byte(c.value))
		require.ErrorIs(t, err, inbox.ErrMalformed, name)
	}
}
