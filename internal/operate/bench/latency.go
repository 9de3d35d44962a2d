package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka/endoffset"
	"github.com/postingsvc/posting/internal/platform/backoff"
)

// LatencyConfig configures CommitToBroker.
type LatencyConfig struct {
	// BaseURL is the service's HTTP API, such as http://127.0.0.1:8080. Required.
	BaseURL string
	// Brokers is the bootstrap list of the Kafka cluster the service sends
	// to. Required.
	Brokers []string
	// Topic is the service's topic. Default event.DefaultTopic.
	Topic string
	// Rate is the offered load in posts per second, sent on a fixed
	// schedule whatever the answers take. Default 200.
	Rate int
	// Duration is how long posts are sent. Default 10s.
	Duration time.Duration
	// Wait bounds the wait for the last events after the load ends.
	// Default 30s.
	Wait time.Duration
	// DB, when set, is the service's database: the run also reads the
	// relay's own record of each post's POSTING_EVENT, from its created to
	// its sent_at (Latency.Recorded).
	DB *gorm.DB
}

func (c LatencyConfig) withDefaults() LatencyConfig {
	if c.Topic == "" {
		c.Topic = event.DefaultTopic
	}
	if c.Rate == 0 {
		c.Rate = 200
	}
	if c.Duration == 0 {
		c.Duration = 10 * time.Second
	}
	if c.Wait == 0 {
		c.Wait = 30 * time.Second
	}
	return c
}

// Latency is a distribution of commit → broker times.
type Latency struct {
	// Events is how many events were measured.
	Events        int
	P50, P99, Max time.Duration
	// Failed is how many creates got no 201 (an offered load above what the
	// service answers makes it reset connections), and FirstFailure the
	// first of their errors; they are not in the distribution.
	Failed       int
	FirstFailure error
	// Recorded is the distribution of the same events from the outbox
	// row's created to its sent_at, as the relay records them (with
	// LatencyConfig.DB): the service's own view, without the HTTP answer
	// and the consumer's fetch.
	Recorded *Latency
}

// ErrEventsMissing is returned by CommitToBroker when events of posts the
// API created did not reach the topic within LatencyConfig.Wait.
var ErrEventsMissing = errors.New("events missing from the topic")

// CommitToBroker offers the service a fixed load of creates over HTTP and
// reads its topic with a consumer of its own, and measures, per post, the
// time from the 201 answer (the transaction has committed by then) to the
// moment the consumer receives the post's POSTING_EVENT. Both ends are
// outside the service, as a client and a downstream consumer see it; the
// figures include the consumer's fetch wait (at most 10 ms).
func CommitToBroker(ctx context.Context, cfg LatencyConfig) (Latency, error) {
	cfg = cfg.withDefaults()
	if cfg.BaseURL == "" || len(cfg.Brokers) == 0 {
		return Latency{}, errors.New("commit to broker: BaseURL and Brokers must be set")
	}
	if cfg.Rate < 1 || cfg.Duration <= 0 {
		return Latency{}, fmt.Errorf("commit to broker: Rate must be at least 1 and Duration positive, got %d and %s", cfg.Rate, cfg.Duration)
	}
	var (
		mu        sync.Mutex
		committed = map[int64]time.Time{}
		received  = map[int64]time.Time{}
	)
	// Records from the partitions' ends as listed before the load: the
	// topic may hold earlier events, which are not read. (A reset by time
	// lists a partition's end apart from its by-time answer, so an event
	// appended in between was skipped.)
	from, err := endOffsets(ctx, cfg.Brokers, cfg.Topic)
	if err != nil {
		return Latency{}, fmt.Errorf("commit to broker: %w", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: from}),
		// A record counts once a consumer of the service may read it: at
		// its transaction's commit.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(10*time.Millisecond))
	if err != nil {
		return Latency{}, fmt.Errorf("commit to broker: consumer: %w", err)
	}
	defer cl.Close()
	cctx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for cctx.Err() == nil {
			fetches := cl.PollFetches(cctx)
			at := time.Now()
			fetches.EachRecord(func(rec *kgo.Record) {
				if !isPostingEvent(rec) {
					return
				}
				id, err := strconv.ParseInt(string(rec.Key), 10, 64)
				if err != nil {
					return
				}
				mu.Lock()
				if _, seen := received[id]; !seen {
					received[id] = at
				}
				mu.Unlock()
			})
		}
	}()

	client := newHTTPClient(64)
	defer client.CloseIdleConnections()
	lctx, cancelLoad := context.WithCancelCause(ctx)
	defer cancelLoad(nil)
	var (
		wg           sync.WaitGroup
		failed       int
		firstFailure error
	)
	// Post i is sent at start + i/Rate: a schedule, not a ticker, so a
	// pause of the sender is caught up and the offered load is exact.
	n := int(cfg.Duration.Seconds() * float64(cfg.Rate))
	interval := time.Second / time.Duration(cfg.Rate)
	begin := time.Now()
	for i := 0; i < n && lctx.Err() == nil; i++ {
		if wait := time.Until(begin.Add(time.Duration(i) * interval)); wait > 0 && !backoff.Sleep(lctx, wait) {
			break
		}
		// Each request on its own: a slow answer does not lower the load.
		wg.Go(func() {
			id, err := createPost(lctx, client, cfg.BaseURL)
			at := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				// Counted, not fatal: above the service's rate some
				// requests fail, and the others still have a latency.
				failed++
				if firstFailure == nil {
					firstFailure = err
				}
				return
			}
			committed[id] = at
		})
	}
	wg.Wait()
	if err := context.Cause(lctx); err != nil {
		return Latency{}, fmt.Errorf("commit to broker: %w", err)
	}
	if len(committed) == 0 && firstFailure != nil {
		return Latency{}, fmt.Errorf("commit to broker: every create failed: %w", firstFailure)
	}
	deadline := time.Now().Add(cfg.Wait)
	for {
		mu.Lock()
		missing := 0
		for id := range committed {
			if _, ok := received[id]; !ok {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			return Latency{}, fmt.Errorf("commit to broker: %w: %d of %d posts' events not on topic %s after %s",
				ErrEventsMissing, missing, len(committed), cfg.Topic, cfg.Wait)
		}
		if !backoff.Sleep(ctx, 20*time.Millisecond) {
			return Latency{}, ctx.Err()
		}
	}
	stopConsumer()
	<-consumed

	mu.Lock()
	defer mu.Unlock()
	lat := make([]time.Duration, 0, len(committed))
	for id, c := range committed {
		lat = append(lat, max(received[id].Sub(c), 0))
	}
	res := distribution(lat)
	res.Failed, res.FirstFailure = failed, firstFailure
	if cfg.DB != nil {
		ids := slices.Collect(maps.Keys(committed))
		rec, err := createdToSent(ctx, cfg.DB, ids, cfg.Wait)
		if err != nil {
			return Latency{}, fmt.Errorf("commit to broker: %w", err)
		}
		res.Recorded = &rec
	}
	return res, nil
}

