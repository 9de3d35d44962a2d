package kafka

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka/endoffset"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
)

// Two producers with one transactional id (two instances given one
// POSTING_INSTANCE_ID, or a restart that overlaps the old process) fence
// each other. A send fenced that way says nothing about its messages: it
// must be unavailable (the relay retries it without spending an attempt),
// never a rejection, which spends one of the message's attempts and, after
// MaxRetries, ends the row FAIL.
func TestTransactionalProducersSharingAnIDReportFencingAsUnavailable(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	cfg := producerTestConfig(b.Addr)
	cfg.Topic = b.Topic
	cfg.TransactionalID = "posting-relay-shared"
	var logs syncBuffer
	a, err := NewProducer(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	c := producerTestNew(t, cfg)
	nextID := int64(1)
	acked := 0
	for round := range 6 {
		for name, p := range map[string]*Producer{"a": a, "c": c} {
			msgs := producerTestMessages(nextID, 4, 1, 2, 3, 4)
			nextID += int64(len(msgs))
			for i, err := range p.Send(context.Background(), relay.Envelopes(msgs)) {
				if err == nil {
					acked++
					continue
				}
				var rej *ProducerRejectedError
				require.False(t, errors.As(err, &rej), "round %d, producer %s, message %d: fencing reported as a rejection: %v", round, name, i, err)
				require.ErrorIs(t, err, relay.ErrUnavailable, "round %d, producer %s, message %d", round, name, i)
			}
		}
	}
	require.Positive(t, acked)
	require.Len(t, b.Records(t, acked, 10*time.Second), acked, "every acknowledged message committed, no other")
	require.Contains(t, logs.String(), "kafka producer fenced", "the operator is told (docs/brokers.md)")
}

// syncBuffer is a bytes.Buffer for a logger that may write from another
// goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Two producers with one transactional id sending at once, over and over:
// each fences the other's open transactions. Every message reported
// acknowledged is committed exactly once, no fencing is reported as a
// rejection, and both keep delivering.
func TestTransactionalProducersSharingAnIDConcurrently(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	cfg := producerTestConfig(b.Addr)
	cfg.Topic = b.Topic
	cfg.TransactionalID = "posting-relay-shared"
	type result struct {
		acked, failed []string
	}
	results := make([]result, 2)
	var wg sync.WaitGroup
	deadline := time.Now().Add(4 * time.Second)
	for k := range 2 {
		p := producerTestNew(t, cfg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := int64(1 + k*1_000_000)
			for time.Now().Before(deadline) {
				msgs := producerTestMessages(next, 4, 1, 2, 3, 4)
				next += int64(len(msgs))
				for i, err := range p.Send(context.Background(), relay.Envelopes(msgs)) {
					if err == nil {
						results[k].acked = append(results[k].acked, msgs[i].EventID)
						continue
					}
					var rej *ProducerRejectedError
					if errors.As(err, &rej) || !errors.Is(err, relay.ErrUnavailable) {
						t.Errorf("producer %d, message %d: %v", k, i, err)
					}
					results[k].failed = append(results[k].failed, msgs[i].EventID)
				}
			}
		}()
	}
	wg.Wait()
	var acked []string
	for k, r := range results {
		t.Logf("producer %d: %d acknowledged, %d failed", k, len(r.acked), len(r.failed))
		require.NotEmpty(t, r.acked, "producer %d delivered nothing", k)
		acked = append(acked, r.acked...)
	}
	recs := b.Records(t, len(acked), 20*time.Second)
	got := map[string]int{}
	for _, r := range recs {
		got[r.Headers[event.HeaderEventID]]++
	}
	for _, id := range acked {
		require.Equal(t, 1, got[id], "acknowledged %s committed once", id)
	}
	extra := len(recs) - len(acked)
	t.Logf("%d committed records, %d of them reported failed", len(recs), extra)
}

// The transactional path's refusals: an oversized message and broker codes
// fail their own messages only; the rest of the batch is committed.
func TestTransactionalProducerRefusesOversizedMessageAlone(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	cfg := producerTestConfig(b.Addr)
	cfg.TransactionalID = "oversized"
	cfg.MaxMessageBytes = 1024
	p := producerTestNew(t, cfg)
	msgs := producerTestMessages(1, 3, 1, 2, 3)
	msgs[1].Payload = `{"big":"` + strings.Repeat("x", 2000) + `"}`

	errs := p.Send(context.Background(), relay.Envelopes(msgs))
	require.NoError(t, errs[0])
	require.NoError(t, errs[2])
	var rej *ProducerRejectedError
	require.ErrorAs(t, errs[1], &rej)
	require.NotErrorIs(t, errs[1], relay.ErrUnavailable)
	require.Len(t, b.Records(t, 2, 10*time.Second), 2)
	producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(producerTestMessages(10, 3, 1, 2, 3))))
	require.Len(t, b.Records(t, 5, 10*time.Second), 5)
}

