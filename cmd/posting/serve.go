package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/postingsvc/posting/internal/brokers/kafka"
	"github.com/postingsvc/posting/internal/operate/admin"
	"github.com/postingsvc/posting/internal/operate/metrics"
	"github.com/postingsvc/posting/internal/operate/overdue"
	"github.com/postingsvc/posting/internal/platform/httpserver"
	"github.com/postingsvc/posting/internal/platform/startstop"
	"github.com/postingsvc/posting/internal/platform/telemetry"
	"github.com/postingsvc/posting/internal/publish/inbox"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/send/wakeup"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/migrations"
	"github.com/postingsvc/posting/internal/write/api"
	"github.com/postingsvc/posting/internal/write/reservation"
	"github.com/postingsvc/posting/openapi"
)

func newServeCommand() *cobra.Command {
	cmd, s := longRunning("serve",
		"Run the HTTP API, the scheduler and the relay (and, embedded, the broker and the worker)",
		"Runs the HTTP API, the reservation scheduler and the outbox relay in one process.\n"+
			"With no database URL and no brokers it runs fully embedded: SQLite under the data dir,\n"+
			"an in-process Kafka-protocol broker, and the downstream worker.",
		(*settings).validateServe, serve)
	addCommonFlags(cmd.Flags(), s)
	addServeFlags(cmd.Flags(), s)
	addHTTPServerFlags(cmd.Flags(), s)
	addDirectURLFlag(cmd.Flags(), s)
	addWorkerFlags(cmd.Flags(), s)
	addStatisticsFlag(cmd.Flags(), s)
	addRabbitMQFlags(cmd.Flags(), s)
	addServeRabbitMQFlags(cmd.Flags(), s)
	addAuthFlags(cmd.Flags(), s)
	addServeAuthFlags(cmd.Flags(), s)
	return cmd
}

