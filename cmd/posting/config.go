package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka"
	"github.com/postingsvc/posting/internal/operate/admin"
	"github.com/postingsvc/posting/internal/operate/overdue"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/platform/httpserver"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// exitUsage is the exit status for a bad setting or command line.
const exitUsage = 2

// usageError is a bad setting: main prints it and exits with status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func badSetting(name, value string, why any) error {
	return usageError{fmt.Errorf("invalid %s=%q: %v", name, value, why)}
}

// settings are the service's settings: each is a flag with an environment
// twin, POSTING_ + the flag name in upper case with _ for -. A flag given on
// the command line wins over its environment variable.
type settings struct {
	HTTPAddr          string
	DatabaseURL       string
	DatabaseDirectURL string
	DataDir           string
	DatabaseMaxConns  int
	DatabaseMaxIdle   int
	StatisticsEvery   time.Duration
	KafkaBrokers      []string
	KafkaTopic        string
	KafkaCompression  string
	KafkaTransactions bool
	EmbeddedKafkaAddr string
	SchedulerSpec     string
	ReservationLead   time.Duration
	RelayInterval     time.Duration
	RelayBatchSize    int
	RelayMaxBatch     int
	RelayMaxRetries   int
	RelayStaleAfter   time.Duration
	InstanceID        string
	AdminToken        string
	LogFormat         string
	Migrate           bool
	OutboxRetention   time.Duration
	IdemRetention     time.Duration
	PublishLateLimit  time.Duration
	OverdueAfter      time.Duration
	OverdueInterval   time.Duration
	OverdueReannounce int
	SeriesHorizon     time.Duration
	BatchConcurrency  int
	GroupSize         int
	GroupWait         time.Duration
	ShutdownTimeout   time.Duration
	WorkerGroup       string
	PublishWebhookURL string
	WebhookSecret     string
	WorkerHTTPAddr    string
	WorkerConcurrency int
	RabbitMQURL       string
	RabbitMQExchange  string
	RabbitMQDeclare   bool
	AuthJWTSecret     string
	AuthJWKSURL       string
	AuthIssuer        string
	AuthAudience      string
	AuthDisabled      bool
	APIWriteRate      string
	HTTP              httpserver.Config
}

func defaultInstanceID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "posting"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// addCommonFlags adds the settings every command needs: where the database
// is and how to log.
func addCommonFlags(fs *pflag.FlagSet, s *settings) {
	fs.StringVar(&s.DatabaseURL, "database-url", "", "mysql://user:pass@host:3306/db?params, postgres://user:pass@host:5432/db?sslmode=disable or sqlite://path/to.db; empty: embedded SQLite in the data dir")
	fs.StringVar(&s.DataDir, "data-dir", "./data", "where embedded state lives (SQLite file, embedded Kafka log)")
	fs.StringVar(&s.InstanceID, "instance-id", defaultInstanceID(), "written into claims, logs and metrics")
	fs.IntVar(&s.DatabaseMaxConns, "database-max-conns", 0, fmt.Sprintf("most database connections the process opens (0..%d); 0: %d on MySQL and PostgreSQL, %d on SQLite", database.MaxPoolConns, database.DefaultMaxConns, database.DefaultSQLiteMaxConns))
	fs.IntVar(&s.DatabaseMaxIdle, "database-max-idle-conns", 0, "database connections kept open while idle (0..the maximum); 0: as many as the maximum")
	fs.StringVar(&s.LogFormat, "log-format", "text", "text or json")
	showEnvTwins(fs)
}

// addDirectURLFlag adds the direct URL of the commands that migrate or
// LISTEN (serve, worker, migrate).
func addDirectURLFlag(fs *pflag.FlagSet, s *settings) {
	fs.StringVar(&s.DatabaseDirectURL, "database-direct-url", "", "postgres:// URL of the same database without the pooler, for migrations, their lock and LISTEN when POSTING_DATABASE_URL points at a pooler such as PgBouncer; empty: POSTING_DATABASE_URL")
	showEnvTwins(fs)
}

// addStatisticsFlag adds the pause of the keeper of the planner's
// statistics, which serve and worker run (database.StatisticsKeeper).
func addStatisticsFlag(fs *pflag.FlagSet, s *settings) {
	fs.DurationVar(&s.StatisticsEvery, "database-statistics-interval", database.DefaultStatisticsInterval,
		"PostgreSQL: how often the service looks for its tables that changed much since the planner's statistics of them were taken, and analyzes them (1s..1h; 0: never, autovacuum's alone); ignored on MySQL and SQLite")
	showEnvTwins(fs)
}

