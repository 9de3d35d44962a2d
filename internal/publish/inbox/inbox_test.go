package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/publish/inbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

const (
	testID    = "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	testValue = `{"eventId":"0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","eventType":"POSTING_RESERVATION_EVENT","postId":42,"occurredAt":"2026-12-03T10:00:00Z","scheduledAt":"2026-12-03T10:05:00Z"}`
)

func testHeaders() map[string]string {
	return map[string]string{event.HeaderEventID: testID, event.HeaderEventType: string(event.ReservationEvent)}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	ev, err := inbox.Decode([]byte("42"), testHeaders(), []byte(testValue))
	require.NoError(t, err)
	require.Equal(t, testID, ev.EventID)
	require.Equal(t, event.ReservationEvent, ev.Type)
	require.EqualValues(t, 42, ev.PostID)
	require.True(t, ev.OccurredAt.Equal(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)))
	var f struct {
		ScheduledAt time.Time `json:"scheduledAt"`
	}
	require.NoError(t, ev.Fields(&f))
	require.True(t, f.ScheduledAt.Equal(time.Date(2026, 12, 3, 10, 5, 0, 0, time.UTC)))

	with := func(k, v string) map[string]string {
		h := testHeaders()
		if v == "" {
			delete(h, k)
		} else {
			h[k] = v
		}
		return h
	}
	for name, c := range map[string]struct {
		key     string
		headers map[string]string
		value   string
	}{
		"no event-id header":   {"42", with(event.HeaderEventID, ""), testValue},
		"no event-type header": {"42", with(event.HeaderEventType, ""), testValue},
		"not JSON":             {"42", testHeaders(), "{"},
		"JSON array":           {"42", testHeaders(), "[1]"},
		"unknown type":         {"42", with(event.HeaderEventType, "OTHER"), `{"eventId":"` + testID + `","eventType":"OTHER","postId":42,"occurredAt":"2026-12-03T10:00:00Z"}`},
		"header type differs":  {"42", with(event.HeaderEventType, string(event.PostingEvent)), testValue},
		"header id differs":    {"42", with(event.HeaderEventID, "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c"), testValue},
		"id not a UUID":        {"42", with(event.HeaderEventID, "other"), strings.Replace(testValue, testID, "other", 1)},
		"id not canonical":     {"42", with(event.HeaderEventID, strings.ToUpper(testID)), strings.Replace(testValue, testID, strings.ToUpper(testID), 1)},
		"key is not postId":    {"43", testHeaders(), testValue},
		"no postId":            {"0", testHeaders(), `{"eventId":"` + testID + `","eventType":"POSTING_RESERVATION_EVENT","occurredAt":"2026-12-03T10:00:00Z"}`},
		"no occurredAt":        {"42", testHeaders(), `{"eventId":"` + testID + `","eventType":"POSTING_RESERVATION_EVENT","postId":42}`},
	} {
		_, err := inbox.Decode([]byte(c.key), c.headers, []byte(c.value))
		require.ErrorIs(t, err, inbox.ErrMalformed, name)
	}
}

// The handler's work and the inbox row commit together: a redelivery runs
// nothing, a failing handler leaves no inbox row, and two deliveries racing
// each other run the work once.
func TestProcessEffectivelyOnce(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		ctx := context.Background()
		require.NoError(t, db.DB.Exec("CREATE TABLE inbox_test_work (event_id VARCHAR(64) NOT NULL)").Error)
		ev, err := inbox.Decode([]byte("42"), testHeaders(), []byte(testValue))
		require.NoError(t, err)
		work := func(tx *gorm.DB) error {
			return tx.Exec("INSERT INTO inbox_test_work (event_id) VALUES (?)", ev.EventID).Error
		}
		count := func() (n int64) {
			require.NoError(t, db.DB.Table("inbox_test_work").Count(&n).Error)
			return n
		}

		_, err = inbox.Process(ctx, db.DB, "c1", ev, time.Now(), func(tx *gorm.DB) error {
			require.NoError(t, work(tx))
			return errors.New("handler failed")
		})
		require.ErrorContains(t, err, "handler failed")
		require.Zero(t, count(), "work of a failed handler committed")
		seen, err := inbox.Processed(ctx, db.DB, "c1", ev.EventID)
		require.NoError(t, err)
		require.False(t, seen)

		var wg sync.WaitGroup
		dups := make([]inbox.Outcome, 4)
		errs := make([]error, 4)
		for i := range dups {
			wg.Go(func() { dups[i], errs[i] = inbox.Process(ctx, db.DB, "c1", ev, time.Now(), work) })
		}
		wg.Wait()
		fresh := 0
		for i := range dups {
			require.NoError(t, errs[i])
			if dups[i] == inbox.Applied {
				fresh++
			}
		}
		require.Equal(t, 1, fresh, "exactly one delivery did the work")
		require.EqualValues(t, 1, count())

		// Another consumer has an inbox of its own.
		outcome, err := inbox.Process(ctx, db.DB, "c2", ev, time.Now(), work)
		require.NoError(t, err)
		require.Equal(t, inbox.Applied, outcome)
		require.EqualValues(t, 2, count())
	})
}

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

