// Package sendertest is the conformance suite every relay.Sender runs
// (kafka.Producer and rabbitmq.Sender): what the relay counts on from a
// broker, checked the same way against each, through a Broker adapter the
// broker's own tests write.
//
// It is a package of its own, not part of relaytest, because it drives real
// relays: it imports relay, and relay's internal tests import relaytest, so
// relaytest cannot import relay back.
//
// The cases: one batch keeps each post's order (sender); a rejection and an
// outage are told apart (sender); a stalled broker cannot hold a send past
// its bound (sender); Ping follows the broker (sender); Close during a send
// loses no acknowledged message (sender); several relays deliver every
// event once in post order; a rejected event is retried with a doubling,
// jittered delay, then FAIL; a failing event holds the next of its post; an
// outage spends no retries (relays on every dialect).
package sendertest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

// Sender is a relay.Sender under test, with what every broker's sender
// offers besides.
type Sender interface {
	relay.Sender
	relay.Pinger
	relay.SendBounder
	Close() error
}

// Options are the sender settings a case asks for; zero means the
// adapter's defaults for tests.
type Options struct {
	// SendTimeout bounds one Send; the stall case sets it short.
	SendTimeout time.Duration
}

// Arrived is one message read back from the broker.
type Arrived struct {
	Key       string
	EventID   string
	EventType string
	Value     []byte
	// Stream is where the broker keeps the key's order (Kafka: the
	// partition); a key must never change stream. "" for a single queue.
	Stream string
}

// Broker is a broker under test, fresh for each case (its own topic or
// exchange): the adapter a broker's tests write to run the suite.
type Broker interface {
	// NewSender returns a sender to this broker, closed after the test.
	NewSender(t testing.TB, o Options) Sender
	// Read returns the messages that arrived, in the order of their stream,
	// once at least atLeast came or timeout passed. It fails t on a message
	// that breaks the AsyncAPI contract.
	Read(t testing.TB, atLeast int, timeout time.Duration) []Arrived
	// Reject makes the broker refuse every message of key until stop is
	// called; messages of OtherKeys keep going through. The suite's keys are
	// below 256 while a key is rejected.
	Reject(t testing.TB, key string) (stop func())
	// OtherKeys returns n post ids above key whose messages a rejection of
	// key leaves alone (Kafka rejects a whole partition batch: other
	// partitions).
	OtherKeys(key int64, n int) []int64
	// IsRejection reports whether err is this broker's refusal of a message
	// (of whatever reason), as its sender reports it.
	IsRejection(err error) bool
	// RejectReason is what a message refused through Reject says in its
	// error, and so in its FAIL row's last_error.
	RejectReason() string
	// Rejections is how often the broker refused key, or -1 when it cannot
	// tell.
	Rejections(key string) int
	// Down takes the broker out of reach: connections drop, new ones are
	// refused. Up brings it back with what it had.
	Down(t testing.TB)
	Up(t testing.TB)
	// Stall makes the broker stop answering what senders send (while the
	// connection stays open) until resume.
	Stall(t testing.TB) (resume func())
}

// Run runs every case, each on a broker of its own from newBroker.
func Run(t *testing.T, newBroker func(t *testing.T) Broker) {
	// First and alone (its dialects side by side): four relays on one
	// SQLite file queue on its lock, and under the load of the other cases
	// a claim could wait past its bound for it.
	t.Run("FourRelaysDeliverEveryEventOnceInPostOrder", func(t *testing.T) { fourRelaysDeliverEveryEventOnce(t, newBroker) })
	for _, c := range []struct {
		name string
		run  func(t *testing.T, newBroker func(t *testing.T) Broker)
	}{
		{"OneBatchKeepsEachPostsOrder", oneBatchKeepsEachPostsOrder},
		{"RejectionIsNotAnOutage", rejectionIsNotAnOutage},
		{"OutageIsUnavailableNotRejected", outageIsUnavailableNotRejected},
		{"StalledBrokerCannotHoldASendPastItsBound", stalledBrokerCannotHoldASend},
		{"PingFollowsTheBroker", pingFollowsTheBroker},
		{"CloseDuringASendLosesNoAcknowledgedMessage", closeDuringASend},
		{"RejectionRetriesThenFails", rejectionRetriesThenFails},
		{"FailingEventHoldsTheNextOfItsPost", failingEventHoldsTheNextOfItsPost},
		{"OutageSpendsNoRetries", outageSpendsNoRetries},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newBroker)
		})
	}
}

