package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/migrations"
)

// Run executes the command line args and returns when the command is done
// or ctx ends (SIGINT/SIGTERM).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRootCommand(stdout, stderr)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "posting",
		Short:         "Scheduled posting with a transactional outbox to Kafka or RabbitMQ",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	// Unknown flags and arguments are usage errors: exit status 2.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newMigrateCommand(), newServeCommand(), newWorkerCommand(), newOutboxCommand(), newPublicationsCommand(), newPostsCommand(), newTokenCommand(), newBenchCommand(), newVersionCommand())
	return root
}

// prepare reads the environment twins of the flags that were not given and
// validates the common settings.
func prepare(cmd *cobra.Command, s *settings) error {
	if err := applyEnv(cmd); err != nil {
		return err
	}
	return s.validateCommon()
}

// longRunning is a command that runs until ctx ends (serve, worker), and
// the settings its flags fill (the caller adds the flags): it takes no
// arguments, reads the environment twins of the flags not given, validates,
// then runs with a logger on stderr.
func longRunning(use, short, long string, validate func(*settings) error, run func(context.Context, *settings, *slog.Logger) error) (*cobra.Command, *settings) {
	s := &settings{}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd); err != nil {
				return err
			}
			if err := validate(s); err != nil {
				return err
			}
			if err := s.validateSharedDatabase(use); err != nil {
				return err
			}
			return run(cmd.Context(), s, newLogger(cmd.ErrOrStderr(), s))
		},
	}, s
}

func newLogger(w io.Writer, s *settings) *slog.Logger {
	var h slog.Handler
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if strings.EqualFold(s.LogFormat, "json") {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(h).With("instance_id", s.InstanceID)
}

// openDB opens the configured database, creating a missing SQLite file
// (serve, worker, migrate); a malformed URL is a usage error naming the
// setting.
func openDB(s *settings) (*database.DB, error) { return openWith(database.Open, s) }

// openExistingDB opens the configured database for a command that only
// reads or changes existing data: a missing SQLite file is an error saying
// where it was looked for, and nothing is created.
func openExistingDB(s *settings) (*database.DB, error) { return openWith(database.OpenExisting, s) }

func openWith(open func(rawURL, dataDir string) (*database.DB, error), s *settings) (*database.DB, error) {
	db, err := open(s.DatabaseURL, s.DataDir)
	if err != nil {
		if isInvalidURL(err) {
			return nil, badSetting("POSTING_DATABASE_URL", redactURL(s.DatabaseURL), err)
		}
		return nil, err
	}
	if err := db.SetDirectURL(s.DatabaseDirectURL); err != nil {
		_ = db.Close()
		return nil, badSetting("POSTING_DATABASE_DIRECT_URL", redactURL(s.DatabaseDirectURL), err)
	}
	if _, err := db.SetPool(s.poolConfig()); err != nil {
		_ = db.Close()
		return nil, s.settingError(err)
	}
	return db, nil
}

// applyMigrations applies the migrations on the direct URL when one is set
// (POSTING_DATABASE_DIRECT_URL: a pooler in transaction mode is no place for
// DDL and its lock), else on db.
func applyMigrations(ctx context.Context, db *database.DB) (int, error) {
	direct, err := db.OpenDirect()
	if errors.Is(err, database.ErrInvalidURL) {
		// A direct URL that reaches another database is a bad setting: exit 2.
		return 0, usageError{fmt.Errorf("POSTING_DATABASE_DIRECT_URL: %w", err)}
	}
	if err != nil {
		return 0, fmt.Errorf("open POSTING_DATABASE_DIRECT_URL: %w", err)
	}
	if direct != db {
		defer direct.Close()
	}
	return migrations.Apply(ctx, direct, nil)
}

func newMigrateCommand() *cobra.Command {
	var s settings
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the schema migrations and exit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := prepare(cmd, &s); err != nil {
				return err
			}
			log := newLogger(cmd.ErrOrStderr(), &s)
			db, err := openDB(&s)
			if err != nil {
				return err
			}
			defer db.Close()
			log.Info("applying migrations", "component", "database", "database", db.Location)
			n, err := applyMigrations(cmd.Context(), db)
			if err != nil {
				return err
			}
			log.Info("migrations applied", "applied", n, "database", db.Location)
			fmt.Fprintf(cmd.OutOrStdout(), "applied %d migrations to %s\n", n, db.Location)
			return nil
		},
	}
	addCommonFlags(cmd.Flags(), &s)
	addDirectURLFlag(cmd.Flags(), &s)
	return cmd
}