// lastSequences returns, per post, the last sequence consumer applied.
func lastSequences(t *testing.T, db *database.DB, consumer string) map[int64]int64 {
	t.Helper()
	var rows []struct {
		PostID   int64
		Sequence int64
	}
	require.NoError(t, db.Table("inbox_sequences").Select("post_id", "sequence").Where("consumer = ?", consumer).Scan(&rows).Error)
	last := make(map[int64]int64, len(rows))
	for _, r := range rows {
		last[r.PostID] = r.Sequence
	}
	return last
}

// requireEverySequence checks that consumer has a last sequence for posts
// posts, each of them seq.
func requireEverySequence(t *testing.T, db *database.DB, consumer string, posts int, seq int64) {
	t.Helper()
	last := lastSequences(t, db, consumer)
	require.Len(t, last, posts)
	for post, s := range last {
		require.Equal(t, seq, s, "post %d", post)
	}
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
		require.Empty(t, lastSequences(t, db, "c"))

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

		require.Equal(t, map[int64]int64{7: 5, 8: 2}, lastSequences(t, db, "c"))
	})
}

// lockConflicts records the statements on db that failed with a lock
// conflict (a deadlock or a lock wait timeout), including those that
// database.Transaction then ran again.
type lockConflicts struct {
	mu   sync.Mutex
	seen []string // the statement and its error
}

func recordLockConflicts(t *testing.T, db *database.DB) *lockConflicts {
	t.Helper()
	c := &lockConflicts{}
	record := func(tx *gorm.DB) {
		if tx.Error != nil && database.IsRetryable(tx.Error) {
			sql := tx.Statement.SQL.String()
			if len(sql) > 60 {
				sql = sql[:60] + "..."
			}
			c.mu.Lock()
			c.seen = append(c.seen, sql+": "+tx.Error.Error())
			c.mu.Unlock()
		}
	}
	cb := db.DB.Callback()
	require.NoError(t, cb.Create().After("gorm:create").Register("test:lock_conflicts", record))
	require.NoError(t, cb.Query().After("gorm:query").Register("test:lock_conflicts", record))
	require.NoError(t, cb.Update().After("gorm:update").Register("test:lock_conflicts", record))
	require.NoError(t, cb.Raw().After("gorm:raw").Register("test:lock_conflicts", record))
	return c
}

// requireNone checks that every worker committed (errs holds each one's
// error) and that no statement lost a deadlock or a lock wait meanwhile.
func (c *lockConflicts) requireNone(t *testing.T, errs []error) {
	t.Helper()
	for w, err := range errs {
		require.NoError(t, err, "worker %d", w)
	}
	require.Empty(t, c.all(), "statements that lost a deadlock or a lock wait")
}

func (c *lockConflicts) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