// addServeFlags adds the settings of the long-running commands.
func addServeFlags(fs *pflag.FlagSet, s *settings) {
	fs.StringVar(&s.HTTPAddr, "http-addr", "127.0.0.1:8080", "API listen address")
	fs.StringSliceVar(&s.KafkaBrokers, "kafka-brokers", nil, "comma-separated bootstrap list; empty: embedded broker on the embedded Kafka address")
	fs.StringVar(&s.KafkaTopic, "kafka-topic", event.DefaultTopic, "topic for both event types")
	fs.StringVar(&s.KafkaCompression, "kafka-compression", string(kafka.DefaultProducerConfig().Compression), "codec of the record batches the relay sends: none, gzip, snappy, lz4 or zstd (zstd: brokers 2.1+)")
	fs.BoolVar(&s.KafkaTransactions, "kafka-transactions", true, "send each batch as a Kafka transaction under the id posting-relay-<instance id>, so a stalled send's late copy is fenced or aborted (consumers read with isolation.level=read_committed); false: idempotent only, where such a copy can land after a later event of its post")
	fs.StringVar(&s.EmbeddedKafkaAddr, "embedded-kafka-addr", "127.0.0.1:9092", "listen address of the embedded broker")
	fs.StringVar(&s.SchedulerSpec, "scheduler-spec", "@every 1m", "robfig/cron spec of the reservation job")
	fs.DurationVar(&s.ReservationLead, "reservation-lead", 5*time.Minute, "how far ahead of scheduledAt a post becomes WORKING")
	fs.DurationVar(&s.RelayInterval, "relay-interval", 5*time.Second, "relay poll interval")
	fs.IntVar(&s.RelayBatchSize, "relay-batch-size", 100, "rows claimed per poll (1..5000)")
	fs.IntVar(&s.RelayMaxBatch, "relay-max-batch-size", relay.DefaultMaxBatchSize, "bound of the batch while polls come back full: it doubles from the batch size up to this (1..5000; at or below the batch size it stays fixed)")
	fs.IntVar(&s.RelayMaxRetries, "relay-max-retries", 3, "retries after the first attempt (0..100)")
	fs.DurationVar(&s.RelayStaleAfter, "relay-stale-after", relay.DefaultStaleAfter, "PROCESSING rows older than this are recovered; longer than the producer's send bound")
	fs.StringVar(&s.AdminToken, "admin-token", "", "bearer token for /admin/...; empty: admin endpoints off")
	fs.BoolVar(&s.Migrate, "migrate", true, "apply schema migrations at start")
	fs.DurationVar(&s.OutboxRetention, "outbox-retention", outbox.DefaultRetention, "SENT outbox rows older than this are deleted by the cleaner")
	fs.DurationVar(&s.IdemRetention, "idempotency-retention", reservation.DefaultIdempotencyRetention,
		"how long an Idempotency-Key of POST /api/v1/posts is honoured, then deleted by the cleaner (1m..720h)")
	fs.DurationVar(&s.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "bound on a graceful shutdown")
	od := overdue.DefaultConfig()
	fs.DurationVar(&s.PublishLateLimit, "publish-late-limit", 0,
		"a post without its own publishBy may be published at most this long after its scheduledAt, then it becomes EXPIRED; 0: published however late")
	fs.DurationVar(&s.OverdueAfter, "overdue-after", od.Grace,
		"grace after scheduledAt past which a post neither PUBLISHED, CANCELLED nor EXPIRED is overdue: counted, listed, alerted (1s..24h)")
	fs.DurationVar(&s.OverdueInterval, "overdue-interval", od.Interval, "pause between two overdue checks (100ms..the grace)")
	fs.IntVar(&s.OverdueReannounce, "overdue-reannounce", od.Reannounce,
		"how many times an overdue post whose reservation event was sent but made no publication is announced again (0..100; 0: never)")
	fs.DurationVar(&s.SeriesHorizon, "series-horizon", reservation.DefaultSeriesHorizon,
		"how far ahead the occurrences of a recurring series become posts (1h..2160h, longer than the reservation lead)")
	fs.IntVar(&s.BatchConcurrency, "api-batch-concurrency", reservation.DefaultBatchConcurrency,
		"most POST /api/v1/posts/batch transactions run at once; the others wait their turn (1..1000)")
	fs.IntVar(&s.GroupSize, "api-group-size", reservation.DefaultGroupSize,
		"most concurrent writes (POST /api/v1/posts, PATCH, cancel; not batches) that share one transaction; 1: a transaction each (1..1000)")
	fs.DurationVar(&s.GroupWait, "api-group-wait", reservation.DefaultGroupWait,
		"how long a group of writes waits for more before it is written; 0: a write that finds the database free is written at once (0..100ms)")
	showEnvTwins(fs)
}

