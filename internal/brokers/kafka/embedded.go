package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/config"
)

// DefaultEmbeddedAddr is where the embedded broker listens by default, the
// usual Kafka port on the loopback interface.
const DefaultEmbeddedAddr = "127.0.0.1:9092"

// embeddedSetupTimeout bounds creating the topic at start.
const embeddedSetupTimeout = 10 * time.Second

// EmbeddedDatabaseFile is the marker file in the embedded broker's data dir
// that names the database whose events its log holds.
const EmbeddedDatabaseFile = "posting-database"

// ErrOtherDatabase is returned by StartEmbedded when the log in its data dir
// was written for another database than EmbeddedConfig.Database. It is
// wrapped by an *OtherDatabaseError.
var ErrOtherDatabase = errors.New("embedded kafka log belongs to another database")

// OtherDatabaseError says which database an embedded broker's log belongs to.
// Sharing one log between two databases would put two different posts with
// the same id on the topic, and a worker would take one for the other.
type OtherDatabaseError struct {
	// DataDir is the broker's data dir.
	DataDir string
	// LogDatabase is the database recorded in the data dir.
	LogDatabase string
	// Database is the database the broker was started for.
	Database string
}

func (e *OtherDatabaseError) Error() string {
	return fmt.Sprintf("the embedded kafka log in %s belongs to database %s, not %s", e.DataDir, e.LogDatabase, e.Database)
}

// Is makes errors.Is(err, ErrOtherDatabase) true.
func (e *OtherDatabaseError) Is(target error) bool { return target == ErrOtherDatabase }

// ErrNotLoopback is EmbeddedConfig.Validate's reason (in a *config.Error
// naming Addr) for a host that is not a loopback address.
var ErrNotLoopback = errors.New("not a loopback address: the embedded broker has no authentication, " +
	"so it listens on loopback only (127.0.0.1, ::1 or localhost)")

// EmbeddedConfig configures the in-process broker of embedded mode.
type EmbeddedConfig struct {
	// Addr is host:port to listen on. Default "127.0.0.1:9092". The host
	// must be a loopback address (127.0.0.1, ::1) or localhost: the broker
	// takes any client's records without authentication, and a forged
	// record on the topic reaches every worker (ErrNotLoopback). A wildcard
	// (0.0.0.0, ::), a LAN address or another host name is refused. The
	// broker advertises the address it listens on to clients in metadata.
	// Port 0 picks a free port (see Embedded.Addr).
	Addr string
	// DataDir holds the broker's log and state, so records and committed
	// offsets survive a restart. It is created if missing. Empty keeps
	// everything in memory and loses it at Close.
	DataDir string
	// Topic is created at start if missing. Default event.DefaultTopic.
	Topic string
	// Partitions is the partition count of a topic we create; an existing
	// topic keeps its count. Default 8; 1 to 1000.
	Partitions int32
	// Database names the database whose events the log holds, without
	// credentials (such as "mysql://db1:3306/posting"). With a DataDir it is
	// recorded there (file EmbeddedDatabaseFile) on the first start, and a
	// start with another value fails with an *OtherDatabaseError. Default
	// empty: not recorded, not checked.
	Database string
	// SyncWrites fsyncs every batch before acknowledging it. Default false:
	// writes reach the OS at once and survive a crash of the process, but
	// not of the machine, as with Kafka's default flush settings.
	SyncWrites bool
	// Listener, when set, is Addr already bound: the broker serves on it
	// and closes it at its stop. serve binds the port before it opens
	// anything, so a busy one stops it before the migrations. Default nil:
	// StartEmbedded binds Addr.
	Listener net.Listener
}

// DefaultEmbeddedConfig returns an EmbeddedConfig with Addr, Topic and
// Partitions at their defaults: the one place the defaults are written. A
// caller that takes values from elsewhere (a command line) starts from it,
// so that an empty value it was given is refused by Validate rather than
// replaced.
func DefaultEmbeddedConfig() EmbeddedConfig {
	return EmbeddedConfig{Addr: DefaultEmbeddedAddr, Topic: event.DefaultTopic, Partitions: 8}
}

func (cfg EmbeddedConfig) withDefaults() EmbeddedConfig {
	config.FillZero(&cfg, DefaultEmbeddedConfig())
	return cfg
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (cfg EmbeddedConfig) Validate() error {
	const f = "kafka.EmbeddedConfig."
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return config.Invalid(f+"Addr", cfg.Addr, "want host:port: %w", err)
	}
	if host == "" {
		return config.Invalid(f+"Addr", cfg.Addr, "no host; clients need an address to connect back to")
	}
	if !loopbackHost(host) {
		return config.Invalid(f+"Addr", cfg.Addr, "%w", ErrNotLoopback)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return config.Invalid(f+"Addr", cfg.Addr, "bad port")
	}
	if cfg.Topic == "" {
		return config.Invalid(f+"Topic", cfg.Topic, "empty topic")
	}
	if cfg.Partitions < 1 || cfg.Partitions > 1000 {
		return config.Invalid(f+"Partitions", cfg.Partitions, "want 1 to 1000")
	}
	return nil
}

// loopbackHost reports whether host names the loopback interface only: a
// loopback IP or localhost. Any other name could resolve to an interface
// other hosts reach, now or after a change of /etc/hosts or DNS.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Embedded is a running one-node Kafka-protocol broker (franz-go's kfake)
// inside the process. Any Kafka client, kcat included, can use it at Addr.
type Embedded struct {
	cluster *kfake.Cluster
	addr    string
	topic   string
	once    sync.Once
}

