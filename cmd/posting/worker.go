package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/brokers/kafka"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq"
	"github.com/postingsvc/posting/internal/operate/metrics"
	"github.com/postingsvc/posting/internal/platform/httpserver"
	"github.com/postingsvc/posting/internal/platform/response"
	"github.com/postingsvc/posting/internal/platform/startstop"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/api"
)

// addWorkerFlags adds the settings of the downstream worker, which serve
// runs too in embedded mode.
func addWorkerFlags(fs *pflag.FlagSet, s *settings) {
	fs.StringVar(&s.WorkerGroup, "worker-group", kafka.DefaultConsumerGroup, "Kafka consumer group of the worker, also its name in the inbox table")
	fs.StringVar(&s.PublishWebhookURL, "publish-webhook-url", "", "POST each published post's JSON here (with retries); empty: record the publication only")
	fs.StringVar(&s.WebhookSecret, "webhook-secret", "", "Standard Webhooks signing secret of the webhook calls: whsec_ + base64 of a 24..64-byte key, several space-separated to rotate; empty: unsigned; prefer the environment variable")
	fs.IntVar(&s.WorkerConcurrency, "worker-concurrency", 0, fmt.Sprintf("publications in progress at once (1..%d); 0: the worker's default", worker.MaxConcurrency))
	showEnvTwins(fs)
}

func newWorkerCommand() *cobra.Command {
	cmd, s := longRunning("worker",
		"Consume posting-events and publish posts at their time",
		"Runs the downstream worker: a member of the consumer group that reads posting-events,\n"+
			"records each event that acts on a publication once (inbox; CREATED and UPDATED events\n"+
			"are acknowledged without a record), and publishes every reserved post at its\n"+
			"scheduledAt, WORKING → PUBLISHED. With no brokers it reads the embedded broker of a `posting serve`\n"+
			"on the embedded Kafka address; with no database URL it uses the same SQLite file.",
		(*settings).validateWorker, runWorker)
	fs := cmd.Flags()
	addCommonFlags(fs, s)
	addWorkerFlags(fs, s)
	addDirectURLFlag(fs, s)
	addStatisticsFlag(fs, s)
	fs.StringSliceVar(&s.KafkaBrokers, "kafka-brokers", nil, "comma-separated bootstrap list; empty: the embedded broker of a running serve")
	fs.StringVar(&s.KafkaTopic, "kafka-topic", event.DefaultTopic, "topic for both event types")
	fs.StringVar(&s.EmbeddedKafkaAddr, "embedded-kafka-addr", kafka.DefaultEmbeddedAddr, "address of the embedded broker of a running serve")
	fs.StringVar(&s.WorkerHTTPAddr, "worker-http-addr", "127.0.0.1:8081", "listen address of /healthz, /readyz and /metrics; empty: none")
	addHTTPServerFlags(fs, s)
	fs.BoolVar(&s.Migrate, "migrate", true, "apply schema migrations at start")
	fs.DurationVar(&s.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "bound on a graceful shutdown")
	addRabbitMQFlags(fs, s)
	return cmd
}

// validateWorker checks the settings of the worker command: its own, then
// the configurations of the worker's components.
func (s *settings) validateWorker() error {
	if err := s.validateLongRunning(); err != nil {
		return err
	}
	if err := s.validateBrokerChoice(); err != nil {
		return err
	}
	if s.RabbitMQURL != "" {
		cfgs := []validator{s.workerConfig(nil, nil, nil), s.rabbitmqConsumerConfig()}
		if s.PublishWebhookURL != "" {
			cfgs = append(cfgs, s.webhookConfig())
		}
		return s.validateConfigs(cfgs...)
	}
	cfgs := s.workerConfigs(s.brokers())
	if len(s.KafkaBrokers) == 0 {
		// The embedded broker of a serve listens on loopback only.
		cfgs = append(cfgs, s.embeddedConfig(""))
	}
	return s.validateConfigs(cfgs...)
}

// workerConfigs are the configurations of the worker's components, which
// serve runs too in embedded mode (and checks in any mode).
func (s *settings) workerConfigs(brokers []string) []validator {
	cfgs := []validator{s.workerConfig(nil, nil, nil), s.consumerConfig(brokers)}
	if s.PublishWebhookURL != "" {
		cfgs = append(cfgs, s.webhookConfig())
	}
	return cfgs
}

