// Package spike measures how late a spike of posts due in the same second is
// published: it seeds RESERVED posts on a database, runs the scheduler, the
// relay and the worker against an in-process Kafka-protocol broker, and
// reports the lag published_at − scheduledAt of every post. Tests, benchmarks
// and the `posting bench` command call Run.
package spike

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/brokers/kafka"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// ErrNotEmpty is returned by Run on a database that already holds posts: the
// scheduler and worker it runs would act on them.
var ErrNotEmpty = errors.New("spike needs a database without posts")

// ErrTimeout is returned by Run when the posts were not all published within
// Config.Timeout.
var ErrTimeout = errors.New("spike did not finish in time")

// ErrDueTooSoon is returned by Run when the posts came due before they were
// seeded and settled: their lag would count the seeding, not the service.
var ErrDueTooSoon = errors.New("spike posts came due before their seeding ended")

// Config configures a spike. Zero fields take defaults.
type Config struct {
	// Posts is how many posts are due in the same second. Default 20000;
	// 1..1000000.
	Posts int
	// DueIn is how long after the posts were seeded they are due (all at
	// the same instant, by the database's clock). Default 30s; at least 1s.
	DueIn time.Duration
	// SchedulerSpec is the scheduler's cron spec. Default "@every 5s".
	SchedulerSpec string
	// Lead is the scheduler's lead (a post due within it becomes WORKING).
	// Default 5m, the service's.
	Lead time.Duration
	// SchedulerBatchSize is the scheduler's batch size. Default the
	// scheduler's default.
	SchedulerBatchSize int
	// RelayBatchSize is the relay's batch size. Default 100, the service's.
	RelayBatchSize int
	// RelayInterval is the relay's poll interval. Default 5s, the service's.
	RelayInterval time.Duration
	// Partitions is the topic's partition count. Default 8, the embedded
	// broker's.
	Partitions int32
	// Concurrency is the worker's concurrency. Default the worker's (64).
	Concurrency int
	// Publisher is the worker's publisher. Default worker.RecordOnly
	// without a logger.
	Publisher worker.Publisher
	// Timeout bounds the wait for every post to be published. Default 5m.
	Timeout time.Duration
	// RabbitMQURL, if set, carries the events through that RabbitMQ broker
	// (a fresh exchange and worker queue, deleted after the run) instead of
	// an in-process Kafka-protocol broker.
	RabbitMQURL string
	// Logger receives the components' logs. Default: discarded.
	Logger *slog.Logger
}