// Messages builds n outbox rows with ids from firstID, spread over posts
// round robin, posting and reservation events in turn, each a message of
// the contract.
func Messages(t testing.TB, firstID int64, n int, posts ...int64) []outbox.Message {
	t.Helper()
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		typ, fields := event.PostingEvent, any(map[string]any{"action": "CREATED", "status": "RESERVED", "scheduledAt": at.Add(time.Hour)})
		if i%2 == 1 {
			typ, fields = event.ReservationEvent, map[string]any{"scheduledAt": at.Add(time.Hour)}
		}
		m, err := outbox.NewMessage(reservationtest.Outbox(t, typ, posts[i%len(posts)], at, fields))
		require.NoError(t, err)
		m.ID = firstID + int64(i)
		m.Status = outbox.StatusProcessing
		msgs[i] = *m
	}
	return msgs
}

// RequirePostOrder checks that each post's messages arrived in outbox id
// order on one stream, and returns how often each event id arrived. With
// repeats, a resend of an event may follow itself (a sender that got no
// answer sends it again); without, every id must exceed the one before.
func RequirePostOrder(t testing.TB, arrived []Arrived, rows []outbox.Message, repeats bool) map[string]int {
	t.Helper()
	idOf := map[string]int64{}
	for _, m := range rows {
		idOf[m.EventID] = m.ID
	}
	seen := map[string]int{}
	last := map[string]int64{}
	streamOf := map[string]string{}
	for _, a := range arrived {
		id, ok := idOf[a.EventID]
		require.True(t, ok, "unknown event id %s", a.EventID)
		if s, ok := streamOf[a.Key]; ok {
			require.Equal(t, s, a.Stream, "post %s moved streams", a.Key)
		}
		streamOf[a.Key] = a.Stream
		if repeats {
			require.GreaterOrEqual(t, id, last[a.Key], "post %s: event %d after %d", a.Key, id, last[a.Key])
		} else {
			require.Greater(t, id, last[a.Key], "post %s: event %d after %d", a.Key, id, last[a.Key])
		}
		last[a.Key] = id
		seen[a.EventID]++
	}
	return seen
}

func requireAllAcknowledged(t testing.TB, errs []error) {
	t.Helper()
	for i, err := range errs {
		require.NoError(t, err, "message %d", i)
	}
}

func requireAllUnavailable(t testing.TB, b Broker, errs []error) {
	t.Helper()
	for i, err := range errs {
		require.ErrorIs(t, err, relay.ErrUnavailable, "message %d", i)
		require.False(t, b.IsRejection(err), "message %d: an outage is never a rejection: %v", i, err)
	}
}

func eventIDs[T any](xs []T, id func(T) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = id(x)
	}
	return out
}

func arrivedID(a Arrived) string        { return a.EventID }
func messageID(m outbox.Message) string { return m.EventID }

// oneBatchKeepsEachPostsOrder sends one batch of 1,000 events of 40 posts:
// every one arrives once, keyed by its post, as the row's value with its
// sequence, each post's in outbox order on one stream.
func oneBatchKeepsEachPostsOrder(t *testing.T, newBroker func(*testing.T) Broker) {
	b := newBroker(t)
	s := b.NewSender(t, Options{})
	var posts []int64
	for i := range 40 {
		posts = append(posts, int64(1000+i))
	}
	msgs := Messages(t, 1, 1000, posts...)
	requireAllAcknowledged(t, s.Send(context.Background(), relay.Envelopes(msgs)))

	arrived := b.Read(t, len(msgs), 30*time.Second)
	require.Len(t, arrived, len(msgs))
	byEventID := map[string]outbox.Message{}
	for _, m := range msgs {
		byEventID[m.EventID] = m
	}
	for _, a := range arrived {
		m, ok := byEventID[a.EventID]
		require.True(t, ok, "unknown event id %q", a.EventID)
		require.Equal(t, strconv.FormatInt(m.AggregateID, 10), a.Key, "key is the post id")
		require.Equal(t, string(event.WithSequence([]byte(m.Payload), m.ID)), string(a.Value), "the row's value with its sequence")
		require.Equal(t, m.EventType, a.EventType)
	}
	seen := RequirePostOrder(t, arrived, msgs, false)
	require.Len(t, seen, len(msgs), "every message exactly once")
	keys := map[string]bool{}
	for _, a := range arrived {
		keys[a.Key] = true
	}
	require.Len(t, keys, len(posts))
}

