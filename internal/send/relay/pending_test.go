package relay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/send/outbox"
)

// testRows returns messages with the given ids, at version 1.
func testRows(ids ...int64) []outbox.Message {
	msgs := make([]outbox.Message, len(ids))
	for i, id := range ids {
		msgs[i] = outbox.Message{ID: id, Version: 1}
	}
	return msgs
}

func msgIDs(msgs []outbox.Message) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func TestPendingStartsWithNothingToWrite(t *testing.T) {
	var p pending
	require.False(t, p.needsWrite())
	require.False(t, p.hasNext())
	require.False(t, p.claimLost())
	acked, at := p.takeAcks()
	require.Empty(t, acked)
	require.True(t, at.IsZero())
	require.Empty(t, p.takeToRelease())
	require.Empty(t, p.takeFailures())
	require.Empty(t, p.takeNext().msgs)
	require.Empty(t, p.lostRows(nil))
}

// Deferred acknowledgements are written with the time of the first one
// waiting; taking them leaves none, and nothing to write.
func TestPendingDeferredAcksKeepTheFirstTime(t *testing.T) {
	var p pending
	p.deferAcks(testRows(1, 2), t0)
	p.deferAcks(testRows(3), t0.Add(time.Second))
	require.True(t, p.needsWrite())

	acked, at := p.takeAcks()
	require.Equal(t, []int64{1, 2, 3}, msgIDs(acked))
	require.Equal(t, t0, at)
	require.False(t, p.needsWrite())
	again, at := p.takeAcks()
	require.Empty(t, again)
	require.True(t, at.IsZero())

	p.deferAcks(testRows(4), t0.Add(time.Minute))
	_, at = p.takeAcks()
	require.Equal(t, t0.Add(time.Minute), at, "a new round starts at its own time")
}

// Acknowledgements whose write failed are kept with the time of that
// write, those waiting before included.
func TestPendingKeptAcksTakeTheTimeOfTheFailedWrite(t *testing.T) {
	var p pending
	p.deferAcks(testRows(1), t0)
	p.keepAcks(testRows(2), t0.Add(time.Second))
	acked, at := p.takeAcks()
	require.Equal(t, []int64{1, 2}, msgIDs(acked))
	require.Equal(t, t0.Add(time.Second), at)
}

// Acknowledgements put back after a failed write come back as taken,
// ahead of any kept since, with their time; putting back none changes
// nothing.
func TestPendingPutBackAcksGoFirst(t *testing.T) {
	var p pending
	p.deferAcks(testRows(1, 2), t0)
	acked, at := p.takeAcks()
	p.putBackAcks(nil, t0.Add(time.Hour))
	require.False(t, p.needsWrite())

	p.putBackAcks(acked, at)
	require.True(t, p.needsWrite())
	back, backAt := p.takeAcks()
	require.Equal(t, []int64{1, 2}, msgIDs(back))
	require.Equal(t, t0, backAt)

	p.putBackAcks(back, backAt)
	p.deferAcks(testRows(3), t0.Add(time.Second))
	all, allAt := p.takeAcks()
	require.Equal(t, []int64{1, 2, 3}, msgIDs(all))
	require.Equal(t, t0, allAt)
}

func TestPendingRowsToReleaseAndRejectionsAreTakenInOrder(t *testing.T) {
	var p pending
	p.keepToRelease(testRows(1, 2)...)
	p.keepToRelease(testRows(3)...)
	p.keepFailures(outbox.Failure{Message: testRows(4)[0], Err: "rejected"})
	require.True(t, p.needsWrite())

	require.Equal(t, []int64{1, 2, 3}, msgIDs(p.takeToRelease()))
	require.Empty(t, p.takeToRelease())
	require.True(t, p.needsWrite(), "the rejection is still to write")
	fs := p.takeFailures()
	require.Len(t, fs, 1)
	require.Equal(t, int64(4), fs[0].Message.ID)
	require.Equal(t, "rejected", fs[0].Err)
	require.Empty(t, p.takeFailures())
	require.False(t, p.needsWrite())
}