// One partition whose leader keeps answering NOT_ENOUGH_REPLICAS (its ISR
// below min.insync.replicas): only that partition's messages fail, as
// unavailable and at once, and the others of the batch are delivered, with
// either producer. The transactional one held the whole batch 15 s (10 s
// send timeout here: every message unanswered) and then failed it all.
func TestProducerSickPartitionFailsOnlyItsOwnMessages(t *testing.T) {
	t.Parallel()
	producerTestEach(t, func(t *testing.T, b *kafkatest.Broker, cfg ProducerConfig, transactional bool) {
		p := producerTestNew(t, cfg)
		posts := producerTestPostsOnDistinctPartitions(t, 4, b.Partitions)
		stop := b.RejectKey(strconv.FormatInt(posts[0], 10), kerr.NotEnoughReplicas.Code)
		acked := 0
		for round := range 2 {
			msgs := producerTestMessages(int64(1+10*round), 8, posts...)
			start := time.Now()
			errs := p.Send(context.Background(), relay.Envelopes(msgs))
			took := time.Since(start)
			for i, m := range msgs {
				if m.AggregateID != posts[0] {
					require.NoError(t, errs[i], "round %d, message %d: a healthy partition", round, i)
					acked++
					continue
				}
				require.ErrorIs(t, errs[i], relay.ErrUnavailable, "round %d, message %d", round, i)
				var unanswered *relay.UnansweredError
				require.False(t, errors.As(errs[i], &unanswered), "round %d, message %d: answered, not held: %v", round, i, errs[i])
			}
			require.Less(t, took, 3*time.Second, "round %d", round)
		}
		stop()
		require.Len(t, b.Records(t, acked, 10*time.Second), acked, "every acknowledged message committed once, no other")
	})
}

// A commit whose answer does not come (here: it comes after the request
// timeout) has an unknown outcome: Send reports every message unavailable
// and the relay releases the rows at once, but the commit still lands. The
// relay's resend is then a second copy, with the same event-id, after the
// first on its partition (the open transaction's records come first, and a
// read_committed consumer reads nothing past them until it ends): a
// duplicate in order, never a late copy after a later event. docs/brokers.md
// said "a send that got no answer in time is never committed" without
// that exception.
func TestTransactionalCommitWithoutAnswerCanLandBeforeTheResend(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	cfg := producerTestConfig(b.Addr)
	cfg.TransactionalID = "slow-commit"
	cfg.SendTimeout, cfg.DialTimeout, cfg.RequestTimeout, cfg.AckTimeout = 2*time.Second, 100*time.Millisecond, 800*time.Millisecond, 100*time.Millisecond
	p := producerTestNew(t, cfg)
	producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(producerTestMessages(1, 2, 1, 2))))

	c := b.Cluster
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.DropControl() // this commit only
		c.SleepControl(func() { time.Sleep(cfg.RequestTimeout + 200*time.Millisecond) })
		return nil, nil, false // then the cluster commits it
	})
	msgs := producerTestMessages(10, 2, 1, 2)
	for i, err := range p.Send(context.Background(), relay.Envelopes(msgs)) {
		require.ErrorIs(t, err, relay.ErrUnavailable, "message %d", i)
		var unanswered *relay.UnansweredError
		if errors.As(err, &unanswered) {
			<-unanswered.Settled
		}
	}
	time.Sleep(time.Second)                                                                                        // the commit lands
	producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(msgs)))                              // the relay's resend
	producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(producerTestMessages(20, 2, 1, 2)))) // the posts' next events

	recs := b.Records(t, 8, 10*time.Second)
	var order []string
	for _, r := range recs {
		if r.Key == "1" {
			order = append(order, r.Headers[event.HeaderEventID])
		}
	}
	first, next := producerTestMessages(1, 1, 1)[0].EventID, producerTestMessages(20, 1, 1)[0].EventID
	require.Equal(t, []string{first, msgs[0].EventID, msgs[0].EventID, next}, order,
		"reported unavailable, committed anyway: a copy, in order")
}