// createdToSent reads the POSTING_EVENT rows of the posts ids from db's
// outbox and returns the distribution of their created → sent_at, waiting
// up to wait for every sent_at: the relay writes a batch's acknowledgement
// after its send, with its next claim or once it falls idle. A post counts
// once, by its first event (the CREATED one the load wrote; the relay sends
// an aggregate's events in order, so a later one is never sent before it):
// a post with more events does not stand in for one whose event is unsent.
func createdToSent(ctx context.Context, db *gorm.DB, ids []int64, wait time.Duration) (Latency, error) {
	type row struct {
		ID          int64
		AggregateID int64
		Created     time.Time
		SentAt      time.Time
	}
	deadline := time.Now().Add(wait)
	for {
		first := make(map[int64]row, len(ids))
		for chunk := range slices.Chunk(ids, 1000) {
			var part []row
			err := db.WithContext(ctx).Table("outbox").Select("id", "aggregate_id", "created", "sent_at").
				Where("event_type = ? AND sent_at IS NOT NULL AND aggregate_id IN ?", event.PostingEvent, chunk).Scan(&part).Error
			if err != nil {
				return Latency{}, fmt.Errorf("read the events' created and sent_at: %w", err)
			}
			for _, r := range part {
				if f, ok := first[r.AggregateID]; !ok || r.ID < f.ID {
					first[r.AggregateID] = r
				}
			}
		}
		if len(first) >= len(ids) {
			lat := make([]time.Duration, 0, len(first))
			for _, r := range first {
				lat = append(lat, max(r.SentAt.Sub(r.Created), 0))
			}
			return distribution(lat), nil
		}
		if time.Now().After(deadline) {
			return Latency{}, fmt.Errorf("%d of %d posts' events have no sent_at after %s", len(ids)-len(first), len(ids), wait)
		}
		if !backoff.Sleep(ctx, 20*time.Millisecond) {
			return Latency{}, ctx.Err()
		}
	}
}

// endOffsets lists the end offset of every partition of topic, as the
// offsets to consume from.
func endOffsets(ctx context.Context, brokers []string, topic string) (map[int32]kgo.Offset, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := endoffset.List(ctx, cl, topic)
	if err != nil {
		return nil, err
	}
	from := make(map[int32]kgo.Offset, len(ends))
	for p, end := range ends {
		from[p] = kgo.NewOffset().At(end)
	}
	return from, nil
}

// isPostingEvent reports whether rec is a POSTING_EVENT, by its header.
func isPostingEvent(rec *kgo.Record) bool {
	for _, h := range rec.Headers {
		if h.Key == event.HeaderEventType {
			return string(h.Value) == string(event.PostingEvent)
		}
	}
	return false
}

// distribution sorts lat and reads its percentiles (nearest rank).
func distribution(lat []time.Duration) Latency {
	if len(lat) == 0 {
		return Latency{}
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1)+0.5)] }
	return Latency{Events: len(lat), P50: q(0.50), P99: q(0.99), Max: lat[len(lat)-1]}
}