func (s *settings) webhookConfig() worker.WebhookConfig {
	c := worker.DefaultWebhookConfig()
	c.URL, c.Secret = s.PublishWebhookURL, s.WebhookSecret
	return c
}

// validateWebhookSecret refuses a signing secret with no webhook to sign
// (a misspelt URL setting would otherwise go unnoticed), and a bad one
// whatever the mode, without showing it.
func (s *settings) validateWebhookSecret() error {
	if s.WebhookSecret == "" {
		return nil
	}
	if s.PublishWebhookURL == "" {
		return usageError{errors.New("POSTING_WEBHOOK_SECRET is set but POSTING_PUBLISH_WEBHOOK_URL is not: " +
			"there is no webhook to sign; set the URL or unset the secret")}
	}
	return s.validateConfigs(s.webhookConfig())
}

// workerConfig is the worker's configuration from the settings, shared by
// worker and embedded serve.
func (s *settings) workerConfig(pub worker.Publisher, m *metrics.Metrics, log *slog.Logger) worker.Config {
	c := worker.DefaultConfig()
	c.Consumer = s.WorkerGroup
	if s.WorkerConcurrency != 0 { // the setting's 0 is the worker's default
		c.Concurrency = s.WorkerConcurrency
	}
	c.Publisher = pub
	if log != nil {
		c.Logger = log
	}
	if m != nil {
		c.ObserveConsumed, c.ObservePublished, c.ObserveSettled = m.ObserveConsumed, m.ObservePublicationLag, m.ObservePublicationOutcome
		c.ObserveRefused = m.ObserveRefused
	}
	return c
}

// startWorker starts the worker and its consumer on brokers and registers
// their stops: the consumer first (it finishes the event in hand, commits,
// and revokes its partitions from the worker), then the worker.
func startWorker(ctx context.Context, s *settings, db *database.DB, brokers []string, m *metrics.Metrics, log *slog.Logger, st *startstop.Stack, tp trace.TracerProvider) (ping func(context.Context) error, err error) {
	var pub worker.Publisher
	if s.PublishWebhookURL != "" {
		hook, err := worker.NewWebhook(s.webhookConfig())
		if err != nil {
			return nil, s.settingError(err)
		}
		pub = hook
	}
	wc := s.workerConfig(pub, m, log)
	wc.TracerProvider = tp
	w, err := worker.New(db.DB, wc)
	if err != nil {
		return nil, s.settingError(err)
	}
	st.OnStop(w.Stop)
	var c startstop.Service
	if s.RabbitMQURL != "" {
		rc := s.rabbitmqConsumerConfig()
		rc.Observe = m.ObserveConsumed
		rcons, err := rabbitmq.NewConsumer(rc, w, log)
		if err != nil {
			return nil, s.settingError(err)
		}
		c, ping = rcons, rcons.Ping
	} else {
		cc := s.consumerConfig(brokers)
		cc.Observe = m.ObserveConsumed
		kc, err := kafka.NewConsumer(cc, w, log)
		if err != nil {
			return nil, s.settingError(err)
		}
		c = kc
		// The group's lag as the cluster sees it, for the lag alert.
		lag, err := kafka.NewLagReader(kc.Config())
		if err != nil {
			return nil, s.settingError(err)
		}
		st.OnStop(func() { _ = lag.Close() })
		m.WatchConsumerLag(lag.Group(), lag.Topic(), lag.Lag)
	}
	if err := st.Start(ctx, c); err != nil {
		return nil, err
	}
	publisher := "record only"
	if s.PublishWebhookURL != "" {
		publisher = "webhook " + redactURL(s.PublishWebhookURL)
		if s.WebhookSecret != "" {
			publisher += fmt.Sprintf(" (signed, %d secrets)", len(strings.Fields(s.WebhookSecret)))
		}
	}
	concurrency := "default"
	if s.WorkerConcurrency > 0 {
		concurrency = fmt.Sprint(s.WorkerConcurrency)
	}
	log.Info("worker started", "component", "worker", "group", s.WorkerGroup, "publisher", publisher,
		"concurrency", concurrency, "broker", brokerName(s), "broker_addr", brokerAddr(s, brokers))
	return ping, nil
}