// The same with the resend and the post's next event sent by another
// instance (another transactional id) while the first commit is still
// pending at the broker: the rows were released at once, so nothing waits
// for the new epoch the comment in transaction() counts on. Order still
// holds: the pending transaction's records sit before the others' on the
// partition, and read_committed reads stop at it until it ends.
func TestTransactionalPendingCommitKeepsOrderAgainstAnotherInstance(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	cfg := producerTestConfig(b.Addr)
	cfg.TransactionalID = "slow-commit-a"
	cfg.SendTimeout, cfg.DialTimeout, cfg.RequestTimeout, cfg.AckTimeout = 2*time.Second, 100*time.Millisecond, 800*time.Millisecond, 100*time.Millisecond
	a := producerTestNew(t, cfg)
	cfg.TransactionalID = "slow-commit-b"
	other := producerTestNew(t, cfg)
	producerTestRequireAllNil(t, a.Send(context.Background(), relay.Envelopes(producerTestMessages(1, 1, 1))))
	producerTestRequireAllNil(t, other.Send(context.Background(), relay.Envelopes(producerTestMessages(2, 1, 2))))

	c := b.Cluster
	wake := time.Now().Add(cfg.RequestTimeout + 700*time.Millisecond)
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if req.(*kmsg.EndTxnRequest).TransactionalID != "slow-commit-a" {
			c.KeepControl()
			return nil, nil, false
		}
		c.DropControl()
		c.SleepControl(func() { time.Sleep(time.Until(wake)) })
		return nil, nil, false // then the cluster commits it
	})
	msgs := producerTestMessages(10, 1, 1)
	for i, err := range a.Send(context.Background(), relay.Envelopes(msgs)) {
		require.ErrorIs(t, err, relay.ErrUnavailable, "message %d", i)
		var unanswered *relay.UnansweredError
		require.False(t, errors.As(err, &unanswered), "released at once: %v", err)
	}
	producerTestRequireAllNil(t, other.Send(context.Background(), relay.Envelopes(msgs)))                           // another relay's resend
	producerTestRequireAllNil(t, other.Send(context.Background(), relay.Envelopes(producerTestMessages(20, 1, 1)))) // and the post's next event
	require.True(t, time.Now().Before(wake), "the resend and the next event went before the commit")
	time.Sleep(time.Until(wake))

	recs := b.Records(t, 5, 10*time.Second)
	var order []string
	for _, r := range recs {
		if r.Key == "1" {
			order = append(order, r.Headers[event.HeaderEventID])
		}
	}
	first, next := producerTestMessages(1, 1, 1)[0].EventID, producerTestMessages(20, 1, 1)[0].EventID
	require.Equal(t, []string{first, msgs[0].EventID, msgs[0].EventID, next}, order)
}