// serve runs until ctx ends, then shuts down: stop taking requests, let
// in-flight sends finish and be recorded, stop the rest, return nil.
func serve(ctx context.Context, s *settings, log *slog.Logger) error {
	// The port first: a busy one stops serve before it opens, migrates or
	// starts anything.
	ln, err := listen("POSTING_HTTP_ADDR", s.HTTPAddr)
	if err != nil {
		return err
	}
	defer ln.Close() // at a failed start; after Shutdown, closed already
	// The embedded broker's port too, when there is one: the broker
	// serves on this listener once the database says it may run.
	var brokerLn net.Listener
	if s.RabbitMQURL == "" && len(s.KafkaBrokers) == 0 {
		if brokerLn, err = listen("POSTING_EMBEDDED_KAFKA_ADDR", s.EmbeddedKafkaAddr); err != nil {
			return err
		}
		defer brokerLn.Close() // at a failed start; the broker closes it at its stop
	}
	st, tracing, err := startRunning(ctx, s, log)
	if err != nil {
		return err
	}
	defer st.undo()
	tp := tracing.TracerProvider()
	db, applied, err := openSchema(ctx, s, st.Stack, "posts", "outbox", "inbox", "publications", "leases")
	if err != nil {
		return err
	}
	if s.Migrate {
		log.Info("database ready", "component", "database", "database", db.Location, "migrations_applied", applied)
	} else {
		log.Info("database ready, migrations skipped", "component", "database", "database", db.Location)
	}

	// The broker: RabbitMQ when POSTING_RABBITMQ_URL is set, else Kafka (a
	// cluster, or the embedded broker).
	var (
		brokers  []string
		embedded bool
		// brokerLost: the embedded broker's lease went to another serve.
		brokerLost <-chan error
		sender     brokerSender
		check      func(context.Context) error // the broker's start-up check
	)
	if s.RabbitMQURL != "" {
		rs, err := newRabbitSender(s, log)
		if err != nil {
			return err
		}
		st.OnStop(func() { _ = rs.Close() })
		sender, check = rs, func(ctx context.Context) error {
			if err := declareExchange(ctx, s, rs); err != nil {
				return err
			}
			return declareWorkerQueue(ctx, s)
		}
	} else {
		brokers, embedded, brokerLost, err = startKafka(s, db, brokerLn, log, st.Stack)
		if err != nil {
			return err
		}
		producer, err := kafka.NewProducer(s.producerConfig(brokers), log)
		if err != nil {
			return fmt.Errorf("kafka producer: %w", s.settingError(err))
		}
		st.OnStop(func() { _ = producer.Close() })
		sender = producer
		check = func(ctx context.Context) error {
			tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			// Against a real cluster the topic must exist (or be
			// auto-created by the cluster); serve creates nothing there.
			if !embedded {
				if err := producer.CheckTopic(tctx); err != nil {
					return fmt.Errorf("kafka topic check (POSTING_KAFKA_TOPIC=%s, POSTING_KAFKA_BROKERS=%v): %w", s.KafkaTopic, brokers, err)
				}
			}
			// The transactional id, taken now: a cluster that refuses it
			// is told at start, and a transaction an earlier run of this
			// instance left open is aborted before the first send.
			if err := producer.CheckTransactions(tctx); err != nil {
				return fmt.Errorf("kafka transactions (POSTING_KAFKA_TRANSACTIONS=true, POSTING_INSTANCE_ID=%s): %w; "+
					"or set POSTING_KAFKA_TRANSACTIONS=false to send without them", s.InstanceID, err)
			}
			return nil
		}
	}
	m := metrics.New(db.DB, s.InstanceID)
	m.WatchDependency("database", db.Ping)
	m.WatchDependency(brokerName(s), sender.Ping)
	// Before the broker check: a stale limit the sender could outlast is a
	// bad setting, whether or not the broker answers.
	rc := s.relayConfig()
	rc.Logger, rc.Observe, rc.TracerProvider = log, m.ObserveRelay, tp
	rel, err := relay.New(outbox.NewStore(db), m.WrapSender(sender), rc)
	if err != nil {
		return s.settingError(err)
	}
	m.WatchRelayBatch(rel.BatchSize)
	if check != nil {
		if err := check(ctx); err != nil {
			return err
		}
	}

	// The writers of outbox rows (API, scheduler, operator console) wake
	// the local relay once their transaction commits: an event leaves at
	// once instead of at the next poll, which stays the safety net. The
	// relay's own store keeps db.DB, so its writes wake nobody. On
	// PostgreSQL the commit also tells the other instances (commitWake),
	// with origin as the notification's payload, which this process's own
	// listener skips. It is random, not the instance id, which two
	// processes may share by mistake and would then never wake each other.
	origin := "serve-" + rand.Text()
	wake, notifiers, err := commitWake(db, rel.Wake, origin, log)
	if err != nil {
		return err
	}
	writers := database.WithCommitWaker(db.DB, wake)
	posts, err := reservation.NewService(writers, s.serviceConfig())
	if err != nil {
		return s.settingError(err)
	}
	sc := s.schedulerConfig()
	sc.Logger, sc.TracerProvider = log, tp
	sc.Observe = func(r reservation.SchedulerResult, d time.Duration, err error) {
		m.ObserveScheduler(r.Marked, r.Skipped, r.Failed, d, err)
	}
	sched, err := reservation.NewScheduler(writers, sc)
	if err != nil {
		return s.settingError(err)
	}
	cc := s.cleanerConfig()
	cc.Logger = log
	cleaner, err := outbox.NewCleaner(db.DB, cc,
		outbox.PurgeStep{Name: "outbox", Purge: outbox.Purge},
		outbox.PurgeStep{Name: "inbox", Purge: inbox.Purge},
		outbox.PurgeStep{Name: "publications", Purge: worker.PurgePublications},
		outbox.PurgeStep{Name: "idempotency_keys", Purge: reservation.PurgeIdempotencyKeys, Retention: s.IdemRetention})
	if err != nil {
		return s.settingError(err)
	}
	// The end-to-end promise against the posts table: expiries, the
	// re-announcements, the overdue count (one instance at a time).
	oc := s.overdueConfig()
	oc.Logger = log
	oc.Observe = func(r overdue.Result, err error) {
		m.ObserveOverdue(r.Leader, err == nil, r.Overdue, r.Oldest, r.Expired, r.Reannounced)
	}
	checker, err := overdue.New(writers, oc)
	if err != nil {
		return s.settingError(err)
	}
	m.WatchOverdue()
	// Recurring series: their occurrences become posts one horizon ahead
	// (every instance; the series' row lock and occurrence key keep each
	// occurrence one post).
	mc := reservation.DefaultMaterializerConfig()
	mc.Logger = log
	materializer, err := reservation.NewMaterializer(posts, mc)
	if err != nil {
		return err
	}
	var history *admin.History
	if s.AdminToken != "" {
		// The console's chart: samples of the outbox, kept in memory.
		if history, err = admin.NewHistory(admin.HistoryConfig{DB: db.DB, Logger: log}); err != nil {
			return err
		}
	}
	asyncAPI, err := asyncAPIRoute(s, brokers)
	if err != nil {
		return err
	}
	verifier, err := newVerifier(s, log)
	if err != nil {
		return err
	}
	if verifier != nil {
		st.OnStop(verifier.Close)
	}
	writeLimit, _ := parseWriteRate(s.APIWriteRate) // checked by validateAuth
	adm := admin.Config{DB: writers, Token: s.AdminToken, History: history, OverdueGrace: s.OverdueAfter,
		// A purge answers well inside the write timeout, or the client
		// gets an empty reply for work that was done.
		PurgeBudget: min(admin.DefaultPurgeBudget, s.HTTP.WriteTimeout/3)}
	handler, err := httpHandler(adm, m, asyncAPI, api.Config{
		Posts:      posts,
		Logger:     log,
		Auth:       verifier,
		WriteLimit: writeLimit,
		// Nil (no otelhttp, only the trace context:
		// api.Config.TracerProvider) when nothing is exported.
		TracerProvider: exportingOnly(tracing),
		Ready: []api.Check{
			{Name: "database", Fn: db.Ping},
			{Name: brokerName(s), Fn: sender.Ping},
		},
	})
	if err != nil {
		return err
	}
	srv, err := httpserver.New(ln, m.HTTP(handler), s.HTTP)
	if err != nil {
		return s.settingError(err)
	}

	// The background parts run on a context of their own: on shutdown they
	// are stopped in order (Stop waits for the poll in flight) rather than
	// cut off by the signal.
	bg, cancelBG := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBG()
	services := append(notifiers, sched, rel, cleaner, checker, materializer)
	if history != nil {
		services = append(services, history)
	}
	if keeper, err := statisticsKeeper(s, db, log); err != nil {
		return err
	} else if keeper != nil {
		services = append(services, keeper)
	}
	if db.Driver().Notifies() {
		// Other instances NOTIFY after their commits (commitWake): the
		// relay polls at once instead of at its next interval, which stays
		// the safety net.
		// Through a pooler the listener does not LISTEN (it would stay on a
		// pooled session); it finds out at start and says so.
		wake, err := wakeup.New(wakeup.Config{Connect: db.ConnectPostgres, Channel: outbox.NotifyChannel,
			Wake: rel.WakeForPeer, Logger: log, Notify: outbox.Notify(db.DB), Origin: origin})
		if err != nil {
			return err
		}
		services = append(services, wake)
	}
	for _, svc := range services {
		if err := st.Start(bg, svc); err != nil {
			return err
		}
	}
	if embedded {
		// One command shows the whole lifecycle: the downstream worker
		// reads the embedded broker and publishes posts at their time.
		if _, err := startWorker(bg, s, db, brokers, m, log, st.Stack, tp); err != nil {
			return err
		}
	}
	if s.AdminToken == "" {
		log.Info("admin endpoints off (no POSTING_ADMIN_TOKEN)", "component", "admin")
	} else {
		log.Info("admin endpoints on", "component", "admin", "path", "/admin/", "auth", "Authorization: Bearer $POSTING_ADMIN_TOKEN",
			"console", fmt.Sprintf("http://%s/admin/", ln.Addr()))
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve() }()
	log.Info("http api listening", "component", "http", "addr", ln.Addr().String(),
		"try", fmt.Sprintf("curl http://%s/healthz", ln.Addr()))

	var lost error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", s.ShutdownTimeout)
	case err := <-serveErr:
		return fmt.Errorf("http server: %w", err)
	case lost = <-brokerLost:
		log.Error("shutting down: another serve holds the embedded broker's lease of this database", "err", lost, "timeout", s.ShutdownTimeout)
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("http shutdown incomplete", "err", err)
	}
	return errors.Join(lost, st.stopWithin(sctx, cancelBG, s, log))
}

