package database

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/platform/startstop"
)

// Tables are the tables the service's migrations create and its parts write
// in bulk: the ones whose statistics the StatisticsKeeper keeps current.
var Tables = []string{"posts", "outbox", "inbox", "inbox_sequences", "publications", "idempotency_keys", "series", "series_occurrences"}

// DefaultStatisticsInterval is the pause between two looks of the
// StatisticsKeeper.
const DefaultStatisticsInterval = 5 * time.Second

// StatisticsKeeper keeps the planner's statistics of the service's tables
// current between autovacuum's visits: every interval it asks the Driver to
// RefreshStatistics of Tables (on PostgreSQL, ANALYZE of the tables that
// changed much since their statistics were taken; nothing elsewhere). Run
// by every instance: one that finds a table analyzed by another passes it
// over.
type StatisticsKeeper struct {
	startstop.BaseStartStop
	db       *DB
	interval time.Duration
	log      *slog.Logger
}

// NewStatisticsKeeper returns the keeper of db's statistics, looking every
// interval (at least a second).
func NewStatisticsKeeper(db *DB, interval time.Duration, log *slog.Logger) (*StatisticsKeeper, error) {
	if interval < time.Second {
		return nil, fmt.Errorf("statistics interval %s: below 1s", interval)
	}
	return &StatisticsKeeper{db: db, interval: interval, log: log.With("component", "statistics")}, nil
}

// Start begins the keeper's loop. On a database whose Driver keeps no
// statistics of its own (MySQL, SQLite) the loop's calls return at once.
func (k *StatisticsKeeper) Start(ctx context.Context) error {
	return k.StartLoop(ctx, "statistics keeper", k.loop)
}

// Stop ends the loop, interrupting an ANALYZE in flight, and waits for it.
func (k *StatisticsKeeper) Stop() { k.BaseStartStop.Stop() }

func (k *StatisticsKeeper) loop(ctx context.Context) {
	for backoff.Sleep(ctx, k.interval) {
		start := time.Now()
		analyzed, err := k.db.Driver().RefreshStatistics(k.db.WithContext(ctx), Tables...)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			k.log.Warn("refreshing the planner's statistics failed", "err", err, "analyzed", analyzed)
		case len(analyzed) > 0:
			k.log.Info("planner's statistics refreshed", "tables", analyzed, "took", time.Since(start))
		}
	}
}