// docs/brokers.md said: "Each transaction ends with a commit marker, which
// takes an offset. So an idle group's lag shows up to one per partition."
// An aborted transaction (a send whose commit got no answer, a relay that
// died mid-send) leaves its records and its abort marker at the end of the
// partition: the worker reads none of them and commits no offset past
// them, so the idle lag counts every one of them (7 here, not 1), until a
// later committed record on that partition is handled.
func TestIdleLagAfterAnAbortedTransactionCountsItsRecords(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t, kafkatest.WithTopic("posting-events", 1))
	cfg := producerTestConfig(b.Addr)
	cfg.Topic = b.Topic
	cfg.TransactionalID = "lag"
	cfg.SendTimeout, cfg.DialTimeout, cfg.RequestTimeout, cfg.AckTimeout = 2*time.Second, 100*time.Millisecond, 800*time.Millisecond, 100*time.Millisecond
	p := producerTestNew(t, cfg)
	producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(producerTestMessages(1, 2, 1))))

	r, err := NewLagReader(ConsumerConfig{Brokers: []string{b.Addr}, Topic: b.Topic, GroupID: "lag-txn"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	h := &consumerTestHandler{}
	c := consumerTestStart(t, b.Addr, "lag-txn", h, nil)
	require.Eventually(t, func() bool { return len(h.snapshot()) == 2 }, 20*time.Second, 20*time.Millisecond)
	c.Stop()
	require.EqualValues(t, 1, lagSum(t, r), "the commit marker")

	// The commit gets no answer and never lands: the broker aborts the
	// transaction at its timeout.
	bc := b.Cluster
	var answer atomic.Bool
	bc.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		bc.KeepControl()
		return nil, nil, !answer.Load()
	})
	for _, err := range p.Send(context.Background(), relay.Envelopes(producerTestMessages(10, 5, 1))) {
		require.ErrorIs(t, err, relay.ErrUnavailable)
	}
	time.Sleep(cfg.TransactionTimeout() + 2*time.Second)
	require.Len(t, b.Records(t, 2, 10*time.Second), 2, "the aborted transaction is not read")

	h2 := &consumerTestHandler{}
	c = consumerTestStart(t, b.Addr, "lag-txn", h2, nil)
	time.Sleep(2 * time.Second)
	c.Stop()
	require.Empty(t, h2.snapshot())
	require.EqualValues(t, 7, lagSum(t, r), "idle: the aborted records and both markers")

	answer.Store(true)
	producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(producerTestMessages(20, 1, 1))))
	h3 := &consumerTestHandler{}
	c = consumerTestStart(t, b.Addr, "lag-txn", h3, nil)
	require.Eventually(t, func() bool { return len(h3.snapshot()) == 1 }, 20*time.Second, 20*time.Millisecond)
	c.Stop()
	require.EqualValues(t, 1, lagSum(t, r), "a committed record handled after them: the commit marker again")
}

// A relay that died mid-send leaves its transaction open, and
// read_committed readers of its partitions wait. A restart with the same
// transactional id ends it when the new producer first sends (it connects
// lazily), not when it starts: docs/brokers.md said "at once".
func TestRestartWithTheSameIDAbortsTheOpenTransactionAtItsFirstSend(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	restarted, open := txnTestDeadRun(t, b, "posting-relay-x")
	require.NoError(t, restarted.Ping(context.Background()))
	time.Sleep(time.Second)
	require.True(t, open(), "started, not yet sent: still held")
	txnTestSendWithOneResend(t, restarted, producerTestMessages(2, 1, 2))
	require.False(t, open(), "the first send's new epoch aborted it")
}

// txnTestSendWithOneResend sends msgs through p and requires them
// committed: a send that reports them unavailable (its commit not
// confirmed) is followed by one more, as the relay's next poll would.
func txnTestSendWithOneResend(t *testing.T, p *Producer, msgs []outbox.Message) {
	t.Helper()
	for _, err := range p.Send(context.Background(), relay.Envelopes(msgs)) {
		if err != nil {
			require.ErrorIs(t, err, relay.ErrUnavailable)
			producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(msgs)))
			return
		}
	}
}

// txnTestDeadRun leaves a transaction open under id on b, as a relay that
// died mid-send does, and returns the producer of the run that restarts
// under the same id (not yet connected) and a report of whether a
// transaction still holds a partition of the topic.
func txnTestDeadRun(t *testing.T, b *kafkatest.Broker, id string) (*Producer, func() bool) {
	t.Helper()
	dead, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.TransactionalID(id),
		kgo.TransactionTimeout(time.Minute), kgo.DefaultProduceTopic(b.Topic))
	require.NoError(t, err)
	require.NoError(t, dead.BeginTransaction())
	cfg := producerTestConfig(b.Addr)
	cfg.Topic = b.Topic
	cfg.TransactionalID = id
	restarted := producerTestNew(t, cfg)
	for _, r := range dead.ProduceSync(context.Background(), restarted.kgoRecords(relay.Envelopes(producerTestMessages(1, 1, 1)))...) {
		require.NoError(t, r.Err)
	}
	dead.Close() // no EndTxn: the process died

	admin, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	open := func() bool {
		ends, err := endoffset.List(context.Background(), admin, b.Topic)
		require.NoError(t, err)
		stable, err := endoffset.ListStable(context.Background(), admin, b.Topic)
		require.NoError(t, err)
		for p, end := range ends {
			if stable[p] != end {
				return true
			}
		}
		return false
	}
	require.True(t, open(), "the dead run's transaction holds its partition")
	return restarted, open
}