// DefaultConfig returns a Config with every field but Publisher at its
// default: the one place the defaults are written.
func DefaultConfig() Config {
	return Config{
		Posts:              20000,
		DueIn:              30 * time.Second,
		SchedulerSpec:      "@every 5s",
		Lead:               5 * time.Minute,
		SchedulerBatchSize: reservation.DefaultSchedulerConfig().BatchSize,
		RelayBatchSize:     100,
		RelayInterval:      5 * time.Second,
		Partitions:         8,
		Concurrency:        worker.DefaultConcurrency,
		Timeout:            5 * time.Minute,
		Logger:             slog.New(slog.DiscardHandler),
	}
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (c Config) Validate() error {
	const f = "spike.Config."
	switch {
	case c.Posts < 1 || c.Posts > 1000000:
		return config.Invalid(f+"Posts", c.Posts, "want 1..1000000")
	case c.DueIn < time.Second:
		return config.Invalid(f+"DueIn", c.DueIn, "want at least 1s")
	case c.Timeout <= 0:
		return config.Invalid(f+"Timeout", c.Timeout, "must be positive")
	}
	return nil
}

// Result is what a spike measured.
type Result struct {
	// Posts is how many posts were published.
	Posts int
	// P50, P99 and Max are percentiles of published_at − scheduledAt over
	// the posts (negative would be a post published early).
	P50, P99, Max time.Duration
	// Min is the smallest lag.
	Min time.Duration
	// AllWorking is how long after the seeding every post was WORKING, and
	// AllRecorded how long until the worker had recorded every post's
	// publication (its reservation event consumed); both are measured by
	// polling (see progressPause).
	AllWorking, AllRecorded time.Duration
}

// String formats r on one line.
func (r Result) String() string {
	return fmt.Sprintf("posts=%d lag p50=%s p99=%s max=%s min=%s all_working=%s all_recorded=%s",
		r.Posts, r.P50, r.P99, r.Max, r.Min, r.AllWorking.Round(time.Millisecond), r.AllRecorded.Round(time.Millisecond))
}

// Run seeds cfg.Posts RESERVED posts due cfg.DueIn later, all at the same
// instant, on db, which must be migrated and hold no posts; it then runs a
// scheduler, a relay and a worker (consuming through a consumer group) on an
// in-process broker until every post is PUBLISHED, stops them and returns
// the lag percentiles. The seeded posts stay in the database.
func Run(ctx context.Context, db *gorm.DB, cfg Config) (Result, error) {
	config.FillZero(&cfg, DefaultConfig())
	if err := cfg.Validate(); err != nil {
		return Result{}, fmt.Errorf("invalid spike config: %w", err)
	}
	var n int64
	if err := db.WithContext(ctx).Model(&reservation.Post{}).Count(&n).Error; err != nil {
		return Result{}, fmt.Errorf("count posts: %w", err)
	}
	if n > 0 {
		return Result{}, fmt.Errorf("%w: it has %d", ErrNotEmpty, n)
	}
	due, err := seed(ctx, db, cfg.Posts, cfg.DueIn)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()

	log := cfg.Logger
	var stops []func()
	defer func() {
		for _, stop := range slices.Backward(stops) {
			stop()
		}
	}()
	w, err := worker.New(db, worker.Config{Consumer: "spike", Concurrency: cfg.Concurrency, Publisher: cfg.Publisher, Logger: log})
	if err != nil {
		return Result{}, err
	}
	stops = append(stops, w.Stop)
	sender, err := startBroker(ctx, cfg, w, &stops)
	if err != nil {
		return Result{}, err
	}
	ddb := &database.DB{DB: db, Dialect: database.DialectOf(db)}
	rel, err := relay.New(outbox.NewStore(ddb), sender,
		relay.Config{InstanceID: "spike", BatchSize: cfg.RelayBatchSize, Interval: cfg.RelayInterval, Logger: log})
	if err != nil {
		return Result{}, err
	}
	if err := rel.Start(ctx); err != nil {
		return Result{}, err
	}
	stops = append(stops, rel.Stop)
	sc := reservation.DefaultSchedulerConfig()
	sc.Spec, sc.Lead, sc.BatchSize, sc.Logger = cfg.SchedulerSpec, cfg.Lead, cfg.SchedulerBatchSize, log
	sc.MaxPerRun = max(sc.MaxPerRun, sc.BatchSize)
	sched, err := reservation.NewScheduler(db, sc)
	if err != nil {
		return Result{}, err
	}
	if err := sched.Start(ctx); err != nil {
		return Result{}, err
	}
	stops = append(stops, sched.Stop)
	// As serve keeps them: the spike turns posts, outbox, inbox and
	// publications over faster than autovacuum looks.
	keeper, err := database.NewStatisticsKeeper(ddb, database.DefaultStatisticsInterval, log)
	if err != nil {
		return Result{}, err
	}
	if err := keeper.Start(ctx); err != nil {
		return Result{}, err
	}
	stops = append(stops, keeper.Stop)

	res, err := awaitPublished(ctx, cfg.Timeout, start, func(ctx context.Context) (progress, error) {
		var c progress
		err := db.WithContext(ctx).Raw(`SELECT
			(SELECT COUNT(*) FROM posts WHERE status = ?) AS reserved,
			(SELECT COUNT(*) FROM posts WHERE status = ?) AS published,
			(SELECT COUNT(*) FROM publications) AS recorded`,
			reservation.StatusReserved, reservation.StatusPublished).Scan(&c).Error
		return c, err
	}, cfg.Posts)
	if err != nil {
		return res, fmt.Errorf("%w (due at %s)", err, due)
	}
	return lags(ctx, db, res)
}

// progress is one count of the spike's posts by what has become of them.
type progress struct{ Reserved, Published, Recorded int64 }

// awaitPublished counts progress until all posts are published, pausing
// progressPause between counts, and returns the times at which every post
// was WORKING (none RESERVED) and every publication recorded, from start.
// When timeout has passed it counts once more before it gives up, so that
// posts all published during the last pause are not taken for a timeout;
// that count has a timeout of its own: the last pause, or a second when
// that is shorter.
func awaitPublished(ctx context.Context, timeout time.Duration, start time.Time, count func(context.Context) (progress, error), posts int) (Result, error) {
	var res Result
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := func(c progress) bool {
		if c.Reserved == 0 && res.AllWorking == 0 {
			res.AllWorking = time.Since(start)
		}
		if c.Recorded == int64(posts) && res.AllRecorded == 0 {
			res.AllRecorded = time.Since(start)
		}
		return c.Published == int64(posts)
	}
	for {
		polled := time.Now()
		c, err := count(wctx)
		if err == nil && done(c) {
			return res, nil
		}
		pause := progressPause(time.Since(polled))
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return res, fmt.Errorf("stopped with %d of %d posts published: %w", c.Published, posts, ctx.Err())
			}
			lctx, lcancel := context.WithTimeout(ctx, max(pause, time.Second))
			last, lerr := count(lctx)
			lcancel()
			if lerr == nil && done(last) {
				return res, nil
			}
			if lerr == nil {
				c, err = last, nil
			}
			return res, fmt.Errorf("%w: %d of %d posts published after %s: %w",
				ErrTimeout, c.Published, posts, time.Since(start).Round(time.Millisecond), errors.Join(err, wctx.Err()))
		case <-time.After(pause):
		}
	}
}

