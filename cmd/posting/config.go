package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/outbox"
	"github.com/postingsvc/posting/relay"
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
	DataDir           string
	KafkaBrokers      []string
	KafkaTopic        string
	EmbeddedKafkaAddr string
	SchedulerSpec     string
	ReservationLead   time.Duration
	RelayInterval     time.Duration
	RelayBatchSize    int
	RelayMaxRetries   int
	RelayStaleAfter   time.Duration
	InstanceID        string
	AdminToken        string
	LogFormat         string
	Migrate           bool
	OutboxRetention   time.Duration
	ShutdownTimeout   time.Duration
	WorkerGroup       string
	PublishWebhookURL string
	WorkerHTTPAddr    string
	WorkerConcurrency int
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
	fs.StringVar(&s.DatabaseURL, "database-url", "", "mysql://user:pass@host:3306/db?params or sqlite://path/to.db; empty: embedded SQLite in the data dir")
	fs.StringVar(&s.DataDir, "data-dir", "./data", "where embedded state lives (SQLite file, embedded Kafka log)")
	fs.StringVar(&s.InstanceID, "instance-id", defaultInstanceID(), "written into claims, logs and metrics")
	fs.StringVar(&s.LogFormat, "log-format", "text", "text or json")
	showEnvTwins(fs)
}

// addServeFlags adds the settings of the long-running commands.
func addServeFlags(fs *pflag.FlagSet, s *settings) {
	fs.StringVar(&s.HTTPAddr, "http-addr", "127.0.0.1:8080", "API listen address")
	fs.StringSliceVar(&s.KafkaBrokers, "kafka-brokers", nil, "comma-separated bootstrap list; empty: embedded broker on the embedded Kafka address")
	fs.StringVar(&s.KafkaTopic, "kafka-topic", event.DefaultTopic, "topic for both event types")
	fs.StringVar(&s.EmbeddedKafkaAddr, "embedded-kafka-addr", "127.0.0.1:9092", "listen address of the embedded broker")
	fs.StringVar(&s.SchedulerSpec, "scheduler-spec", "@every 1m", "robfig/cron spec of the reservation job")
	fs.DurationVar(&s.ReservationLead, "reservation-lead", 5*time.Minute, "how far ahead of scheduledAt a post becomes WORKING")
	fs.DurationVar(&s.RelayInterval, "relay-interval", 5*time.Second, "relay poll interval")
	fs.IntVar(&s.RelayBatchSize, "relay-batch-size", 100, "rows claimed per poll (1..5000)")
	fs.IntVar(&s.RelayMaxRetries, "relay-max-retries", 3, "retries after the first attempt (0..100)")
	fs.DurationVar(&s.RelayStaleAfter, "relay-stale-after", relay.DefaultStaleAfter, "PROCESSING rows older than this are recovered; longer than the producer's send bound")
	fs.StringVar(&s.AdminToken, "admin-token", "", "bearer token for /admin/...; empty: admin endpoints off")
	fs.BoolVar(&s.Migrate, "migrate", true, "apply schema migrations at start")
	fs.DurationVar(&s.OutboxRetention, "outbox-retention", outbox.DefaultRetention, "SENT outbox rows older than this are deleted by the cleaner")
	fs.DurationVar(&s.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "bound on a graceful shutdown")
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
	return nil
}

// validateServe checks the settings of serve and worker.
func (s *settings) validateServe() error {
	if err := s.validateCommon(); err != nil {
		return err
	}
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"POSTING_RESERVATION_LEAD", s.ReservationLead},
		{"POSTING_RELAY_INTERVAL", s.RelayInterval},
		{"POSTING_RELAY_STALE_AFTER", s.RelayStaleAfter},
		{"POSTING_SHUTDOWN_TIMEOUT", s.ShutdownTimeout},
		{"POSTING_OUTBOX_RETENTION", s.OutboxRetention},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return badSetting(p.name, p.d.String(), "must be positive")
		}
	}
	if _, err := cron.ParseStandard(s.SchedulerSpec); err != nil {
		return badSetting("POSTING_SCHEDULER_SPEC", s.SchedulerSpec, err)
	}
	if s.RelayBatchSize < 1 || s.RelayBatchSize > 5000 {
		return badSetting("POSTING_RELAY_BATCH_SIZE", fmt.Sprint(s.RelayBatchSize), "want 1..5000")
	}
	if s.RelayMaxRetries < 0 || s.RelayMaxRetries > 100 {
		return badSetting("POSTING_RELAY_MAX_RETRIES", fmt.Sprint(s.RelayMaxRetries), "want 0..100")
	}
	if s.RelayStaleAfter <= 2*s.RelayInterval {
		return badSetting("POSTING_RELAY_STALE_AFTER", s.RelayStaleAfter.String(),
			fmt.Sprintf("must be more than twice POSTING_RELAY_INTERVAL (%s)", s.RelayInterval))
	}
	if s.KafkaTopic == "" {
		return badSetting("POSTING_KAFKA_TOPIC", s.KafkaTopic, "must not be empty")
	}
	return s.validateWorkerParts()
}

// relayMaxRetries maps the setting to relay.Config, where 0 means "default".
func (s *settings) relayMaxRetries() int {
	if s.RelayMaxRetries == 0 {
		return -1
	}
	return s.RelayMaxRetries
}