// addHTTPServerFlags adds the limits of the HTTP server of serve and worker.
func addHTTPServerFlags(fs *pflag.FlagSet, s *settings) {
	d := httpserver.DefaultConfig()
	fs.DurationVar(&s.HTTP.ReadHeaderTimeout, "http-read-header-timeout", d.ReadHeaderTimeout, "bound on reading a request's headers (1s..the read timeout)")
	fs.DurationVar(&s.HTTP.ReadTimeout, "http-read-timeout", d.ReadTimeout, "bound on reading a whole request, body included; a body still arriving is cut with 408 (1s..1h)")
	fs.DurationVar(&s.HTTP.WriteTimeout, "http-write-timeout", d.WriteTimeout, "bound on a request from its headers to the end of its response (1s..1h)")
	fs.DurationVar(&s.HTTP.IdleTimeout, "http-idle-timeout", d.IdleTimeout, "an idle keep-alive connection is closed after this (1s..1h)")
	fs.IntVar(&s.HTTP.MaxConns, "http-max-conns", d.MaxConns, fmt.Sprintf("connections served at once; a new one beyond closes the one waiting longest without a request in progress (idle keep-alive, or not past its first request's headers after 1s), else waits until one closes or goes idle (1..%d)", httpserver.MaxMaxConns))
	showEnvTwins(fs)
}

// showEnvTwins names the environment twin in the usage of every flag of fs
// defined so far, so --help shows both spellings of a setting. The flag
// helpers call it after adding flags that have twins; flags added later
// (a subcommand's own, such as outbox list --status) have none.
func showEnvTwins(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || strings.Contains(f.Usage, "(env POSTING_") {
			return
		}
		f.Usage += " (env " + envName(f.Name) + ")"
	})
}

// envName is the environment twin of a flag.
func envName(flag string) string {
	return "POSTING_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnv sets every flag not given on the command line from its
// environment twin, so a bad value is reported with the variable's name.
func applyEnv(cmd *cobra.Command) error {
	var errs []error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" {
			return
		}
		name := envName(f.Name)
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		if sv, isSlice := f.Value.(pflag.SliceValue); isSlice {
			// Set appends to slices; the variable replaces the default.
			var items []string
			for _, item := range strings.Split(v, ",") {
				if item = strings.TrimSpace(item); item != "" {
					items = append(items, item)
				}
			}
			if err := sv.Replace(items); err != nil {
				errs = append(errs, badSetting(name, v, err))
			}
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, badSetting(name, v, cleanFlagError(err)))
		}
	})
	return errors.Join(errs...)
}

// cleanFlagError drops strconv's noise ("strconv.ParseInt: parsing ...").
func cleanFlagError(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 && strings.HasPrefix(msg, "strconv.") {
		return msg[i+2:]
	}
	return msg
}

// validateCommon checks the settings every command uses.
func (s *settings) validateCommon() error {
	switch s.LogFormat {
	case "text", "json":
	default:
		return badSetting("POSTING_LOG_FORMAT", s.LogFormat, "want text or json")
	}
	if s.DatabaseURL == "" && s.DataDir == "" {
		return badSetting("POSTING_DATA_DIR", s.DataDir, "empty, and no POSTING_DATABASE_URL either")
	}
	if s.InstanceID == "" {
		return badSetting("POSTING_INSTANCE_ID", s.InstanceID, "must not be empty")
	}
	return s.validateConfigs(s.poolConfig())
}