// progressPause is how long Run waits after a progress poll that took took:
// 50 ms, or nine times took when that is longer. The poll counts posts by
// status and every publication, which on PostgreSQL (dead index entries and
// no visibility map while the spike turns the tables over) takes tens of
// milliseconds per call: polled back to back it kept one backend busy and
// slowed what it measured. With this pause it takes at most a tenth of one,
// and AllWorking and AllRecorded are late by up to a poll, a pause and a
// poll (about 1.2 pauses).
func progressPause(took time.Duration) time.Duration {
	return max(50*time.Millisecond, 9*took)
}

// startBroker starts the broker side of a spike: an in-process Kafka broker,
// a producer and a consumer group feeding w; or, with cfg.RabbitMQURL, a
// fresh exchange and worker queue on that broker, a sender and a consumer.
// It appends what stops them to stops and returns the relay's sender.
func startBroker(ctx context.Context, cfg Config, w *worker.Worker, stops *[]func()) (relay.Sender, error) {
	log := cfg.Logger
	if cfg.RabbitMQURL != "" {
		suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
		exchange, queue := "spike-events-"+suffix, "spike-worker-"+suffix
		if err := rabbitmq.DeclareQueue(ctx, cfg.RabbitMQURL, exchange, queue, 3*time.Second); err != nil {
			return nil, err
		}
		*stops = append(*stops, func() { deleteRabbitMQ(cfg.RabbitMQURL, exchange, queue) })
		sender, err := rabbitmq.NewSender(rabbitmq.Config{URL: cfg.RabbitMQURL, Exchange: exchange}, log)
		if err != nil {
			return nil, err
		}
		*stops = append(*stops, func() { _ = sender.Close() })
		consumer, err := rabbitmq.NewConsumer(rabbitmq.ConsumerConfig{URL: cfg.RabbitMQURL, Exchange: exchange, Queue: queue}, w, log)
		if err != nil {
			return nil, err
		}
		if err := consumer.Start(ctx); err != nil {
			return nil, err
		}
		*stops = append(*stops, consumer.Stop)
		return sender, nil
	}
	broker, err := kafka.StartEmbedded(kafka.EmbeddedConfig{Addr: "127.0.0.1:0", Partitions: cfg.Partitions}, log)
	if err != nil {
		return nil, err
	}
	*stops = append(*stops, broker.Close)
	brokers := []string{broker.Addr()}
	producer, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: brokers, Topic: broker.Topic()}, log)
	if err != nil {
		return nil, err
	}
	*stops = append(*stops, func() { _ = producer.Close() })
	consumer, err := kafka.NewConsumer(kafka.ConsumerConfig{Brokers: brokers, Topic: broker.Topic(), GroupID: "spike"}, w, log)
	if err != nil {
		return nil, err
	}
	if err := consumer.Start(ctx); err != nil {
		return nil, err
	}
	*stops = append(*stops, consumer.Stop)
	return producer, nil
}