// A partition whose leader keeps answering REQUEST_TIMED_OUT (an acks=all
// produce its in-sync followers did not replicate in time). The idempotent
// (sarama) path fails that partition's messages in under a second and
// delivers the rest. The transactional path cannot: franz-go cannot tell
// whether such a batch was written, so it retries it and cannot fail it
// (kgo's AllowIdempotentProduceCancellation is refused with a
// transactional id). What holds there, and design.md states: the send ends
// within its bound, every message unavailable (no attempt spent), none
// reported acknowledged, and once the partition answers again the batch is
// delivered.
func TestProducerPartitionTimingOutFailsItsMessagesOrTheWholeTransaction(t *testing.T) {
	t.Parallel()
	producerTestEach(t, func(t *testing.T, b *kafkatest.Broker, cfg ProducerConfig, transactional bool) {
		p := producerTestNew(t, cfg)
		posts := producerTestPostsOnDistinctPartitions(t, 4, b.Partitions)
		stop := b.RejectKey(strconv.FormatInt(posts[0], 10), kerr.RequestTimedOut.Code)
		defer stop()
		msgs := producerTestMessages(1, 8, posts...)
		start := time.Now()
		errs := p.Send(context.Background(), relay.Envelopes(msgs))
		took := time.Since(start)
		if transactional {
			require.Less(t, took, p.SendBound()*5/4, "within the send's bound")
			for i, err := range errs {
				require.ErrorIs(t, err, relay.ErrUnavailable, "message %d: the whole transaction is unanswered", i)
			}
			stop()
			producerTestRequireAllNil(t, p.Send(context.Background(), relay.Envelopes(msgs)))
			return
		}
		for i, m := range msgs {
			if m.AggregateID == posts[0] {
				require.ErrorIs(t, errs[i], relay.ErrUnavailable, "message %d", i)
				continue
			}
			require.NoError(t, errs[i], "message %d: a healthy partition", i)
		}
		require.Less(t, took, cfg.SendTimeout/2)
	})
}

// CheckTransactions, which serve runs at start, takes the id at once: a
// transaction a dead run left open under it is aborted before any send.
func TestCheckTransactionsAbortsWhatADeadRunLeftOpen(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	restarted, open := txnTestDeadRun(t, b, "posting-relay-y")
	require.NoError(t, restarted.CheckTransactions(context.Background()))
	require.False(t, open(), "the check's new epoch aborted it")
	producerTestRequireAllNil(t, restarted.Send(context.Background(), relay.Envelopes(producerTestMessages(2, 1, 2))))
}

// A cluster that refuses the transactional id (an ACL) is told by
// CheckTransactions, naming the id and what to grant, not as an outage.
func TestCheckTransactionsNamesARefusedID(t *testing.T) {
	t.Parallel()
	b := kafkatest.Start(t)
	b.Cluster.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster.KeepControl()
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil, true
	})
	cfg := producerTestConfig(b.Addr)
	cfg.Topic = b.Topic
	cfg.TransactionalID = "posting-relay-z"
	err := producerTestNew(t, cfg).CheckTransactions(context.Background())
	require.ErrorIs(t, err, ErrTransactionalIDRefused)
	require.NotErrorIs(t, err, relay.ErrUnavailable)
	require.ErrorContains(t, err, `"posting-relay-z"`)
	require.ErrorContains(t, err, "Write and Describe")

	cfg.TransactionalID = ""
	require.NoError(t, producerTestNew(t, cfg).CheckTransactions(context.Background()), "idempotent: nothing to take")
}
