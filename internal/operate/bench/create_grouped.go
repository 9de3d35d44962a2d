package bench

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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
	return writeRows(ctx, sqlDB, dialect, n, n)
}

// writeRows writes n posts and their CREATED events in one transaction, in
// multi-row INSERTs of up to perInsert rows.
func writeRows(ctx context.Context, sqlDB *sql.DB, dialect database.Dialect, n, perInsert int) error {
	tx, err := sqlDB.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("raw create: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	for start := 0; start < n; start += perInsert {
		if err := insertRows(ctx, tx, dialect, min(perInsert, n-start)); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("raw create: commit: %w", err)
	}
	return nil
}

// insertRows writes n posts and their CREATED events through tx, in one
// multi-row INSERT each: on PostgreSQL as one array a column through unnest,
// bound in binary, as the service writes a batch there
// (database.InsertMany), and elsewhere as a VALUES row each.
func insertRows(ctx context.Context, tx *sql.Tx, dialect database.Dialect, n int) error {
	now := database.Normalize(time.Now())
	at := now.Add(scheduledAhead)
	if dialect == database.PostgreSQL {
		return insertArrays(ctx, tx, n, now, at)
	}
	q := "INSERT INTO posts (title, content, status, scheduled_at, created_at, updated_at, version) VALUES " +
		rowsOf("(?, ?, 'RESERVED', ?, ?, ?, 1)", n)
	args := make([]any, 0, 5*n)
	for range n {
		args = append(args, postTitle, postContent, at, now, now)
	}
	ids, err := insertedIDs(ctx, tx, dialect, q, n, args)
	if err != nil {
		return fmt.Errorf("raw create: insert posts: %w", err)
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
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("raw create: insert outbox rows: %w", err)
	}
	return nil
}

// insertArrays is insertRows on PostgreSQL.
func insertArrays(ctx context.Context, tx *sql.Tx, n int, now, at time.Time) error {
	titles, contents, ats, nows := make([]string, n), make([]string, n), make([]time.Time, n), make([]time.Time, n)
	for i := range n {
		titles[i], contents[i], ats[i], nows[i] = postTitle, postContent, at, now
	}
	ids, err := returnedIDs(tx.QueryContext(ctx, `INSERT INTO posts (title, content, status, scheduled_at, created_at, updated_at, version)
		SELECT t, c, 'RESERVED', s, n, n, 1 FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[]) AS r(t, c, s, n)
		RETURNING id`, pgx.QueryExecModeDescribeExec, titles, contents, ats, nows))
	if err != nil {
		return fmt.Errorf("raw create: insert posts: %w", err)
	}
	eventIDs, payloads := make([]string, len(ids)), make([]string, len(ids))
	for i, id := range ids {
		eventID, err := uuid.NewV7()
		if err != nil {
			return err
		}
		eventIDs[i], payloads[i] = eventID.String(), createdPayload(eventID.String(), id, now, at)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO outbox (event_id, event_type, aggregate_id, payload, created, status, retry_count, version, next_attempt_at)
		SELECT e, 'POSTING_EVENT', a, p::jsonb, c, 'PENDING', 0, 1, c FROM unnest($1::text[], $2::bigint[], $3::text[], $4::timestamptz[]) AS r(e, a, p, c)`,
		pgx.QueryExecModeDescribeExec, eventIDs, ids, payloads, nows[:len(ids)]); err != nil {
		return fmt.Errorf("raw create: insert outbox rows: %w", err)
	}
	return nil
}

// rowsOf is row written n times, comma-separated.
func rowsOf(row string, n int) string {
	return strings.TrimSuffix(strings.Repeat(row+",", n), ",")
}

// insertedIDs runs q, an INSERT of n rows in VALUES rows, and returns their
// ids in order: RETURNING on SQLite, and on MySQL the first id and those
// following it (InnoDB gives the rows of one INSERT of known size
// consecutive ids). PostgreSQL writes arrays instead (insertArrays).
func insertedIDs(ctx context.Context, tx *sql.Tx, dialect database.Dialect, q string, n int, args []any) ([]int64, error) {
	if dialect == database.MySQL {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		first, err := res.LastInsertId()
		if err != nil {
			return nil, err
		}
		ids := make([]int64, 0, n)
		for i := range int64(n) {
			ids = append(ids, first+i)
		}
		return ids, nil
	}
	return returnedIDs(tx.QueryContext(ctx, q+" RETURNING id", args...))
}

// returnedIDs reads the ids an INSERT ... RETURNING id gave back, in
// order.
func returnedIDs(rows *sql.Rows, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
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

// rawBatchInsertRows is the most rows of one INSERT of RawBatchCreate, on
// every database: in plain SQL, four INSERTs of 250 rows took about 0.6 of
// the time of one of 1,000 on PostgreSQL; on MariaDB 250 rows wrote as fast
// as 1,000 and on SQLite as fast as 50. The service splits its own
// differently (database.InsertMany: 1,000 rows, bound as arrays on
// PostgreSQL; 50 on SQLite).
const rawBatchInsertRows = 250

// RawBatchCreate is the yardstick of the API's batch creates: the posts of
// batches of size, each with its CREATED event, written by
// reservation.DefaultBatchConcurrency writers at once (as many batch
// transactions as the service runs) for d, each batch in one transaction of
// multi-row INSERTs of up to rawBatchInsertRows rows, in plain SQL. Its
// Count is posts. What the database takes in batches on this machine,
// without HTTP, JSON or validation: the floor of the batch endpoint.
func RawBatchCreate(ctx context.Context, db *database.DB, size int, d time.Duration) (Throughput, error) {
	sqlDB, err := db.DB.DB()
	if err != nil {
		return Throughput{}, err
	}
	t, err := runClients(ctx, reservation.DefaultBatchConcurrency, d, func(ctx context.Context) error {
		return writeRows(ctx, sqlDB, db.Dialect, size, rawBatchInsertRows)
	})
	t.Count *= size
	return t, err
}