// statisticsKeeper is the keeper of db's planner statistics
// (POSTING_DATABASE_STATISTICS_INTERVAL), or nil when it is off.
func statisticsKeeper(s *settings, db *database.DB, log *slog.Logger) (*database.StatisticsKeeper, error) {
	if s.StatisticsEvery == 0 {
		return nil, nil
	}
	return database.NewStatisticsKeeper(db, s.StatisticsEvery, log)
}

// listen binds the HTTP port of the setting name at addr. serve and worker
// bind theirs before they open anything, so a busy port leaves no trace.
func listen(name, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s=%s: %w", name, addr, err)
	}
	return ln, nil
}

// running is what a long-running command (serve, worker) started, stopped
// last started first: by undo, deferred, when the start-up fails; by
// stopWithin at the shutdown.
type running struct {
	*startstop.Stack
	shuttingDown bool
}

// startRunning begins a long-running command: the stack of what it starts,
// tracing first, so that tracing stops last and exports the spans of the
// shutdown.
func startRunning(ctx context.Context, s *settings, log *slog.Logger) (*running, *telemetry.Provider, error) {
	st := &running{Stack: &startstop.Stack{}}
	tracing, err := startTracing(ctx, s, log, st.Stack)
	if err != nil {
		return nil, nil, err
	}
	return st, tracing, nil
}

