package bench

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// RawGroupedCreate is RawCreate with the clients' creates sharing
// transactions, as the service's group commit shares them: each of
// reservation.DefaultGroupCommitters writers takes the creates waiting, up
// to reservation.DefaultGroupSize, writes their posts and their events in
// one multi-row INSERT each, in plain SQL, and commits; a client's create
// counts once that commit is done. It is the yardstick of grouped creates
// through the API.
func RawGroupedCreate(ctx context.Context, db *database.DB, clients int, d time.Duration) (Throughput, error) {
	sqlDB, err := db.DB.DB()
	if err != nil {
		return Throughput{}, err
	}
	waiting := make(chan chan error, clients)
	stop := make(chan struct{})
	writers := make(chan struct{}, reservation.DefaultGroupCommitters)
	for range reservation.DefaultGroupCommitters {
		go func() {
			defer func() { writers <- struct{}{} }()
			for {
				var group []chan error
				select {
				case <-stop:
					return
				case c := <-waiting:
					group = append(group, c)
				}
			more:
				for len(group) < reservation.DefaultGroupSize {
					select {
					case c := <-waiting:
						group = append(group, c)
					default:
						break more
					}
				}
				err := writeGroup(ctx, sqlDB, db.Dialect, len(group))
				for _, c := range group {
					c <- err
				}
			}
		}()
	}
	t, err := runClients(ctx, clients, d, func(ctx context.Context) error {
		done := make(chan error, 1)
		select {
		case waiting <- done:
		case <-ctx.Done():
			return ctx.Err()
		}
		return <-done
	})
	close(stop)
	for range reservation.DefaultGroupCommitters {
		<-writers
	}
	return t, err
}

// writeGroup writes n posts and their CREATED events in one transaction,
// in one multi-row INSERT each.
func writeGroup(ctx context.Context, sqlDB *sql.DB, dialect database.Dialect, n int) error {
	now := database.Normalize(time.Now())
	at := now.Add(scheduledAhead)
	tx, err := sqlDB.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("raw grouped create: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	q := "INSERT INTO posts (title, content, status, scheduled_at, created_at, updated_at, version) VALUES " +
		rowsOf("(?, ?, 'RESERVED', ?, ?, ?, 1)", n)
	args := make([]any, 0, 5*n)
	for range n {
		args = append(args, postTitle, postContent, at, now, now)
	}
	ids, err := insertedIDs(ctx, tx, dialect, q, n, args)
	if err != nil {
		return fmt.Errorf("raw grouped create: insert posts: %w", err)
	}
	q = "INSERT INTO outbox (event_id, event_type, aggregate_id, payload, created, status, retry_count, version, next_attempt_at) VALUES " +
		rowsOf("(?, 'POSTING_EVENT', ?, ?, ?, 'PENDING', 0, 1, ?)", n)
	args = args[:0]
	for _, id := range ids {
		eventID, err := uuid.NewV7()
		if err != nil {
			return err
		}
		args = append(args, eventID.String(), id, createdPayload(eventID.String(), id, now, at), now, now)
	}
	if dialect == database.PostgreSQL {
		q = dollarPlaceholders(q)
	}
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("raw grouped create: insert outbox rows: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("raw grouped create: commit: %w", err)
	}
	return nil
}

// rowsOf is row written n times, comma-separated.
func rowsOf(row string, n int) string {
	return strings.TrimSuffix(strings.Repeat(row+",", n), ",")
}

// insertedIDs runs q, an INSERT of n rows, and returns their ids in order:
// RETURNING on PostgreSQL and SQLite, and on MySQL the first id and those
// following it (InnoDB gives the rows of one INSERT of known size
// consecutive ids).
func insertedIDs(ctx context.Context, tx *sql.Tx, dialect database.Dialect, q string, n int, args []any) ([]int64, error) {
	ids := make([]int64, 0, n)
	if dialect == database.MySQL {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		first, err := res.LastInsertId()
		if err != nil {
			return nil, err
		}
		for i := range int64(n) {
			ids = append(ids, first+i)
		}
		return ids, nil
	}
	q += " RETURNING id"
	if dialect == database.PostgreSQL {
		q = dollarPlaceholders(q)
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}
