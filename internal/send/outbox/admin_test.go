package outbox_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/send/relay/relaytest"
)

// rowErrs are the errors of results as strings, "" for none.
func rowErrs(results []outbox.RowResult) []string {
	out := make([]string, len(results))
	for i, r := range results {
		if r.Err != nil {
			out[i] = r.Err.Error()
		}
	}
	return out
}

// A rejected event becomes FAIL, holds the next event of its post, shows in
// the stats and the FAIL list, and after a requeue both are sent, in order.
func TestOpsFailListedRequeuedThenSent(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		rows := o.append(t, t0, 1, 2, 1)
		now := t0.Add(time.Second)
		send := relaytest.NewSender()
		send.Reject(func(m event.Message) error {
			if m.EventID() == rows[0].EventID {
				return errors.New("record too large")
			}
			return nil
		})
		r, err := relay.New(outbox.NewStore(o.db).WithClock(func() time.Time { return now }), send, relay.Config{
			InstanceID: "x", MaxRetries: relay.Retries(0), Now: func() time.Time { return now },
		})
		require.NoError(t, err)

		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Failed)
		require.Equal(t, 1, res.Sent)
		require.Equal(t, outbox.StatusFail, o.row(t, rows[0].ID).Status)

		st, err := outbox.Stats(ctx, o.db.DB, now)
		require.NoError(t, err)
		require.Equal(t, map[outbox.Status]int64{
			outbox.StatusPending: 1, outbox.StatusProcessing: 0, outbox.StatusSent: 1,
			outbox.StatusRetry: 0, outbox.StatusFail: 1,
		}, st.Counts)
		require.EqualValues(t, 1, st.Failed)
		require.EqualValues(t, 0, st.Discarded)
		require.EqualValues(t, 1, st.Blocked)
		require.Equal(t, []outbox.Blocking{{ID: rows[0].ID, EventID: rows[0].EventID, PostID: 1, Blocked: 1}}, st.Blocking)
		require.NotNil(t, st.OldestWaiting)
		require.Equal(t, rows[2].ID, st.OldestWaiting.ID)
		require.Equal(t, now.Sub(rows[2].Created), st.OldestWaiting.Age)

		failed, err := outbox.List(ctx, o.db.DB, outbox.StatusFail, 10)
		require.NoError(t, err)
		require.Len(t, failed, 1)
		f := failed[0]
		require.Equal(t, rows[0].ID, f.ID)
		require.Equal(t, rows[0].EventID, f.EventID)
		require.Equal(t, string(event.PostingEvent), f.EventType)
		require.EqualValues(t, 1, f.PostID)
		require.Equal(t, 1, f.RetryCount)
		require.Equal(t, "record too large", *f.LastError)
		require.True(t, f.Created.Equal(rows[0].Created))
		require.Nil(t, f.DiscardedAt)

		// The held event stays put while its head is FAIL.
		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Claimed)

		send.Reject(nil)
		now = now.Add(time.Second)
		results := outbox.Requeue(ctx, o.db.DB, []int64{rows[0].ID}, now)
		require.Len(t, results, 1)
		require.NoError(t, results[0].Err)
		require.Equal(t, outbox.StatusPending, results[0].Row.Status)
		got := o.row(t, rows[0].ID)
		require.Equal(t, outbox.StatusPending, got.Status)
		require.Zero(t, got.RetryCount)
		require.Equal(t, f.Version+1, got.Version)
		require.True(t, got.NextAttemptAt.Equal(now))

		for range 2 {
			_, err = r.RunOnce(ctx)
			require.NoError(t, err)
		}
		for _, m := range rows {
			require.Equal(t, outbox.StatusSent, o.row(t, m.ID).Status)
		}
		require.Equal(t, []string{rows[1].EventID, rows[0].EventID, rows[2].EventID}, send.SentEventIDs())
	})
}

// Requeue refuses every row that is not FAIL, or is unknown, each with its
// own error, and changes none of them.
func TestOpsRequeueRefusesNonFail(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		rows := o.append(t, t0, 1, 2, 3, 4, 5)
		sent := t0.Add(time.Second)
		o.set(t, rows[1].ID, outbox.StatusSent, &sent)
		o.set(t, rows[2].ID, outbox.StatusRetry, nil)
		o.set(t, rows[3].ID, outbox.StatusProcessing, nil)
		o.set(t, rows[4].ID, outbox.StatusFail, nil)
		before := map[int64]outbox.Message{}
		for _, m := range rows[:4] {
			before[m.ID] = o.row(t, m.ID)
		}

		ids := []int64{rows[0].ID, rows[1].ID, rows[2].ID, rows[3].ID, 999999, rows[4].ID, rows[4].ID}
		results := outbox.Requeue(ctx, o.db.DB, ids, t0.Add(time.Minute))
		require.Len(t, results, 6, "a duplicate id is reported once")
		require.Equal(t, []string{
			"id " + opsItoa(rows[0].ID) + ": status PENDING, only FAIL rows can be requeued",
			"id " + opsItoa(rows[1].ID) + ": status SENT, only FAIL rows can be requeued",
			"id " + opsItoa(rows[2].ID) + ": status RETRY, only FAIL rows can be requeued",
			"id " + opsItoa(rows[3].ID) + ": status PROCESSING, only FAIL rows can be requeued",
			"id 999999: not found",
			"",
		}, rowErrs(results))
		for _, r := range results[:4] {
			require.ErrorIs(t, r.Err, outbox.ErrNotFailed)
		}
		require.ErrorIs(t, results[4].Err, outbox.ErrNotFound)
		for id, m := range before {
			require.Equal(t, m, o.row(t, id), "row %d changed", id)
		}
		require.Equal(t, outbox.StatusPending, o.row(t, rows[4].ID).Status)
	})
}