// undo stops everything unless the shutdown began.
func (r *running) undo() {
	if !r.shuttingDown {
		r.Stop()
	}
}

// stopWithin stops everything within sctx; past it, cancelBG abandons what
// is still running: rows of a poll in flight are recovered by the stale
// limit, like after a crash.
func (r *running) stopWithin(sctx context.Context, cancelBG func(), s *settings, log *slog.Logger) error {
	r.shuttingDown = true
	if err := r.StopWithin(sctx); err != nil {
		cancelBG()
		return fmt.Errorf("shutdown did not finish within POSTING_SHUTDOWN_TIMEOUT=%s", s.ShutdownTimeout)
	}
	log.Info("stopped")
	return nil
}

// openSchema opens the database of a long-running command, closed at st's
// Stop, and applies the migrations, or with --migrate=false checks that
// tables exist; it returns the number of migrations applied.
func openSchema(ctx context.Context, s *settings, st *startstop.Stack, tables ...string) (*database.DB, int, error) {
	db, err := openDB(s)
	if err != nil {
		return nil, 0, err
	}
	st.OnStop(func() { _ = db.Close() })
	if !s.Migrate {
		return db, 0, requireSchema(db, tables...)
	}
	n, err := applyMigrations(ctx, db)
	return db, n, err
}

// httpHandler is the API with every route serve mounts: the API's own,
// /metrics, /openapi.json and, with adm.Token, the admin routes and the
// console of adm (its logger and its authentication failures' metric are
// added here). The OpenAPI document's test builds it the same way, so a
// route added here must be documented.
func httpHandler(adm admin.Config, m *metrics.Metrics, asyncAPI http.Handler, cfg api.Config) (http.Handler, error) {
	adm.Logger, adm.ObserveAuthFailure = cfg.Logger, m.ObserveAdminAuthFailure
	routes, err := admin.Routes(adm)
	if err != nil {
		return nil, err
	}
	routes["GET /metrics"] = m.Handler()
	routes["GET "+openapi.Path] = openapi.Handler()
	routes["GET /asyncapi.json"] = asyncAPI
	cfg.Routes = routes
	return api.NewHandler(cfg)
}