// StartEmbedded listens on cfg.Addr, loads the log from cfg.DataDir and
// creates the topic if it is missing, also when the data dir already holds
// other state. It logs one line saying where the broker is.
func StartEmbedded(cfg EmbeddedConfig, logger *slog.Logger) (*Embedded, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid embedded kafka config: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	host, port, _ := net.SplitHostPort(cfg.Addr) // checked by Validate
	// kfake listens on 127.0.0.1; we listen where we were told, and it
	// advertises that address.
	listen := func(network, _ string) (net.Listener, error) {
		return net.Listen(network, net.JoinHostPort(host, port))
	}
	if ln := cfg.Listener; ln != nil {
		_, port, _ = net.SplitHostPort(ln.Addr().String())
		var used atomic.Bool
		listen = func(string, string) (net.Listener, error) {
			if used.Swap(true) {
				return nil, errors.New("embedded kafka: the listener is in use")
			}
			return ln, nil
		}
	}
	portNum, _ := strconv.Atoi(port)
	opts := []kfake.Opt{
		kfake.Ports(portNum), // one node
		kfake.ListenFn(listen),
		kfake.SeedTopics(cfg.Partitions, cfg.Topic), // only used on a fresh data dir
		kfake.DefaultNumPartitions(int(cfg.Partitions)),
		kfake.WithLogger(embeddedLogger{logger}),
	}
	if cfg.DataDir != "" {
		if err := claimDataDir(cfg.DataDir, cfg.Database); err != nil {
			return nil, err
		}
		opts = append(opts, kfake.DataDir(cfg.DataDir))
	}
	if cfg.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start embedded kafka on %s (data dir %q): %w", cfg.Addr, cfg.DataDir, err)
	}
	e := &Embedded{cluster: c, addr: c.ListenAddrs()[0], topic: cfg.Topic}
	partitions, err := e.ensureTopic(cfg.Partitions)
	if err != nil {
		e.Close()
		return nil, err
	}
	logger.Info("embedded kafka broker started",
		"addr", e.addr, "data_dir", cfg.DataDir, "topic", cfg.Topic, "partitions", partitions,
		"hint", KcatHint(e.addr, cfg.Topic))
	return e, nil
}

// KcatHint is the command the start-up log line offers for reading the
// topic: -J prints one JSON object per message (key, headers, payload), so
// the command holds no backslash escape that a log format would double.
func KcatHint(addr, topic string) string {
	return fmt.Sprintf("kcat -b %s -t %s -C -e -q -J", addr, topic)
}

// claimDataDir records database as the owner of the log in dir, or checks
// that it is the owner already recorded. A log from before the marker
// existed is adopted: nothing tells which database it was written for.
func claimDataDir(dir, database string) error {
	if database == "" {
		return nil
	}
	path := filepath.Join(dir, EmbeddedDatabaseFile)
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		if recorded := strings.TrimSpace(string(raw)); recorded != database {
			return &OtherDatabaseError{DataDir: dir, LogDatabase: recorded, Database: database}
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("embedded kafka: read %s: %w", path, err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("embedded kafka: create data dir: %w", err)
	}
	// Write then rename, so a crash leaves either no marker or a whole one.
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(database+"\n"), 0o640); err != nil {
		return fmt.Errorf("embedded kafka: record database: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("embedded kafka: record database: %w", err)
	}
	return nil
}

// ensureTopic creates the topic unless it exists and returns its partition
// count. A data dir from an earlier run holds its topics, and kfake seeds
// topics only into an empty one, so we always ask.
func (e *Embedded) ensureTopic(partitions int32) (int32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), embeddedSetupTimeout)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addr))
	if err != nil {
		return 0, fmt.Errorf("embedded kafka: admin client: %w", err)
	}
	defer cl.Close()

	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = e.topic
	rt.NumPartitions = partitions
	rt.ReplicationFactor = 1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = int32(embeddedSetupTimeout / time.Millisecond)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("embedded kafka: create topic %q: %w", e.topic, err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return 0, fmt.Errorf("embedded kafka: create topic %q: %w", e.topic, err)
		}
	}

	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(e.topic)
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("embedded kafka: describe topic %q: %w", e.topic, err)
	}
	for _, t := range mresp.Topics {
		if t.Topic != nil && *t.Topic == e.topic {
			if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
				return 0, fmt.Errorf("embedded kafka: describe topic %q: %w", e.topic, err)
			}
			return int32(len(t.Partitions)), nil
		}
	}
	return 0, fmt.Errorf("embedded kafka: topic %q missing after creating it", e.topic)
}

// Addr is the address clients connect to, host:port; with port 0 in the
// config it names the port that was picked.
func (e *Embedded) Addr() string { return e.addr }

// Topic is the topic the broker was started with.
func (e *Embedded) Topic() string { return e.topic }

// Close stops the broker and writes its state to the data dir. Clients see
// their connections close. It is safe to call more than once.
func (e *Embedded) Close() {
	e.once.Do(e.cluster.Close)
}

// embeddedLogger passes kfake's warnings and errors to slog; its info and
// debug lines describe every request and would drown the service's logs.
type embeddedLogger struct{ logger *slog.Logger }

func (l embeddedLogger) Logf(level kfake.LogLevel, format string, args ...any) {
	switch level {
	case kfake.LogLevelError:
		l.logger.Error("embedded kafka: "+fmt.Sprintf(format, args...), "component", "kafka")
	case kfake.LogLevelWarn:
		l.logger.Warn("embedded kafka: "+fmt.Sprintf(format, args...), "component", "kafka")
	}
}