// brokerAddr is where the worker reads: the Kafka bootstrap list, or the
// RabbitMQ URL without its password.
func brokerAddr(s *settings, brokers []string) string {
	if s.RabbitMQURL != "" {
		return redactURL(s.RabbitMQURL)
	}
	return strings.Join(brokers, ",")
}

// runWorker runs the worker until ctx ends, then stops it within the
// shutdown timeout.
func runWorker(ctx context.Context, s *settings, log *slog.Logger) error {
	// The port first: a busy one stops the worker before it opens the
	// database or joins its consumer group.
	var ln net.Listener
	if s.WorkerHTTPAddr != "" {
		var err error
		if ln, err = listen("POSTING_WORKER_HTTP_ADDR", s.WorkerHTTPAddr); err != nil {
			return err
		}
		defer ln.Close() // at a failed start; after Shutdown, closed already
	}
	st, tracing, err := startRunning(ctx, s, log)
	if err != nil {
		return err
	}
	defer st.undo()
	if err := s.requireEmbeddedBrokerFile(ctx, log); err != nil {
		return err
	}
	db, applied, err := openSchema(ctx, s, st.Stack, "posts", "inbox", "publications")
	if err != nil {
		return err
	}
	// Which database, as serve says: a worker on the wrong one publishes
	// nothing, and nothing else would tell.
	if s.Migrate {
		log.Info("database ready", "component", "database", "database", db.Location, "migrations_applied", applied)
	} else {
		log.Info("database ready, migrations skipped", "component", "database", "database", db.Location)
	}
	// On a serve's embedded broker, only on that serve's database.
	if err := requireEmbeddedBrokerLease(ctx, s, db, log); err != nil {
		return err
	}
	brokers := s.brokers()
	m := metrics.New(db.DB, s.InstanceID)
	bg, cancelBG := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBG()
	ping, err := startWorker(bg, s, db, brokers, m, log, st.Stack, tracing.TracerProvider())
	if err != nil {
		return err
	}
	if keeper, err := statisticsKeeper(s, db, log); err != nil {
		return err
	} else if keeper != nil {
		if err := st.Start(bg, keeper); err != nil {
			return err
		}
	}
	if ln != nil {
		srv, err := workerHTTP(ln, s, db, brokers, ping, m, log)
		if err != nil {
			return err
		}
		st.OnStop(func() {
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		})
		log.Info("worker http listening", "component", "http", "addr", srv.Addr)
	}
	<-ctx.Done()
	log.Info("shutting down", "timeout", s.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), s.ShutdownTimeout)
	defer cancel()
	return st.stopWithin(sctx, cancelBG, s, log)
}

// workerHTTP serves the worker's probes and metrics on ln.
// consumerPing, when not nil, checks the consumer's own connection (RabbitMQ).
func workerHTTP(ln net.Listener, s *settings, db *database.DB, brokers []string, consumerPing func(context.Context) error, m *metrics.Metrics, log *slog.Logger) (*httpserver.Server, error) {
	if consumerPing == nil {
		// A producer that never sends: its Ping asks the brokers for metadata.
		probe, err := kafka.NewProducer(s.producerConfig(brokers), nil)
		if err != nil {
			return nil, s.settingError(err)
		}
		consumerPing = probe.Ping
	}
	checks := []api.Check{{Name: "database", Fn: db.Ping}, {Name: brokerName(s), Fn: consumerPing}}
	for _, c := range checks {
		m.WatchDependency(c.Name, c.Fn)
	}
	// serve's probes, so that one probe configuration reads both.
	health, err := api.HealthRoutes(checks, 0, log.With("component", "http"))
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	for pattern, h := range health {
		mux.Handle(pattern, h)
	}
	mux.Handle("GET /metrics", m.Handler())
	srv, err := httpserver.New(ln, m.HTTP(response.Routed(mux)), s.HTTP)
	if err != nil {
		return nil, s.settingError(err)
	}
	go func() { _ = srv.Serve() }() // ends at Shutdown
	return srv, nil
}
