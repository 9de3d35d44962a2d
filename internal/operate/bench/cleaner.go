package bench

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
)

// NewCleaner returns the function that deletes what the bench wrote:
// the outbox rows and posts above the ids they had when it started (all
// rows of a database that was empty), and the publications of those posts,
// and then waits for MySQL's purge of them (database.Driver.AwaitPurge) and
// settles those tables (database.Driver.Settle).
// keep (a database that held rows, --allow-nonempty) deletes nothing: rows
// another writer adds while the bench runs get ids among the bench's own,
// and an id mark cannot tell them apart, so the bench leaves its rows.
func NewCleaner(ctx context.Context, db *database.DB, keep bool) (func(context.Context) error, error) {
	if keep {
		return func(context.Context) error { return nil }, nil
	}
	type mark struct {
		table, column string
		above         int64
	}
	marks := []mark{{"outbox", "id", 0}, {"publications", "post_id", 0}, {"posts", "id", 0}}
	for i := range marks {
		if marks[i].table == "publications" {
			continue // the posts' mark, filled below
		}
		var maxID *int64
		if err := db.WithContext(ctx).Table(marks[i].table).Select("MAX(" + marks[i].column + ")").Row().Scan(&maxID); err != nil {
			return nil, fmt.Errorf("read the last id of %s: %w", marks[i].table, err)
		}
		if maxID != nil {
			marks[i].above = *maxID
		}
	}
	marks[1].above = marks[2].above
	return func(ctx context.Context) error {
		for _, mk := range marks {
			err := db.WithContext(ctx).Session(&gorm.Session{AllowGlobalUpdate: true}).
				Exec("DELETE FROM "+mk.table+" WHERE "+mk.column+" > ?", mk.above).Error
			if err != nil {
				return fmt.Errorf("delete the bench's rows of %s: %w", mk.table, err)
			}
		}
		// The next measurement runs on tables as a steady service keeps
		// them, not on the dead rows of the last one: on PostgreSQL a
		// hundred thousand deleted rows left to autovacuum made each relay
		// poll plan and scan through their index entries, several times
		// slower.
		tables := make([]string, len(marks))
		for i, mk := range marks {
			tables[i] = mk.table
		}
		if err := db.Driver().Settle(db.WithContext(ctx), tables...); err != nil {
			return fmt.Errorf("settle the tables the bench deleted from: %w", err)
		}
		// Nor does it share its cores with InnoDB's purge of those rows,
		// which runs in the server's background on MySQL.
		if err := db.Driver().AwaitPurge(db.WithContext(ctx)); err != nil {
			return fmt.Errorf("wait for the purge of the bench's deleted rows: %w", err)
		}
		return nil
	}, nil
}