// rejectionIsNotAnOutage has the broker refuse one post while others go
// through in the same batches, again and again: only that post's messages
// fail, as rejections (not unavailable), and the sender keeps working,
// for it too once the broker takes it again.
func rejectionIsNotAnOutage(t *testing.T, newBroker func(*testing.T) Broker) {
	b := newBroker(t)
	s := b.NewSender(t, Options{})
	const bad = 1
	posts := append([]int64{bad}, b.OtherKeys(bad, 3)...)
	stop := b.Reject(t, strconv.Itoa(bad))

	var want []string // event ids that must arrive
	nextID := int64(1)
	for round := range 3 { // rejections again and again must not wedge the sender
		msgs := Messages(t, nextID, 40, posts...)
		nextID += int64(len(msgs))
		errs := s.Send(context.Background(), relay.Envelopes(msgs))
		require.Len(t, errs, len(msgs))
		for i, m := range msgs {
			if m.AggregateID != bad {
				require.NoError(t, errs[i], "round %d: post %d is not rejected", round, m.AggregateID)
				want = append(want, m.EventID)
				continue
			}
			require.Error(t, errs[i])
			require.NotErrorIs(t, errs[i], relay.ErrUnavailable, "a rejection is not an outage")
			require.True(t, b.IsRejection(errs[i]), "round %d: %v", round, errs[i])
			require.Contains(t, errs[i].Error(), b.RejectReason())
		}
	}
	if n := b.Rejections(strconv.Itoa(bad)); n >= 0 {
		require.Positive(t, n)
	}

	stop()
	msgs := Messages(t, nextID, 40, posts...)
	requireAllAcknowledged(t, s.Send(context.Background(), relay.Envelopes(msgs)))
	want = append(want, eventIDs(msgs, messageID)...)
	require.ElementsMatch(t, want, eventIDs(b.Read(t, len(want), 30*time.Second), arrivedID))
}

// outageIsUnavailableNotRejected sends while the broker is down, from a
// sender that was connected and from one built during the outage: every
// message is unavailable, answered within the send's bound, and Ping says
// so; once the broker is back both send again, and everything acknowledged
// arrived.
func outageIsUnavailableNotRejected(t *testing.T, newBroker func(*testing.T) Broker) {
	b := newBroker(t)
	s := b.NewSender(t, Options{})
	posts := []int64{1, 2, 3, 4, 5}
	before := Messages(t, 1, 20, posts...)
	requireAllAcknowledged(t, s.Send(context.Background(), relay.Envelopes(before)))

	b.Down(t)
	late := b.NewSender(t, Options{}) // no connection at construction
	for round := range 3 {
		start := time.Now()
		requireAllUnavailable(t, b, s.Send(context.Background(), relay.Envelopes(Messages(t, 100+int64(round)*20, 20, posts...))))
		require.Less(t, time.Since(start), s.SendBound(), "the sender answered within its own bound")
	}
	requireAllUnavailable(t, b, late.Send(context.Background(), relay.Envelopes(Messages(t, 180, 5, 1, 2))))
	require.ErrorIs(t, s.Ping(context.Background()), relay.ErrUnavailable)

	b.Up(t)
	var after []outbox.Message
	for i, sender := range []Sender{s, late} {
		msgs := Messages(t, 200+int64(i)*20, 20, posts...)
		// A sender may wait out its reconnect backoff first: unavailable
		// until then, never rejected.
		require.Eventually(t, func() bool {
			errs := sender.Send(context.Background(), relay.Envelopes(msgs))
			for _, err := range errs {
				if err != nil {
					require.ErrorIs(t, err, relay.ErrUnavailable)
					return false
				}
			}
			return true
		}, 30*time.Second, 50*time.Millisecond, "sender %d sends again", i)
		after = append(after, msgs...)
	}
	require.NoError(t, s.Ping(context.Background()))

	want := eventIDs(append(before, after...), messageID)
	require.ElementsMatch(t, want, eventIDs(b.Read(t, len(want), 30*time.Second), arrivedID))
}