// validateServe checks the settings of serve: its own, then every
// component's configuration built from them, so a bad value stops serve
// before anything is opened.
func (s *settings) validateServe() error {
	if err := s.validateLongRunning(); err != nil {
		return err
	}
	if err := s.validateBrokerChoice(); err != nil {
		return err
	}
	if err := s.validateAuth(); err != nil {
		return err
	}
	if s.AdminToken != "" && len(s.AdminToken) < admin.MinTokenBytes {
		// The token is never shown, not even when refused.
		return usageError{fmt.Errorf("invalid POSTING_ADMIN_TOKEN: must be at least %d bytes, got %d; "+
			"generate one with: openssl rand -hex 32", admin.MinTokenBytes, len(s.AdminToken))}
	}
	if err := s.validateConfigs(s.serviceConfig()); err != nil {
		return err
	}
	if s.SeriesHorizon <= s.ReservationLead {
		// An occurrence must be a post before the scheduler's lead reaches it.
		return badSetting("POSTING_SERIES_HORIZON", s.SeriesHorizon.String(),
			fmt.Sprintf("must be longer than POSTING_RESERVATION_LEAD (%s)", s.ReservationLead))
	}
	// The relay's stale limit is checked against the send bound of the
	// sender to come, so that it is refused before anything is opened.
	if s.RabbitMQURL != "" {
		rc := s.rabbitmqConfig()
		return s.validateConfigs(rc, relayCheck{s.relayConfig(), rc.SendBound()}, s.schedulerConfig(), s.cleanerConfig(), s.serviceConfig(), s.overdueConfig())
	}
	brokers := s.brokers()
	var cfgs []validator
	if len(s.KafkaBrokers) == 0 {
		cfgs = append(cfgs, s.embeddedConfig(""))
	}
	pc := s.producerConfig(brokers)
	cfgs = append(cfgs, pc, relayCheck{s.relayConfig(), pc.SendBound()}, s.schedulerConfig(), s.cleanerConfig(), s.serviceConfig(), s.overdueConfig())
	cfgs = append(cfgs, s.workerConfigs(brokers)...)
	return s.validateConfigs(cfgs...)
}

// validateLongRunning checks the settings of serve and worker that belong
// to the command itself, not to a component.
func (s *settings) validateLongRunning() error {
	if err := s.validateCommon(); err != nil {
		return err
	}
	if s.ShutdownTimeout <= 0 {
		return badSetting("POSTING_SHUTDOWN_TIMEOUT", s.ShutdownTimeout.String(), "must be positive")
	}
	if s.StatisticsEvery != 0 && (s.StatisticsEvery < time.Second || s.StatisticsEvery > time.Hour) {
		return badSetting("POSTING_DATABASE_STATISTICS_INTERVAL", s.StatisticsEvery.String(), "want 0 (never) or 1s..1h")
	}
	if err := s.validateConfigs(s.HTTP); err != nil {
		return err
	}
	if s.PublishWebhookURL != "" {
		// Whatever the mode: serve on RabbitMQ runs no worker, but names
		// the webhook in /asyncapi.json.
		if err := s.validateConfigs(s.webhookConfig()); err != nil {
			return err
		}
	}
	return s.validateWebhookSecret()
}

// validator is a component's configuration.
type validator interface{ Validate() error }

// relayCheck is the relay's configuration with the send bound of its
// sender (relay.Config.ValidateFor).
type relayCheck struct {
	cfg       relay.Config
	sendBound time.Duration
}

func (c relayCheck) Validate() error { return c.cfg.ValidateFor(c.sendBound) }

// validateConfigs validates cfgs in order and returns the first refusal
// as a bad setting.
func (s *settings) validateConfigs(cfgs ...validator) error {
	for _, c := range cfgs {
		if err := c.Validate(); err != nil {
			return s.settingError(err)
		}
	}
	return nil
}