// Batches of different posts processed at the same time (the partitions of
// a topic handled in parallel), whose posts are new and interleaved in the
// table's key order, record their sequences without a lock conflict: no
// attempt is a deadlock victim, every batch commits, every event is applied
// once and each post keeps its highest sequence.
func TestProcessBatchRecordsConcurrentBatchesOfNewPostsWithoutADeadlock(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		const workers, rounds, postsPerBatch = 12, 6, 25
		conflicts := recordLockConflicts(t, db)
		want := map[int64]int64{} // post -> last sequence
		batches := make([][][]inbox.Event, workers)
		total := 0
		for w := range workers {
			for r := range rounds {
				var evs []inbox.Event
				for k := range postsPerBatch {
					post := int64((r*postsPerBatch+k)*workers + w + 1) // interleaved with the other workers' posts
					evs = append(evs, postEvent(t, post, 1), postEvent(t, post, 2))
					want[post] = 2
					if r > 0 { // a post of the previous round: an update
						prev := int64(((r-1)*postsPerBatch+k)*workers + w + 1)
						evs = append(evs, postEvent(t, prev, int64(2+r)))
						want[prev] = int64(2 + r)
					}
				}
				batches[w] = append(batches[w], evs)
				total += len(evs)
			}
		}

		var mu sync.Mutex
		applied := map[string]int{}
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for _, evs := range batches[w] {
					var ids []string
					out, err := inbox.ProcessBatch(context.Background(), db.DB, "c", evs, time.Now(), func(_ *gorm.DB, apply []int) error {
						ids = ids[:0] // a re-run attempt starts afresh
						for _, i := range apply {
							ids = append(ids, evs[i].EventID)
						}
						return nil
					})
					if err != nil {
						errs[w] = err
						return
					}
					for i, o := range out {
						if o != inbox.Applied {
							errs[w] = fmt.Errorf("event %d of a batch: outcome %d, not applied", i, o)
							return
						}
					}
					mu.Lock()
					for _, id := range ids {
						applied[id]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		conflicts.requireNone(t, errs)
		require.Len(t, applied, total)
		for id, n := range applied {
			require.Equal(t, 1, n, "event %s applied", id)
		}
		require.EqualValues(t, total, inboxRows(t, db, "c"))
		require.Equal(t, want, lastSequences(t, db, "c"))
	})
}

// Batches of the same new posts processed at the same time (a partition
// handed over while its old owner still works on it) serialize on the
// posts' rows: every batch commits, each event is applied or dropped as out
// of order, the newest event of each post is applied, and each post keeps
// its highest sequence.
func TestProcessBatchJudgesConcurrentBatchesOfTheSamePostsInOrder(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		const batches, posts = 4, 20
		evs := make([][]inbox.Event, batches)
		for b := range batches {
			for p := range posts {
				evs[b] = append(evs[b], postEvent(t, int64(posts-p), int64(b+1))) // descending post ids
			}
		}
		outs := make([][]inbox.Outcome, batches)
		errs := make([]error, batches)
		var wg sync.WaitGroup
		for b := range batches {
			wg.Go(func() {
				outs[b], errs[b] = inbox.ProcessBatch(context.Background(), db.DB, "c", evs[b], time.Now(), func(*gorm.DB, []int) error { return nil })
			})
		}
		wg.Wait()
		for b := range batches {
			require.NoError(t, errs[b], "batch %d", b)
			for i, o := range outs[b] {
				require.Contains(t, []inbox.Outcome{inbox.Applied, inbox.OutOfOrder}, o, "batch %d event %d", b, i)
			}
		}
		for i := range posts {
			require.Equal(t, inbox.Applied, outs[batches-1][i], "the newest event of post %d", evs[0][i].PostID)
		}
		require.EqualValues(t, batches*posts, inboxRows(t, db, "c"))
		requireEverySequence(t, db, "c", posts, batches)
	})
}

// Events of different new posts processed one at a time, at the same time
// (partitions handled in parallel), record their sequences without a lock
// conflict, each applied once.
func TestProcessRecordsConcurrentEventsOfNewPostsWithoutADeadlock(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		const workers, postsEach = 8, 40
		conflicts := recordLockConflicts(t, db)
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			evs := make([]inbox.Event, postsEach)
			for k := range evs {
				evs[k] = postEvent(t, int64(k*workers+w+1), 1) // interleaved with the other workers' posts
			}
			wg.Go(func() {
				for _, ev := range evs {
					out, err := inbox.Process(context.Background(), db.DB, "c", ev, time.Now(), func(*gorm.DB) error { return nil })
					if err == nil && out != inbox.Applied {
						err = fmt.Errorf("event of post %d: outcome %d, not applied", ev.PostID, out)
					}
					if err != nil {
						errs[w] = err
						return
					}
				}
			})
		}
		wg.Wait()
		conflicts.requireNone(t, errs)
		require.EqualValues(t, workers*postsEach, inboxRows(t, db, "c"))
		requireEverySequence(t, db, "c", workers*postsEach, 1)
	})
}