// stalledBrokerCannotHoldASend stalls the broker under a batch larger than
// the socket buffers hold: Send returns within its bound, every message
// unavailable and held as unanswered (it may still land), never rejected;
// once the broker answers again the sender does too.
func stalledBrokerCannotHoldASend(t *testing.T, newBroker func(*testing.T) Broker) {
	b := newBroker(t)
	const sendTimeout = 5 * time.Second
	s := b.NewSender(t, Options{SendTimeout: sendTimeout})
	requireAllAcknowledged(t, s.Send(context.Background(), relay.Envelopes(Messages(t, 1, 2, 1))))

	msgs := Messages(t, 10, 1000, 1, 2, 3, 4, 5, 6, 7, 8)
	for i := range msgs {
		msgs[i].Payload = `{"filler":"` + strings.Repeat("x", 32<<10) + `"}`
	}
	envs := relay.Envelopes(msgs) // built before the clock starts: the bound is Send's
	resume := b.Stall(t)
	start := time.Now()
	done := make(chan []error, 1)
	go func() { done <- s.Send(context.Background(), envs) }()
	select {
	case errs := <-done:
		// The sender's timer ends the send at its bound; handing back the
		// outcomes follows, and under -race on a loaded machine that took
		// 0.4 s. The relay's stale limit keeps a quarter of the bound for
		// it (relay.MinStaleAfter): that is the margin a send may use.
		took := time.Since(start)
		require.Less(t, took, s.SendBound()*5/4, "Send outlasted its SendBound")
		requireAllUnavailable(t, b, errs)
		for i, err := range errs {
			var unanswered *relay.UnansweredError
			require.ErrorAs(t, err, &unanswered, "message %d: cut off by the bound, it may still land", i)
			require.NotNil(t, unanswered.Settled, "message %d", i)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("Send still blocked 30s after its %s SendTimeout while the broker does not answer", sendTimeout)
	}

	resume()
	require.Eventually(t, func() bool {
		for _, err := range s.Send(context.Background(), relay.Envelopes(Messages(t, 2000, 2, 1))) {
			if err != nil {
				require.ErrorIs(t, err, relay.ErrUnavailable)
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "publishing works again once the broker answers")
}

// pingFollowsTheBroker pings before any send, while down and after. A
// sender that holds a connection may take a moment to notice it was cut
// (RabbitMQ's reader sees the end of the socket on its own time); one that
// never connected knows at once.
func pingFollowsTheBroker(t *testing.T, newBroker func(*testing.T) Broker) {
	b := newBroker(t)
	s := b.NewSender(t, Options{})
	require.NoError(t, s.Ping(context.Background()), "the broker answers before any send")
	b.Down(t)
	require.ErrorIs(t, b.NewSender(t, Options{}).Ping(context.Background()), relay.ErrUnavailable)
	require.Eventually(t, func() bool { return errors.Is(s.Ping(context.Background()), relay.ErrUnavailable) },
		10*time.Second, 20*time.Millisecond, "Ping tells the broker is down")
	b.Up(t)
	require.Eventually(t, func() bool { return s.Ping(context.Background()) == nil }, 30*time.Second, 50*time.Millisecond,
		"Ping answers again once the broker is back")
}

// closeDuringASend closes the sender while a large send runs: Close
// returns without error (twice), the send gives every message an outcome,
// acknowledged or unavailable, and every acknowledged message arrived;
// later sends are unavailable, and an empty send has no outcomes.
func closeDuringASend(t *testing.T, newBroker func(*testing.T) Broker) {
	b := newBroker(t)
	s := b.NewSender(t, Options{})
	first := Messages(t, 1, 2, 1)
	requireAllAcknowledged(t, s.Send(context.Background(), relay.Envelopes(first)))

	msgs := Messages(t, 10, 1000, 1, 2, 3, 4, 5, 6, 7, 8)
	done := make(chan []error, 1)
	go func() { done <- s.Send(context.Background(), relay.Envelopes(msgs)) }()
	require.NoError(t, s.Close())
	errs := <-done
	require.Len(t, errs, len(msgs))
	acked := eventIDs(first, messageID)
	for i, err := range errs {
		if err == nil {
			acked = append(acked, msgs[i].EventID)
			continue
		}
		require.ErrorIs(t, err, relay.ErrUnavailable, "message %d", i)
		require.False(t, b.IsRejection(err), "message %d", i)
	}
	require.NoError(t, s.Close(), "Close twice")
	requireAllUnavailable(t, b, s.Send(context.Background(), relay.Envelopes(Messages(t, 2000, 2, 1))))
	require.Empty(t, s.Send(context.Background(), nil))
	require.Subset(t, eventIDs(b.Read(t, len(acked), 30*time.Second), arrivedID), acked, "every acknowledged message arrived")
	t.Logf("%d of %d acknowledged before the close", len(acked)-len(first), len(msgs))
}

// keysBelow fails t unless every key is one a Reject may rely on.
func keysBelow(t testing.TB, keys []int64) {
	t.Helper()
	for _, k := range keys {
		require.Less(t, k, int64(256), fmt.Sprintf("key %d: the suite's keys stay below 256 while one is rejected", k))
	}
}