// settingOf names the setting each component field is taken from: the one
// place a component's field (as its Validate names it in a *config.Error)
// meets the setting's name, so the components know nothing of POSTING_*.
var settingOf = map[string]string{
	"database.Pool.MaxConns":               "POSTING_DATABASE_MAX_CONNS",
	"database.Pool.MaxIdle":                "POSTING_DATABASE_MAX_IDLE_CONNS",
	"relay.Config.InstanceID":              "POSTING_INSTANCE_ID",
	"relay.Config.Interval":                "POSTING_RELAY_INTERVAL",
	"relay.Config.BatchSize":               "POSTING_RELAY_BATCH_SIZE",
	"relay.Config.MaxBatchSize":            "POSTING_RELAY_MAX_BATCH_SIZE",
	"relay.Config.MaxRetries":              "POSTING_RELAY_MAX_RETRIES",
	"relay.Config.StaleAfter":              "POSTING_RELAY_STALE_AFTER",
	"reservation.SchedulerConfig.Spec":     "POSTING_SCHEDULER_SPEC",
	"reservation.SchedulerConfig.Lead":     "POSTING_RESERVATION_LEAD",
	"outbox.CleanerConfig.Retention":       "POSTING_OUTBOX_RETENTION",
	"kafka.ProducerConfig.Brokers":         "POSTING_KAFKA_BROKERS",
	"kafka.ProducerConfig.Topic":           "POSTING_KAFKA_TOPIC",
	"kafka.ProducerConfig.ClientID":        "POSTING_INSTANCE_ID",
	"kafka.ProducerConfig.Compression":     "POSTING_KAFKA_COMPRESSION",
	"kafka.ProducerConfig.TransactionalID": "POSTING_INSTANCE_ID",
	"kafka.ConsumerConfig.Brokers":         "POSTING_KAFKA_BROKERS",
	"kafka.ConsumerConfig.Topic":           "POSTING_KAFKA_TOPIC",
	"kafka.ConsumerConfig.GroupID":         "POSTING_WORKER_GROUP",
	"kafka.EmbeddedConfig.Addr":            "POSTING_EMBEDDED_KAFKA_ADDR",
	"kafka.EmbeddedConfig.Topic":           "POSTING_KAFKA_TOPIC",
	"worker.Config.Consumer":               "POSTING_WORKER_GROUP",
	"worker.Config.Concurrency":            "POSTING_WORKER_CONCURRENCY",
	"worker.WebhookConfig.URL":             "POSTING_PUBLISH_WEBHOOK_URL",
	"worker.WebhookConfig.Secret":          "POSTING_WEBHOOK_SECRET",
	"rabbitmq.Config.URL":                  "POSTING_RABBITMQ_URL",
	"rabbitmq.Config.Exchange":             "POSTING_RABBITMQ_EXCHANGE",
	"rabbitmq.ConsumerConfig.URL":          "POSTING_RABBITMQ_URL",
	"rabbitmq.ConsumerConfig.Exchange":     "POSTING_RABBITMQ_EXCHANGE",
	"rabbitmq.ConsumerConfig.Queue":        "POSTING_WORKER_GROUP",

	// Its own block: a long key that would realign the lines above.
	"reservation.ServiceConfig.IdempotencyRetention": "POSTING_IDEMPOTENCY_RETENTION",
	"reservation.ServiceConfig.LateLimit":            "POSTING_PUBLISH_LATE_LIMIT",
	"reservation.ServiceConfig.SeriesHorizon":        "POSTING_SERIES_HORIZON",
	"reservation.ServiceConfig.BatchConcurrency":     "POSTING_API_BATCH_CONCURRENCY",
	"reservation.ServiceConfig.GroupSize":            "POSTING_API_GROUP_SIZE",
	"reservation.ServiceConfig.GroupWait":            "POSTING_API_GROUP_WAIT",
	"overdue.Config.Grace":                           "POSTING_OVERDUE_AFTER",
	"overdue.Config.Interval":                        "POSTING_OVERDUE_INTERVAL",
	"overdue.Config.Reannounce":                      "POSTING_OVERDUE_REANNOUNCE",
	"overdue.Config.InstanceID":                      "POSTING_INSTANCE_ID",

	// The HTTP servers of serve and worker.
	"httpserver.Config.ReadHeaderTimeout": "POSTING_HTTP_READ_HEADER_TIMEOUT",
	"httpserver.Config.ReadTimeout":       "POSTING_HTTP_READ_TIMEOUT",
	"httpserver.Config.WriteTimeout":      "POSTING_HTTP_WRITE_TIMEOUT",
	"httpserver.Config.IdleTimeout":       "POSTING_HTTP_IDLE_TIMEOUT",
	"httpserver.Config.MaxConns":          "POSTING_HTTP_MAX_CONNS",
}

// settingError turns a component's refusal of a field taken from a setting
// into a bad setting naming it and its value (exit status 2); any other
// error is returned as it is.
func settingError(err error) error {
	var ce *config.Error
	if !errors.As(err, &ce) {
		return err
	}
	name, ok := settingOf[ce.Field]
	if !ok {
		return err
	}
	value := fmt.Sprint(ce.Value)
	if list, isList := ce.Value.([]string); isList {
		value = strings.Join(list, ",")
	}
	if more, ok := settingAlso[ce.Field]; ok {
		return badSetting(name, value, fmt.Sprintf("%v, %s", ce.Err, more))
	}
	return badSetting(name, value, ce.Err)
}

// settingAlso completes a component's reason where the setting accepts a
// value the component does not: the setting's 0 means the component's
// default, so the limits the component names are not the whole answer.
var settingAlso = map[string]string{
	"worker.Config.Concurrency": "or 0 for the worker's default",
}