// Discarding a FAIL head lets the next event of its post be claimed; the
// discarded row stays FAIL in the history and can be neither requeued nor
// discarded again.
func TestOpsDiscardReleasesThePost(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		rows := o.append(t, t0, 7, 7)
		o.set(t, rows[0].ID, outbox.StatusFail, nil)
		claimed, err := o.store.Claim(ctx, "a", 10, t0.Add(time.Second))
		require.NoError(t, err)
		require.Empty(t, claimed, "the FAIL head holds its post")

		at := t0.Add(2 * time.Second)
		results := outbox.Discard(ctx, o.db.DB, []int64{rows[0].ID}, at)
		require.NoError(t, results[0].Err)
		got := o.row(t, rows[0].ID)
		require.Equal(t, outbox.StatusFail, got.Status)
		require.Equal(t, "discarded by an operator at 2026-12-01T12:00:02Z; last error: broker rejected: record too large", *got.LastError)
		entry, err := outbox.Get(ctx, o.db.DB, rows[0].ID)
		require.NoError(t, err)
		require.NotNil(t, entry.DiscardedAt)
		require.True(t, entry.DiscardedAt.Equal(at))

		st, err := outbox.Stats(ctx, o.db.DB, at)
		require.NoError(t, err)
		require.EqualValues(t, 1, st.Counts[outbox.StatusFail])
		require.EqualValues(t, 1, st.Discarded)
		require.EqualValues(t, 0, st.Failed)
		require.EqualValues(t, 0, st.Blocked)
		require.Empty(t, st.Blocking)

		claimed, err = o.store.Claim(ctx, "a", 10, t0.Add(3*time.Second))
		require.NoError(t, err)
		require.Equal(t, []int64{rows[1].ID}, ids(claimed))

		again := outbox.Requeue(ctx, o.db.DB, []int64{rows[0].ID}, at)
		require.ErrorIs(t, again[0].Err, outbox.ErrDiscarded)
		again = outbox.Discard(ctx, o.db.DB, []int64{rows[0].ID, rows[1].ID}, at)
		require.ErrorIs(t, again[0].Err, outbox.ErrDiscarded)
		require.Equal(t, "id "+opsItoa(rows[1].ID)+": status PROCESSING, only FAIL rows can be discarded", again[1].Err.Error())
		require.Equal(t, outbox.StatusProcessing, o.row(t, rows[1].ID).Status)
	})
}

// RequeueAllFailed takes every FAIL row that is not discarded, in batches.
func TestOpsRequeueAllFailed(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		rows := o.append(t, t0, 1, 2, 3, 4, 5, 6)
		for _, m := range rows[:5] {
			o.set(t, m.ID, outbox.StatusFail, nil)
		}
		require.NoError(t, outbox.Discard(ctx, o.db.DB, []int64{rows[4].ID}, t0)[0].Err)

		n, err := outbox.RequeueAllFailed(ctx, o.db.DB, t0.Add(time.Minute), 2)
		require.NoError(t, err)
		require.Equal(t, 4, n)
		for _, m := range rows[:4] {
			got := o.row(t, m.ID)
			require.Equal(t, outbox.StatusPending, got.Status)
			require.Zero(t, got.RetryCount)
		}
		require.Equal(t, outbox.StatusFail, o.row(t, rows[4].ID).Status)
		require.Equal(t, outbox.StatusPending, o.row(t, rows[5].ID).Status)

		n, err = outbox.RequeueAllFailed(ctx, o.db.DB, t0.Add(time.Minute), 0)
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

func TestOpsListAndStatsInputs(t *testing.T) {
	each(t, func(t *testing.T, o *bundle) {
		ctx := context.Background()
		st, err := outbox.Stats(ctx, o.db.DB, t0)
		require.NoError(t, err)
		require.Len(t, st.Counts, 5)
		require.Nil(t, st.OldestWaiting)
		require.NotNil(t, st.Blocking)

		rows := o.append(t, t0, 1, 2, 3)
		o.set(t, rows[0].ID, outbox.StatusRetry, nil)
		st, err = outbox.Stats(ctx, o.db.DB, t0.Add(time.Hour))
		require.NoError(t, err)
		require.Equal(t, rows[0].ID, st.OldestWaiting.ID)
		require.Equal(t, outbox.StatusRetry, st.OldestWaiting.Status)
		require.Equal(t, time.Hour, st.OldestWaiting.Age)
		require.Equal(t, 3600.0, st.OldestWaiting.AgeSeconds)

		pending, err := outbox.List(ctx, o.db.DB, outbox.StatusPending, 1)
		require.NoError(t, err)
		require.Len(t, pending, 1)
		require.Equal(t, rows[1].ID, pending[0].ID)
		pending, err = outbox.List(ctx, o.db.DB, outbox.StatusPending, 0)
		require.NoError(t, err)
		require.Len(t, pending, 2)

		_, err = outbox.List(ctx, o.db.DB, "BOGUS", 10)
		require.ErrorIs(t, err, outbox.ErrInvalidStatus)
		_, err = outbox.List(ctx, o.db.DB, outbox.StatusFail, outbox.MaxListLimit+1)
		require.Error(t, err)
		_, err = outbox.Get(ctx, o.db.DB, 424242)
		require.ErrorIs(t, err, outbox.ErrNotFound)
	})
	s, err := outbox.ParseStatus(" fail ")
	require.NoError(t, err)
	require.Equal(t, outbox.StatusFail, s)
	_, err = outbox.ParseStatus("DONE")
	require.ErrorIs(t, err, outbox.ErrInvalidStatus)
	require.Contains(t, err.Error(), "PENDING, PROCESSING, SENT, RETRY, FAIL")
}

func opsItoa(id int64) string { return strconv.FormatInt(id, 10) }
