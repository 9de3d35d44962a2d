package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/inbox"
)

// processBatch runs inbox.ProcessBatch for consumer and returns its outcomes
// and the events it handed to fn, in the order fn saw them.
func processBatch(t *testing.T, db *database.DB, consumer string, evs []inbox.Event, fail error) ([]inbox.Outcome, []string, error) {
	t.Helper()
	var applied []string
	out, err := inbox.ProcessBatch(context.Background(), db.DB, consumer, evs, time.Now(), func(tx *gorm.DB, apply []int) error {
		applied = applied[:0]
		for _, i := range apply {
			applied = append(applied, evs[i].EventID)
		}
		return fail
	})
	return out, applied, err
}

func inboxRows(t *testing.T, db *database.DB, consumer string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Model(&inbox.Record{}).Where("consumer = ?", consumer).Count(&n).Error)
	return n
}

// A batch is recorded once, in one transaction: every event is applied and
// in the inbox; the same batch delivered again applies nothing and writes
// nothing, and neither does a batch that repeats an event inside itself.
func TestProcessBatchRecordsABatchOnce(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		evs := []inbox.Event{postEvent(t, 1, 1), postEvent(t, 2, 0), postEvent(t, 3, 5)}
		out, applied, err := processBatch(t, db, "c", evs, nil)
		require.NoError(t, err)
		require.Equal(t, []inbox.Outcome{inbox.Applied, inbox.Applied, inbox.Applied}, out)
		require.Equal(t, []string{evs[0].EventID, evs[1].EventID, evs[2].EventID}, applied)
		require.EqualValues(t, 3, inboxRows(t, db, "c"))

		out, applied, err = processBatch(t, db, "c", evs, nil)
		require.NoError(t, err)
		require.Equal(t, []inbox.Outcome{inbox.Duplicate, inbox.Duplicate, inbox.Duplicate}, out)
		require.Empty(t, applied, "a redelivered batch applies nothing")
		require.EqualValues(t, 3, inboxRows(t, db, "c"))

		fresh := postEvent(t, 4, 1)
		out, applied, err = processBatch(t, db, "c", []inbox.Event{evs[0], fresh, fresh}, nil)
		require.NoError(t, err)
		require.Equal(t, []inbox.Outcome{inbox.Duplicate, inbox.Applied, inbox.Duplicate}, out)
		require.Equal(t, []string{fresh.EventID}, applied)
		require.EqualValues(t, 4, inboxRows(t, db, "c"))

		// Single events see the batch's records, and the batch's sequences.
		single, err := inbox.Process(context.Background(), db.DB, "c", evs[2], time.Now(), func(*gorm.DB) error { return nil })
		require.NoError(t, err)
		require.Equal(t, inbox.Duplicate, single)
		single, err = inbox.Process(context.Background(), db.DB, "c", postEvent(t, 3, 4), time.Now(), func(*gorm.DB) error { return nil })
		require.NoError(t, err)
		require.Equal(t, inbox.OutOfOrder, single)
	})
}

// When fn fails, nothing of the batch is recorded: the events are applied
// again, all of them, when the batch is delivered again.
func TestProcessBatchRecordsNothingWhenTheHandlerFails(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		evs := []inbox.Event{postEvent(t, 1, 1), postEvent(t, 2, 1)}
		boom := errors.New("boom")
		_, _, err := processBatch(t, db, "c", evs, boom)
		require.ErrorIs(t, err, boom)
		require.Zero(t, inboxRows(t, db, "c"))
		var seqs int64
		require.NoError(t, db.Table("inbox_sequences").Count(&seqs).Error)
		require.Zero(t, seqs)

		out, applied, err := processBatch(t, db, "c", evs, nil)
		require.NoError(t, err)
		require.Equal(t, []inbox.Outcome{inbox.Applied, inbox.Applied}, out)
		require.Len(t, applied, 2)
	})
}

// Two events of one post in one batch are judged in their order against
// the post's last applied sequence, whether the post was seen before or not:
// a newer one after an older one is applied, an older one after a newer one
// (or the same sequence again) is dropped, and the last sequence kept is the
// highest.
func TestProcessBatchKeepsThePostOrderWithinABatch(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		old := postEvent(t, 7, 2) // post 7 seen before the batch
		out, _, err := processBatch(t, db, "c", []inbox.Event{old}, nil)
		require.NoError(t, err)
		require.Equal(t, []inbox.Outcome{inbox.Applied}, out)

		evs := []inbox.Event{
			postEvent(t, 7, 3), postEvent(t, 7, 5), postEvent(t, 7, 4), // seen post: 3, 5 applied, 4 dropped
			postEvent(t, 8, 1), postEvent(t, 8, 2), postEvent(t, 8, 2), // new post: 1, 2 applied, 2 again dropped
			postEvent(t, 7, 1), // older than the stored sequence
		}
		out, applied, err := processBatch(t, db, "c", evs, nil)
		require.NoError(t, err)
		require.Equal(t, []inbox.Outcome{inbox.Applied, inbox.Applied, inbox.OutOfOrder,
			inbox.Applied, inbox.Applied, inbox.OutOfOrder, inbox.OutOfOrder}, out)
		require.Equal(t, []string{evs[0].EventID, evs[1].EventID, evs[3].EventID, evs[4].EventID}, applied)
		require.EqualValues(t, 8, inboxRows(t, db, "c"), "dropped events are recorded too")

		var last []struct {
			PostID   int64
			Sequence int64
		}
		require.NoError(t, db.Table("inbox_sequences").Select("post_id", "sequence").Where("consumer = ?", "c").Order("post_id").Scan(&last).Error)
		require.Equal(t, []struct {
			PostID   int64
			Sequence int64
		}{{7, 5}, {8, 2}}, last)
	})
}
