package kafka

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
)

// txnTestEventIDs are the event ids of recs, in the order read.
func txnTestEventIDs(recs []kafkatest.Record) []string {
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.Headers[event.HeaderEventID])
	}
	return ids
}

// txnTestProducer is a transactional producer under id on a broker of its
// own.
func txnTestProducer(t *testing.T, id string) (*kafkatest.Broker, *Producer) {
	t.Helper()
	b := kafkatest.Start(t)
	cfg := producerTestConfig(b.Addr)
	cfg.Topic = b.Topic
	cfg.TransactionalID = id
	return b, producerTestNew(t, cfg)
}

// txnTestMessageIDs are the event ids of msgs.
func txnTestMessageIDs(msgs []outbox.Message) []string {
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.EventID)
	}
	return ids
}

// franz-go's EndTransaction has returned nil without sending EndTxn (the
// client found no partition of the transaction marked added), leaving the
// transaction open. Send does not take that for a commit: it reports the
// messages unavailable and closes the client, whose successor's epoch
// aborts the open transaction, and the resend is read once. A commit that
// skips EndTxn here stands in for the client's.
func TestCommitTheClientEndedWithoutTheBrokerIsNotReportedSent(t *testing.T) {
	t.Parallel()
	b, p := txnTestProducer(t, "posting-relay-skip")
	skipped := 0
	p.endTxn = func(ctx context.Context, cl *kgo.Client, how kgo.TransactionEndTry) error {
		if how == kgo.TryCommit && skipped == 0 {
			skipped++
			return nil
		}
		return cl.EndTransaction(ctx, how)
	}
	msgs := producerTestMessages(1, 3, 1, 2, 3)
	for i, err := range p.Send(context.Background(), relay.Envelopes(msgs)) {
		require.ErrorIs(t, err, relay.ErrUnavailable, "message %d: its transaction was never committed", i)
	}
	producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(msgs)))

	recs := b.Records(t, len(msgs), 10*time.Second)
	require.ElementsMatch(t, txnTestMessageIDs(msgs), txnTestEventIDs(recs), "each message read once, from the resend")
}

// A commit whose EndTxn answer comes late, but within the request timeout,
// is a commit: the check on the answer does not take it for one the client
// skipped, and the messages are read once.
func TestCommitAnsweredLateIsReportedSentOnce(t *testing.T) {
	t.Parallel()
	b, p := txnTestProducer(t, "posting-relay-late-commit")
	c := b.Cluster
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.DropControl()
		c.SleepControl(func() { time.Sleep(p.cfg.RequestTimeout / 3) })
		return nil, nil, false
	})
	msgs, next := producerTestMessages(1, 3, 1, 2, 3), producerTestMessages(10, 1, 1)
	producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(msgs)))
	producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(next)))
	recs := b.Records(t, 5, 3*time.Second) // one more than sent: a copy would show
	require.ElementsMatch(t, append(txnTestMessageIDs(msgs), txnTestMessageIDs(next)...), txnTestEventIDs(recs))
}

// franz-go ending an abort without the broker, as it ended a commit: the
// client is out of its transaction while the broker's stays open with the
// records the batch wrote. Stood in for by a broker that answers the
// abort's EndTxn without ending the transaction, an answer the producer
// is made not to count. Resending the rest on that client, as after a
// clean abort, would join the open transaction under the same epoch and
// commit the first copies with the second: the producer closes the client
// instead, whose successor's epoch aborts it, and the relay's resend of
// what was reported unavailable is read once. The refused message stays a
// refusal.
func TestAbortTheClientEndedWithoutTheBrokerIsNotFollowedByACommitUnderItsEpoch(t *testing.T) {
	t.Parallel()
	b, p := txnTestProducer(t, "posting-relay-skip-abort")
	posts := producerTestPostsOnDistinctPartitions(t, 3, b.Partitions)
	stop := b.RejectKey(strconv.FormatInt(posts[0], 10), kerr.InvalidRecord.Code)
	c := b.Cluster
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if req.(*kmsg.EndTxnRequest).Commit {
			c.KeepControl()
			return nil, nil, false
		}
		return req.ResponseKind(), nil, true // the first abort: answered, not ended
	})
	skipped := 0
	p.endTxn = func(ctx context.Context, cl *kgo.Client, how kgo.TransactionEndTry) error {
		err := cl.EndTransaction(ctx, how)
		if how == kgo.TryAbort && skipped == 0 {
			skipped++
			p.mu.Lock()
			p.conns.ends.answered.Add(-1) // as if no answer had been read
			p.mu.Unlock()
		}
		return err
	}
	msgs := producerTestMessages(1, 3, posts...)
	errs := p.Send(context.Background(), relay.Envelopes(msgs))
	require.Equal(t, 1, skipped)
	stop()
	var resend []outbox.Message
	for i, err := range errs {
		if err != nil && errors.Is(err, relay.ErrUnavailable) {
			resend = append(resend, msgs[i])
		}
	}
	if len(resend) > 0 {
		producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(resend))) // the relay's resend
	}
	recs := b.Records(t, 3, 3*time.Second) // one more than sent: a copy would show
	require.ElementsMatch(t, txnTestMessageIDs(msgs[1:]), txnTestEventIDs(recs), "each message read once")
	var rej *ProducerRejectedError
	require.ErrorAs(t, errs[0], &rej, "the refused message stays a refusal")
	require.NotErrorIs(t, errs[0], relay.ErrUnavailable)
}
