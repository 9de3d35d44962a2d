package kafka

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/kafka/kafkatest"
	"github.com/postingsvc/posting/relay"
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
	a, c := producerTestNew(t, cfg), producerTestNew(t, cfg)
	nextID := int64(1)
	acked := 0
	for round := range 6 {
		for name, p := range map[string]*Producer{"a": a, "c": c} {
			msgs := producerTestMessages(nextID, 4, 1, 2, 3, 4)
			nextID += int64(len(msgs))
			for i, err := range p.Send(context.Background(), msgs) {
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
				for i, err := range p.Send(context.Background(), msgs) {
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