// settingError is settingError for the settings s: without
// POSTING_KAFKA_BROKERS the bootstrap list is the embedded broker's address
// (s.brokers), so a refused broker is POSTING_EMBEDDED_KAFKA_ADDR's fault,
// and the message names the setting the operator actually gave.
func (s *settings) settingError(err error) error {
	if errors.Is(err, kafka.ErrNotLoopback) {
		return badSetting("POSTING_EMBEDDED_KAFKA_ADDR", s.EmbeddedKafkaAddr,
			fmt.Sprintf("%v; for a broker that other hosts reach, set POSTING_KAFKA_BROKERS to a Kafka cluster", kafka.ErrNotLoopback))
	}
	var ce *config.Error
	if len(s.KafkaBrokers) == 0 && errors.As(err, &ce) && settingOf[ce.Field] == "POSTING_KAFKA_BROKERS" {
		return badSetting("POSTING_EMBEDDED_KAFKA_ADDR", s.EmbeddedKafkaAddr, ce.Err)
	}
	return settingError(err)
}

// brokers is the bootstrap list: the configured brokers, or the embedded
// broker's address.
func (s *settings) brokers() []string {
	if len(s.KafkaBrokers) > 0 {
		return s.KafkaBrokers
	}
	return []string{s.EmbeddedKafkaAddr}
}

// The component configurations taken from the settings, each starting from
// the component's defaults so that a zero given as a setting is refused by
// the component, not replaced by its default. Logger and observers are
// added where the components are started.

func (s *settings) relayConfig() relay.Config {
	c := relay.DefaultConfig()
	c.InstanceID, c.Interval, c.BatchSize = s.InstanceID, s.RelayInterval, s.RelayBatchSize
	c.MaxBatchSize = s.RelayMaxBatch
	c.MaxRetries, c.StaleAfter = relay.Retries(s.RelayMaxRetries), s.RelayStaleAfter
	// An outage's backoff starts at the interval; its cap is no setting, so
	// a longer interval raises it rather than being refused for it.
	c.OutageBackoffMax = max(c.OutageBackoffMax, c.Interval)
	return c
}

func (s *settings) poolConfig() database.Pool {
	return database.Pool{MaxConns: s.DatabaseMaxConns, MaxIdle: s.DatabaseMaxIdle}
}

func (s *settings) schedulerConfig() reservation.SchedulerConfig {
	c := reservation.DefaultSchedulerConfig()
	c.Spec, c.Lead = s.SchedulerSpec, s.ReservationLead
	return c
}

func (s *settings) cleanerConfig() outbox.CleanerConfig {
	c := outbox.DefaultCleanerConfig()
	c.Retention = s.OutboxRetention
	return c
}

func (s *settings) serviceConfig() reservation.ServiceConfig {
	c := reservation.DefaultServiceConfig()
	c.IdempotencyRetention, c.LateLimit = s.IdemRetention, s.PublishLateLimit
	c.SeriesHorizon, c.BatchConcurrency = s.SeriesHorizon, s.BatchConcurrency
	c.GroupSize, c.GroupWait = s.GroupSize, s.GroupWait
	return c
}

func (s *settings) overdueConfig() overdue.Config {
	c := overdue.DefaultConfig()
	c.Grace, c.Interval, c.Reannounce, c.InstanceID = s.OverdueAfter, s.OverdueInterval, s.OverdueReannounce, s.InstanceID
	return c
}

func (s *settings) producerConfig(brokers []string) kafka.ProducerConfig {
	c := kafka.DefaultProducerConfig()
	c.Brokers, c.Topic, c.ClientID = brokers, s.KafkaTopic, s.InstanceID
	c.Compression = kafka.Compression(s.KafkaCompression)
	if s.KafkaTransactions {
		c.TransactionalID = "posting-relay-" + s.InstanceID
	}
	return c
}

func (s *settings) consumerConfig(brokers []string) kafka.ConsumerConfig {
	c := kafka.DefaultConsumerConfig()
	c.Brokers, c.Topic, c.GroupID, c.ClientID = brokers, s.KafkaTopic, s.WorkerGroup, s.InstanceID+"-worker"
	return c
}

// embeddedConfig is the embedded broker's configuration, its log under the
// data dir, recorded as belonging to database.
func (s *settings) embeddedConfig(database string) kafka.EmbeddedConfig {
	c := kafka.DefaultEmbeddedConfig()
	c.Addr, c.DataDir, c.Topic, c.Database = s.EmbeddedKafkaAddr, filepath.Join(s.DataDir, "kafka"), s.KafkaTopic, database
	return c
}
