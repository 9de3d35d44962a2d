package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/postingsvc/posting/internal/send/relay"
)

// ErrLagReadInProgress is returned (wrapped with relay.ErrUnavailable) by
// LagReader.Lag while an earlier read has not finished.
var ErrLagReadInProgress = errors.New("an earlier lag read is still running")

// LagReader reads a consumer group's lag from the cluster: per partition,
// the newest offset minus the offset the group committed (minus the oldest
// offset when the group committed none, since a new group starts there).
// It asks the brokers, not the local member, so a member that is stuck on
// one event, or gone, still shows the events piling up behind it.
type LagReader struct {
	brokers []string
	group   string
	topic   string
	sconf   *sarama.Config
	mu      sync.Mutex // guards client and admin
	client  sarama.Client
	admin   sarama.ClusterAdmin
}

// NewLagReader returns a reader of cfg's group on cfg's topic. It connects
// at its first Lag, so that brokers down at start are no error.
func NewLagReader(cfg ConsumerConfig) (*LagReader, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid kafka consumer config: %w", err)
	}
	sc := cfg.saramaConfig()
	sc.ClientID = cfg.ClientID + "-lag"
	sc.Metadata.Retry.Max = 1
	sc.Metadata.Full = true // NewClient refreshes before it knows the topic
	// Brokers that accept and never answer hold a read this long at most.
	sc.Net.ReadTimeout, sc.Net.WriteTimeout = 5*time.Second, 5*time.Second
	return &LagReader{brokers: cfg.Brokers, group: cfg.GroupID, topic: cfg.Topic, sconf: sc}, nil
}

// Group is the consumer group read.
func (r *LagReader) Group() string { return r.group }

// Topic is the topic read.
func (r *LagReader) Topic() string { return r.topic }

// Lag returns the lag of every partition of the topic. sarama's calls take
// no context: when ctx ends first Lag returns its error and the calls finish
// in the background. A cluster that cannot be reached is an error wrapping
// relay.ErrUnavailable.
func (r *LagReader) Lag(ctx context.Context) (map[int32]int64, error) {
	type result struct {
		lag map[int32]int64
		err error
	}
	// One read at a time: a scrape that comes while a slow read (brokers
	// that accept and do not answer) still runs gets an error at once
	// instead of queueing a goroutine behind it.
	if !r.mu.TryLock() {
		return nil, fmt.Errorf("%w: consumer lag of group %s: %w", relay.ErrUnavailable, r.group, ErrLagReadInProgress)
	}
	done := make(chan result, 1)
	go func() {
		defer r.mu.Unlock()
		lag, err := r.read()
		done <- result{lag, err}
	}()
	select {
	case res := <-done:
		return res.lag, res.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: consumer lag of group %s: %w", relay.ErrUnavailable, r.group, ctx.Err())
	}
}

// read runs with r.mu held.
func (r *LagReader) read() (map[int32]int64, error) {
	if r.client == nil || r.client.Closed() {
		c, err := sarama.NewClient(r.brokers, r.sconf)
		if err != nil {
			return nil, fmt.Errorf("%w: consumer lag of group %s: %w", relay.ErrUnavailable, r.group, err)
		}
		a, err := sarama.NewClusterAdminFromClient(c)
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("%w: consumer lag of group %s: %w", relay.ErrUnavailable, r.group, err)
		}
		r.client, r.admin = c, a
	}
	lag, err := r.readWith()
	if err != nil {
		// A fresh client next time: a broker that came back at another
		// address, or a stale coordinator, is found again.
		_ = r.admin.Close()
		r.client, r.admin = nil, nil
	}
	return lag, err
}

func (r *LagReader) readWith() (map[int32]int64, error) {
	parts, err := r.client.Partitions(r.topic)
	if err != nil {
		return nil, fmt.Errorf("consumer lag of group %s: partitions of %s: %w", r.group, r.topic, err)
	}
	committed, err := r.admin.ListConsumerGroupOffsets(r.group, map[string][]int32{r.topic: parts})
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		// A group that never joined (some brokers say so instead of
		// answering -1s): nothing committed.
		committed, err = &sarama.OffsetFetchResponse{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("consumer lag of group %s: committed offsets: %w", r.group, err)
	}
	if committed.Err != sarama.ErrNoError && !errors.Is(committed.Err, sarama.ErrGroupIDNotFound) {
		return nil, fmt.Errorf("consumer lag of group %s: committed offsets: %w", r.group, committed.Err)
	}
	lag := make(map[int32]int64, len(parts))
	for _, p := range parts {
		newest, err := r.client.GetOffset(r.topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("consumer lag of group %s: newest offset of partition %d: %w", r.group, p, err)
		}
		from := int64(-1)
		if b := committed.GetBlock(r.topic, p); b != nil {
			if b.Err != sarama.ErrNoError {
				return nil, fmt.Errorf("consumer lag of group %s: committed offset of partition %d: %w", r.group, p, b.Err)
			}
			from = b.Offset
		}
		if from < 0 { // nothing committed: the group starts at the oldest
			if from, err = r.client.GetOffset(r.topic, p, sarama.OffsetOldest); err != nil {
				return nil, fmt.Errorf("consumer lag of group %s: oldest offset of partition %d: %w", r.group, p, err)
			}
		}
		lag[p] = max(newest-from, 0)
	}
	return lag, nil
}

// Close closes the connections; Lag connects again if called after.
func (r *LagReader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client == nil {
		return nil
	}
	err := r.admin.Close() // closes the client too
	r.client, r.admin = nil, nil
	if errors.Is(err, sarama.ErrClosedClient) {
		return nil
	}
	return err
}