// deleteRabbitMQ deletes a spike's exchange, queue and dead-letter queue.
func deleteRabbitMQ(url, exchange, queue string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	_, _ = ch.QueueDelete(queue, false, false, false)
	_, _ = ch.QueueDelete(rabbitmq.DeadQueue(queue), false, false, false)
	_ = ch.ExchangeDelete(exchange, false, false)
}

// seed inserts posts RESERVED posts due at one instant dueIn after the
// inserts end, by the database's clock, and returns that instant. The posts
// are written far ahead first and moved to their time in one statement, so
// the time it takes to insert them does not eat into dueIn; the table is
// then settled (database.Driver.Settle).
func seed(ctx context.Context, db *gorm.DB, posts int, dueIn time.Duration) (time.Time, error) {
	now, err := database.Now(ctx, db)
	if err != nil {
		return time.Time{}, err
	}
	far := now.Add(24 * time.Hour)
	const chunk = 500
	for i := 0; i < posts; i += chunk {
		n := min(chunk, posts-i)
		var b strings.Builder
		b.WriteString("INSERT INTO posts (title, content, status, scheduled_at, created_at, updated_at, version) VALUES ")
		args := make([]any, 0, 6*n)
		for j := range n {
			if j > 0 {
				b.WriteString(",")
			}
			b.WriteString("(?,?,?,?,?,?,1)")
			args = append(args, fmt.Sprintf("spike %d", i+j+1), "spike", reservation.StatusReserved, far, now, now)
		}
		if err := db.WithContext(ctx).Exec(b.String(), args...).Error; err != nil {
			return time.Time{}, fmt.Errorf("seed posts: %w", err)
		}
	}
	if now, err = database.Now(ctx, db); err != nil {
		return time.Time{}, err
	}
	due := database.Normalize(now.Add(dueIn))
	if err := db.WithContext(ctx).Exec("UPDATE posts SET scheduled_at = ? WHERE status = ? AND scheduled_at = ? AND content = ?", due, reservation.StatusReserved, far, "spike").Error; err != nil {
		return time.Time{}, fmt.Errorf("seed posts: set their time: %w", err)
	}
	// Posts due on the hour were written long before it in a running
	// service, and its database's statistics know them. Seeded a moment
	// ago, they are unknown to PostgreSQL's planner until autovacuum
	// analyzes the table, up to a minute or more later: it then plans each
	// scheduler batch for an empty table and sorts every RESERVED post to
	// take 100 of them. The settling comes out of dueIn.
	if err := database.DriverOf(db).Settle(db.WithContext(ctx), "posts"); err != nil {
		return time.Time{}, fmt.Errorf("seed posts: %w", err)
	}
	if now, err = database.Now(ctx, db); err != nil {
		return time.Time{}, err
	}
	if !now.Before(due) {
		return time.Time{}, fmt.Errorf("%w: due at %s, settled at %s; give them more than DueIn %s (posting bench --spike-due-in)",
			ErrDueTooSoon, due.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano), dueIn)
	}
	return due, nil
}

// lags reads published_at − scheduled_at of every post into res.
func lags(ctx context.Context, db *gorm.DB, res Result) (Result, error) {
	var posts []reservation.Post
	if err := db.WithContext(ctx).Select("id", "scheduled_at", "published_at").Find(&posts).Error; err != nil {
		return res, fmt.Errorf("read published posts: %w", err)
	}
	ds := make([]time.Duration, 0, len(posts))
	for _, p := range posts {
		if p.PublishedAt != nil {
			ds = append(ds, p.PublishedAt.Sub(p.ScheduledAt))
		}
	}
	if len(ds) == 0 {
		return res, nil
	}
	slices.Sort(ds)
	res.Posts = len(ds)
	res.Min, res.Max = ds[0], ds[len(ds)-1]
	res.P50 = percentile(ds, 50)
	res.P99 = percentile(ds, 99)
	return res, nil
}

// percentile is the nearest-rank percentile p of sorted ds.
func percentile(ds []time.Duration, p int) time.Duration {
	i := (len(ds)*p + 99) / 100 // ceil(len*p/100), 1-based
	return ds[max(i, 1)-1]
}