// A row whose send got no answer becomes a row to release once its
// request is torn down, not before; the others keep waiting.
func TestPendingUnansweredRowIsReleasedOnceSettled(t *testing.T) {
	var p pending
	settled, open := make(chan struct{}), make(chan struct{})
	p.holdUnanswered(testRows(1)[0], settled)
	p.holdUnanswered(testRows(2)[0], open)
	require.True(t, p.needsWrite())

	p.settle(context.Background(), false)
	require.Empty(t, p.takeToRelease(), "nothing is torn down yet")

	close(settled)
	p.settle(context.Background(), false)
	require.Equal(t, []int64{1}, msgIDs(p.takeToRelease()))
	p.settle(context.Background(), false)
	require.Empty(t, p.takeToRelease(), "row 2 is still in the air")
	require.True(t, p.needsWrite(), "row 2 is still held")

	close(open)
	p.settle(context.Background(), false)
	require.Equal(t, []int64{2}, msgIDs(p.takeToRelease()))
	require.False(t, p.needsWrite())
}

// With wait, settle waits for each request to be torn down, until ctx ends;
// what has not settled by then stays held.
func TestPendingSettleWaitsUntilCtxEnds(t *testing.T) {
	var p pending
	settled := make(chan struct{})
	p.holdUnanswered(testRows(1)[0], settled)
	go func() {
		time.Sleep(20 * time.Millisecond)
		close(settled)
	}()
	p.settle(context.Background(), true)
	require.Equal(t, []int64{1}, msgIDs(p.takeToRelease()))

	p.holdUnanswered(testRows(2)[0], make(chan struct{}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	p.settle(ctx, true)
	require.Empty(t, p.takeToRelease())
	require.True(t, p.needsWrite(), "row 2 is still held")
}

// The batch kept for the next poll is taken with the time its claim began
// and its clock, and taken once.
func TestPendingNextBatchKeepsItsClaimTime(t *testing.T) {
	var p pending
	clock := sharedClock{at: t0.Add(time.Hour), since: t0}
	p.setNext(toSend{msgs: testRows(1, 2), began: t0, clock: clock})
	require.True(t, p.hasNext())
	require.True(t, p.needsWrite(), "a flush releases it")

	next := p.takeNext()
	require.Equal(t, []int64{1, 2}, msgIDs(next.msgs))
	require.Equal(t, t0, next.began)
	require.Equal(t, clock, next.clock)
	require.False(t, p.hasNext())
	require.False(t, p.needsWrite())
	require.Empty(t, p.takeNext().msgs)
}

func TestPendingLostClaimIsDueUntilCleared(t *testing.T) {
	var p pending
	p.markClaimLost()
	require.True(t, p.claimLost())
	require.True(t, p.needsWrite())
	p.clearClaimLost()
	require.False(t, p.claimLost())
	require.False(t, p.needsWrite())
}

// The read-back of a lost claim takes for lost only the rows held in none
// of the lists.
func TestPendingLostRowsAreThoseHeldNowhere(t *testing.T) {
	var p pending
	p.deferAcks(testRows(1), t0)
	p.setNext(toSend{msgs: testRows(2), began: t0})
	p.keepToRelease(testRows(3)...)
	p.holdUnanswered(testRows(4)[0], make(chan struct{}))
	p.keepFailures(outbox.Failure{Message: testRows(5)[0]})
	p.leaveUnrecorded(testRows(6)...)

	lost := p.lostRows(testRows(1, 2, 3, 4, 5, 6, 7, 8))
	require.Equal(t, []int64{7, 8}, msgIDs(lost))
}

// An unrecorded send is held while its row is PROCESSING at the version it
// was sent at; once the row has moved on (or is no longer ours), it is
// forgotten for good.
func TestPendingUnrecordedRowIsHeldWhileItsVersionStands(t *testing.T) {
	var p pending
	p.leaveUnrecorded(testRows(1, 2)...)
	require.False(t, p.needsWrite(), "unrecorded rows are stale recovery's")

	require.Empty(t, p.lostRows(testRows(1, 2)), "both still at the version sent")

	moved := outbox.Message{ID: 1, Version: 2}
	require.Equal(t, []int64{1}, msgIDs(p.lostRows([]outbox.Message{moved, testRows(2)[0]})),
		"row 1 was recovered and claimed again: not the unrecorded send")

	require.Equal(t, []int64{1}, msgIDs(p.lostRows(testRows(1, 2))), "row 1 was forgotten")
	require.Equal(t, []int64{1}, msgIDs(p.lostRows(testRows(1))), "row 2 is no longer ours: forgotten")
	require.Equal(t, []int64{1, 2}, msgIDs(p.lostRows(testRows(1, 2))))
}