// startKafka returns the bootstrap list: the configured brokers, or the
// address of an embedded broker it starts with its log under the data dir.
//
// lost receives an error if the embedded broker's lease is lost to another
// serve; it is nil (never ready) for a cluster.
func startKafka(s *settings, db *database.DB, brokerLn net.Listener, log *slog.Logger, st *startstop.Stack) (brokers []string, embedded bool, lost <-chan error, err error) {
	if len(s.KafkaBrokers) > 0 {
		log.Info("using kafka cluster", "component", "kafka", "brokers", s.KafkaBrokers, "topic", s.KafkaTopic)
		return s.KafkaBrokers, false, nil, nil
	}
	lease, err := takeBrokerLease(s, db, brokerLn, log, st) // one embedded broker per database (guard.go)
	if err != nil {
		return nil, false, nil, err
	}
	ecfg := s.embeddedConfig(brokerDatabase(s, db))
	ecfg.Listener = brokerLn
	e, err := kafka.StartEmbedded(ecfg, log)
	var other *kafka.OtherDatabaseError
	if errors.As(err, &other) {
		// Starting anyway would mix two databases' events (two different
		// post 1) on one topic; the operator has to choose.
		return nil, false, nil, usageError{fmt.Errorf("%w: POSTING_DATABASE_URL changed but POSTING_DATA_DIR did not. "+
			"Use another POSTING_DATA_DIR for %s (or set POSTING_DATABASE_URL back), "+
			"or delete %s to start the embedded broker with an empty log (the events in it are lost)",
			err, other.Database, other.DataDir)}
	}
	if err != nil {
		return nil, false, nil, fmt.Errorf("embedded kafka on POSTING_EMBEDDED_KAFKA_ADDR=%s: %w", s.EmbeddedKafkaAddr, err)
	}
	st.OnStop(e.Close)
	if err := lease.keep(st, e.Addr()); err != nil {
		return nil, false, nil, err
	}
	return []string{e.Addr()}, true, lease.lost, nil
}

// brokerDatabase names db for the embedded broker's record of which database
// its log belongs to: the location without credentials. A SQLite file inside
// the data dir is named relative to it, so the data dir can move as a whole.
func brokerDatabase(s *settings, db *database.DB) string {
	if path := db.File(); path != "" {
		abs, err1 := filepath.Abs(path)
		dir, err2 := filepath.Abs(s.DataDir)
		if err1 != nil || err2 != nil {
			return db.Location
		}
		scheme, _, _ := strings.Cut(db.Location, "://")
		if rel, err := filepath.Rel(dir, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return scheme + "://<data dir>/" + filepath.ToSlash(rel)
		}
		return scheme + "://" + abs
	}
	u, err := url.Parse(db.Location)
	if port := db.Driver().DefaultPort(); err == nil && u.Port() == "" && u.Host != "" && port != "" {
		u.Host += ":" + port // the driver's default: one database, one name
		return u.String()
	}
	return db.Location
}

// requireSchema fails when a table the command needs is missing: with
// POSTING_MIGRATE=false nobody else creates them, and a missing table found
// later by a background loop would only be a repeated log line.
func requireSchema(db *database.DB, tables ...string) error {
	var missing []string
	for _, t := range tables {
		if !db.Migrator().HasTable(t) {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("database %s has no table %s and POSTING_MIGRATE=false: run `posting migrate` first, or leave POSTING_MIGRATE unset",
			db.Location, strings.Join(missing, ", "))
	}
	// Every table there, yet a later migration may be missing (a column
	// the claim or the expiry writes): the version says.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	current, target, err := migrations.Versions(ctx, db)
	if err != nil {
		return fmt.Errorf("database %s: %w", db.Location, err)
	}
	if current < target {
		return fmt.Errorf("database %s has schema version %d, this binary needs %d, and POSTING_MIGRATE=false: "+
			"run `posting migrate` first, or leave POSTING_MIGRATE unset", db.Location, current, target)
	}
	return nil
}
