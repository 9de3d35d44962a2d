package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/postingsvc/posting/internal/storage/database"
)

// ErrClaimLost is returned when a claimed batch could not be written as a
// whole; the claim transaction was rolled back and nothing was claimed.
var ErrClaimLost = errors.New("outbox claim lost")

// maxPairsPerStatement bounds the (id, version) pairs of one statement, far
// below the placeholder limits of MySQL (65535) and SQLite (32766).
const maxPairsPerStatement = 1000

// Store claims, acknowledges and recovers outbox rows for the relay. Every
// result write carries the version the claim produced, so a relay whose claim
// was recovered by another instance cannot overwrite the newer state.
type Store struct {
	db  *gorm.DB
	drv database.Driver
	// clock is the time every instance compares against: the database's,
	// read through db (the pool, or a transaction of it).
	clock func(ctx context.Context, db *gorm.DB) (time.Time, error)
	// clockInReads: the clock is a server's (MySQL, PostgreSQL) and not
	// replaced (WithClock), so a claim takes it as a column of its read of
	// candidates instead of reading it first (see candidates).
	clockInReads bool
	// deferAcks makes DefersAcksToNextClaim true on every dialect (tests).
	deferAcks bool
	// expectRows skips MarkSentAndClaim's plain read before its
	// transaction (ExpectingRows).
	expectRows bool
}

// NewStore returns a Store on db. It panics on a dialect without a
// database.Driver, which database.Open never returns.
func NewStore(db *database.DB) *Store {
	return &Store{db: db.DB, drv: db.Driver(), clock: database.Now, clockInReads: db.Dialect != database.SQLite}
}

// WithClock returns a copy of the store whose Now reads now instead of the
// database's clock: tests move the shared clock by hand with it.
func (s *Store) WithClock(now func() time.Time) *Store {
	c := *s
	c.clock = func(context.Context, *gorm.DB) (time.Time, error) { return database.Normalize(now()), nil }
	c.clockInReads = false
	return &c
}

// Now returns the time that claims, retries and stale recovery are measured
// in: the database's clock (database.Now), shared by every instance. A
// claim's claimed_at and a retry's next_attempt_at are written by one
// instance and compared by another, so neither may come from an instance's
// own clock: a relay whose clock ran 3 minutes ahead took other relays' live
// claims for stale and sent their rows twice.
func (s *Store) Now(ctx context.Context) (time.Time, error) { return s.clock(ctx, s.db) }

// DB returns the store's database handle.
func (s *Store) DB() *gorm.DB { return s.db }

// Claim marks up to limit due rows PROCESSING for owner and returns them,
// oldest first by (created, id), with the versions of the claim. A row is due
// when it is PENDING, or RETRY with next_attempt_at <= now (now should come
// from Now), and it is the
// earliest unsent event of its aggregate: a later event of an aggregate is
// never claimed while an earlier one is PENDING, RETRY, PROCESSING or FAIL,
// whoever holds it, which keeps per-key order across retries, instances and
// crashes.
//
// The claim is short and ends before any network call. On MySQL and SQLite
// it is one transaction: a plain read picks the candidates, a locking read
// by primary key (FOR UPDATE SKIP LOCKED on MySQL, where concurrent
// claimers skip each other's rows instead of waiting; SQLite transactions
// are serialized by BEGIN IMMEDIATE) re-checks their status, and one
// version-checked UPDATE takes them (one UPDATE ... RETURNING does both on
// SQLite, see claimRows). On PostgreSQL one statement reads the candidates
// and takes those still due (claimWindowAtOnce). When other claimers held
// some of the candidates, the next window of candidates is claimed the same
// way (see claimHeads).
func (s *Store) Claim(ctx context.Context, owner string, limit int, now time.Time) ([]Message, error) {
	claimed, _, err := s.MarkSentAndClaim(ctx, nil, time.Time{}, owner, limit, now)
	return claimed, err
}

// DefersAcksToNextClaim reports whether a relay should leave the
// acknowledgements of a full batch to MarkSentAndClaim of its next poll
// instead of writing them at once: true where the database locks rows, false
// where writers take turns on the whole database (database.Driver's
// SingleWriter: SQLite).
//
// On MySQL writing a full batch's acknowledgements with the next claim saves
// a durable commit and two round trips per batch. On PostgreSQL, where the
// two are statements of their own (claimAtOnce), it saves the BEGIN and
// COMMIT of a transaction for the acknowledgements alone: two of the three
// round trips of their write. On SQLite a commit in WAL mode is cheap, and every
// write transaction takes the one write lock, so a relay that went straight
// from one batch's send to its next claim would hold that lock back to back
// and starve the other instances on the file.
func (s *Store) DefersAcksToNextClaim() bool { return s.deferAcks || !s.drv.SingleWriter() }

// WithDeferredAcks returns a copy of the store whose DefersAcksToNextClaim
// is true whatever the dialect, so that tests on SQLite exercise the
// deferred path too (MarkSentAndClaim works on every dialect).
func (s *Store) WithDeferredAcks() *Store {
	c := *s
	c.deferAcks = true
	return &c
}

// ExpectingRows returns a copy of the store whose MarkSentAndClaim, with
// nothing to acknowledge, goes straight to its claim's transaction instead
// of first looking for a due row with a plain read: for a caller that
// knows rows are waiting (it was woken by a commit, or its last batch came
// back full), for which that read is one more round trip between a commit
// and its send. With no row due after all, the transaction claims nothing.
func (s *Store) ExpectingRows() *Store {
	c := *s
	c.expectRows = true
	return &c
}

// MarkSentAndClaim records the broker's acknowledgement of sent, as MarkSent
// does, and claims the next batch, as Claim does, in one transaction on
// MySQL and SQLite: a relay that moves full batches back to back pays one
// commit per batch instead of two. On PostgreSQL each is a statement of its
// own, with no transaction around them (claimAtOnce). The acknowledgements
// are written first, so the events that follow them on their aggregates are
// claimable by the same call. It returns the claimed rows and how many rows
// of sent were fenced; on error the caller still holds sent, and nothing
// was written, except on PostgreSQL, where the caller reads back what was
// (claimAtOnce).
//
// A zero now means the store's clock (Now), read inside the transaction once
// its locks are held: the claim is stamped with the time it is taken, not
// the time its caller started, which a wait for the database (a lock held by
// another transaction, a busy SQLite file) would have made older than it is,
// up to stale for other instances before the send has begun. On MySQL and
// PostgreSQL the clock comes with the claim's read of its candidates, a
// column of that statement, not a round trip of its own (see candidates).
func (s *Store) MarkSentAndClaim(ctx context.Context, sent []Message, sentAt time.Time, owner string, limit int,
	now time.Time) (claimed []Message, fenced int, err error) {
	// readClock: the clock is the store's own statement (SQLite's, or a
	// test's WithClock), not a column of the claim's read.
	readClock := now.IsZero() && !s.clockInReads
	now = database.Normalize(now)
	if s.ClaimsInOneStatement() {
		return s.claimAtOnce(ctx, sent, sentAt, owner, limit, now, readClock)
	}
	if len(sent) == 0 {
		if limit <= 0 {
			return nil, 0, nil
		}
		// Nothing to write: unless the caller expects rows, a plain read
		// first, so that an idle poll costs no write transaction (on SQLite
		// every transaction takes the one write lock at BEGIN).
		if !s.expectRows {
			at := now
			if readClock {
				if at, err = s.Now(ctx); err != nil {
					return nil, 0, err
				}
			}
			if ids, err := s.candidates(s.db.WithContext(ctx), 1, at, nil); err != nil || len(ids) == 0 {
				return nil, 0, err
			}
		}
	}
	err = database.Transaction(ctx, s.db, func(tx *gorm.DB) error {
		claimed, fenced = nil, 0
		if len(sent) > 0 {
			var err error
			if fenced, err = s.markSent(tx, sent, sentAt); err != nil {
				return fmt.Errorf("mark sent: %w", err)
			}
		}
		if limit <= 0 {
			return nil
		}
		now := now
		if readClock {
			var err error
			if now, err = s.clock(ctx, tx); err != nil {
				return err
			}
		}
		var err error
		claimed, err = s.claimHeads(tx, limit, owner, now)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return claimed, fenced, nil
}

// ClaimsInOneStatement reports whether a window of candidates is read and
// claimed by one statement (claimWindowAtOnce), so that a claim with
// nothing to acknowledge runs outside a transaction, with no plain read
// before it (claimAtOnce): where an UPDATE returns its rows and rows are
// locked, PostgreSQL.
func (s *Store) ClaimsInOneStatement() bool { return s.drv.UpdateReturning() && !s.drv.SingleWriter() }

// claimAtOnce is MarkSentAndClaim where a window is claimed by one
// statement (ClaimsInOneStatement): every statement is its own
// transaction, with no BEGIN and COMMIT around them, and no plain read goes
// before the claim, since a claim that finds no row writes nothing
// (PostgreSQL gives a statement that changed no row no transaction id, and
// its end no WAL flush). The acknowledgements are written first, by their
// own statement (one per maxPairsPerStatement rows), so the claim, which
// reads the latest committed rows, sees their posts' next events. Between a
// commit and its send that is one round trip instead of four, and a poll
// that writes acknowledgements and claims pays two instead of five, for a
// second WAL flush when both write.
//
// On an error some of it may have been written: acknowledgements, or the
// windows before the one that failed. The error returns no row and no
// count, and the caller treats the claim as one whose answer was lost: it
// reads back which acknowledgements were written and what its owner holds
// (Relay.releaseLost), as after a commit without an answer.
func (s *Store) claimAtOnce(ctx context.Context, sent []Message, sentAt time.Time, owner string, limit int,
	now time.Time, readClock bool) ([]Message, int, error) {
	db := s.db.WithContext(ctx)
	fenced := 0
	if len(sent) > 0 {
		var err error
		if fenced, err = s.markSent(db, sent, sentAt); err != nil {
			return nil, 0, fmt.Errorf("mark sent: %w", err)
		}
	}
	if limit <= 0 {
		return nil, fenced, nil
	}
	if readClock {
		var err error
		if now, err = s.Now(ctx); err != nil {
			return nil, 0, err
		}
	}
	claimed, err := s.claimHeads(db, limit, owner, now)
	if err != nil {
		return nil, 0, err
	}
	return claimed, fenced, nil
}

// claimRounds bounds the windows of candidates one claim reads: the first,
// and one more each time other claimers held some of a window's heads, up to
// a relay racing three others for the same oldest heads.
const claimRounds = 4

// claimHeads claims up to limit heads through tx (a transaction, or on
// PostgreSQL also the pool: see claimAtOnce), window by window. Claimers that
// poll at once read the same oldest candidates; the one that locks them first
// takes them, and the others skip them (SKIP LOCKED) or find them claimed.
// Instead of returning the short batch that leaves, a claimer reads the next
// window, the heads after the last candidate it tried, and claims those, up
// to claimRounds windows: four relays on one backlog each move full batches
// instead of racing for one.
//
// Candidates are read after any acknowledgement the transaction wrote:
// they include the successors of the rows just marked SENT, and on
// SQLite no other claimer can take them before the lock (the first window
// is then claimed whole and no other is read). A later window starts after
// the last candidate of the one before, by (created, id), so it reads only
// rows not tried yet, whatever the read sees of the rows tried: on MySQL
// the transaction's snapshot, where another claimer's rows still look due;
// on PostgreSQL the latest committed rows. Its heads are heads in that
// view, and a row the view shows as the head of its aggregate stays the
// head until it is itself claimed (see claimRows); every id is locked and
// re-checked by the claim, so it is claimed only while still due and
// unclaimed.
//
// A zero now is the database's clock as the first window's read gives it
// (candidates, or claimWindowAtOnce's statement), which every later window
// and the claim's stamp then use: every row of a claim carries one stamp.
func (s *Store) claimHeads(tx *gorm.DB, limit int, owner string, now time.Time) ([]Message, error) {
	var (
		claimed []Message
		after   *candidate
	)
	for round := 0; round < claimRounds && len(claimed) < limit; round++ {
		need := limit - len(claimed)
		w, err := s.claimWindow(tx, need, owner, now, after)
		if err != nil {
			return nil, err
		}
		claimed = append(claimed, w.claimed...)
		if w.size < need {
			break // no head beyond this window
		}
		now, after = w.now, &w.last
	}
	sortClaimed(claimed)
	return claimed, nil
}

// window is what one window of a claim did: the rows it claimed, how many
// candidates it read and the last of them by (created, id), where the next
// window starts, and the time the claim was stamped with.
type window struct {
	claimed []Message
	size    int
	last    candidate
	now     time.Time
}

// claimWindow claims the due heads among up to need candidates after
// after: by one statement where the database has what it takes
// (claimWindowAtOnce), else a read of the candidates and claimRows. A row
// tried by an earlier window and read again (a created that did not
// round-trip exactly) is not claimed twice: the claim re-checks that each
// row is still due, and the transaction sees its own claims.
func (s *Store) claimWindow(tx *gorm.DB, need int, owner string, now time.Time, after *candidate) (window, error) {
	if s.ClaimsInOneStatement() {
		return s.claimWindowAtOnce(tx, need, owner, now, after)
	}
	cands, err := s.candidates(tx, need, now, after)
	if err != nil || len(cands) == 0 {
		return window{}, err
	}
	if now.IsZero() {
		now = database.Normalize(cands[0].Now)
	}
	ids := make([]int64, len(cands))
	for i, c := range cands {
		ids[i] = c.ID
	}
	rows, err := s.claimRows(tx, ids, owner, now)
	if err != nil {
		return window{}, err
	}
	return window{claimed: rows, size: len(cands), last: cands[len(cands)-1], now: now}, nil
}

// claimWindowAtOnce reads a window of candidates and claims its due heads
// in one statement, on PostgreSQL: the read of candidates (headsSQL), then,
// as claimReturning does, an UPDATE ... RETURNING of those rows still due,
// locked FOR UPDATE SKIP LOCKED (under READ COMMITTED the lock re-checks
// each row's latest version, so a row another claimer took meanwhile is
// not due any more, and a row it holds is skipped). The statement also
// returns how many candidates the window read and the last of them, so a
// claimer whose rows others took reads the next window, and the time it
// stamped the claim with: a zero now is the database's clock
// (database.NowExpr), read once by the statement for its due check and
// its stamp. Its rows are the window's description joined to the claimed
// rows, one row with no claimed row when it claimed none.
//
// The lock looks the rows up by primary key (= ANY of an array): a
// semi-join against the window would let the planner scan every PENDING
// row of a backlog instead.
func (s *Store) claimWindowAtOnce(tx *gorm.DB, need int, owner string, now time.Time, after *candidate) (window, error) {
	cols, err := returningColumns(tx)
	if err != nil {
		return window{}, err
	}
	clock := clause.Expr{SQL: "CAST(? AS timestamptz)", Vars: []any{now}}
	if now.IsZero() {
		clock = database.NowExpr(tx)
	}
	heads, headVars := s.headsSQL("(SELECT t FROM k)", nil, need, after)
	q := `WITH k AS MATERIALIZED (SELECT ` + clock.SQL + ` AS t),
w AS MATERIALIZED (` + heads + `),
c AS (UPDATE outbox SET status = ?, version = version + 1, claimed_by = ?, claimed_at = (SELECT t FROM k)
  WHERE id IN (SELECT x.id FROM outbox x WHERE x.id = ANY(ARRAY(SELECT id FROM w))
    AND (x.status = ? OR (x.status = ? AND x.next_attempt_at <= (SELECT t FROM k)))
    FOR UPDATE SKIP LOCKED)
  RETURNING ` + cols + `)
SELECT n.window_n, l.last_id, l.last_created, k.t AS db_now, c.* FROM k
CROSS JOIN (SELECT count(*) AS window_n FROM w) n
LEFT JOIN (SELECT id AS last_id, created AS last_created FROM w ORDER BY created DESC, id DESC LIMIT 1) l ON true
LEFT JOIN c ON true`
	vars := append(append(slices.Clip(clock.Vars), headVars...), StatusProcessing, owner, StatusPending, StatusRetry)
	var rows []windowRow
	if err := tx.Raw(q, vars...).Scan(&rows).Error; err != nil {
		return window{}, fmt.Errorf("claim rows: %w", err)
	}
	if len(rows) == 0 {
		return window{}, fmt.Errorf("claim rows: %w: the statement returned no row", ErrClaimLost)
	}
	w := window{size: rows[0].WindowN, now: database.Normalize(rows[0].DBNow)}
	if rows[0].LastID != nil && rows[0].LastCreated != nil {
		w.last = candidate{ID: *rows[0].LastID, Created: *rows[0].LastCreated}
	}
	for _, r := range rows {
		if r.ID != 0 {
			w.claimed = append(w.claimed, r.Message)
		}
	}
	return w, nil
}

// windowRow is a row of claimWindowAtOnce: a claimed row (zero when it
// claimed none) with the window's description.
type windowRow struct {
	Message
	WindowN     int        `gorm:"column:window_n"`
	LastID      *int64     `gorm:"column:last_id"`
	LastCreated *time.Time `gorm:"column:last_created"`
	DBNow       time.Time  `gorm:"column:db_now"`
}

// claimRows takes the candidates ids that are still due and unclaimed:
// locks them, then marks them PROCESSING under a version check. It returns
// them in no set order: claimHeads puts the whole claim in (created, id)
// order once.
func (s *Store) claimRows(tx *gorm.DB, ids []int64, owner string, now time.Time) ([]Message, error) {
	// No ORDER BY: sorting whole rows is server work; claimHeads sorts the
	// few hundred rows. On MySQL the candidates come from the
	// transaction's snapshot and this locking read sees the latest rows, so
	// it checks again that they are due and unclaimed. A candidate stays the
	// head of its aggregate until it is itself claimed: the rows before it are
	// SENT or discarded, and neither is ever undone.
	if s.drv.UpdateReturning() {
		rows, err := s.claimReturning(tx, ids, owner, now)
		if err != nil {
			return nil, fmt.Errorf("claim rows: %w", err)
		}
		return rows, nil
	}
	// Where rows are locked, concurrent claimers skip each other's rows
	// instead of waiting (FOR UPDATE SKIP LOCKED); SQLite transactions are
	// serialized by BEGIN IMMEDIATE, so the claim's already holds the one
	// write lock when it reads.
	// Both statements by primary key (byKey).
	lock := s.drv.ForUpdateSkipLocked(
		s.byKey(tx).Where("id IN ? AND (status = ? OR (status = ? AND next_attempt_at <= ?))", ids, StatusPending, StatusRetry, now))
	var rows []Message
	if err := lock.Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("lock candidates: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	// The version check cannot fail while the rows are locked (FOR UPDATE
	// on MySQL, BEGIN IMMEDIATE on SQLite): it stays as the guard for a
	// dialect that would claim without the lock, with the count below.
	res := s.byKey(tx).
		Where("status IN ?", []Status{StatusPending, StatusRetry}).
		Where(s.versionMatch(rows)).
		Updates(map[string]any{
			"status":     StatusProcessing,
			"version":    gorm.Expr("version + 1"),
			"claimed_by": owner,
			"claimed_at": now,
		})
	if res.Error != nil {
		return nil, fmt.Errorf("claim rows: %w", res.Error)
	}
	if int(res.RowsAffected) != len(rows) {
		return nil, fmt.Errorf("%w: %d of %d rows changed under the lock", ErrClaimLost, res.RowsAffected, len(rows))
	}
	for i := range rows {
		rows[i].Status = StatusProcessing
		rows[i].Version++
		rows[i].ClaimedBy = &owner
		rows[i].ClaimedAt = &now
	}
	return rows, nil
}

// claimReturning claims the rows of ids that are still due (status
// PENDING, or RETRY with next_attempt_at <= now) and not locked by another
// claimer, on a database with UPDATE ... RETURNING: one statement locks,
// updates and returns them as claimed (status PROCESSING, version bumped),
// one round trip and one pass over the rows instead of a locking read of the
// full rows and then an UPDATE. Its subquery picks the due rows FOR UPDATE
// SKIP LOCKED where rows are locked (PostgreSQL): under READ COMMITTED it
// re-checks each row's latest version, so a row another claimer took
// meanwhile is not due any more, and a row it holds is skipped. On SQLite the
// transaction holds the file's write lock since BEGIN IMMEDIATE, so no other
// claimer can take them in between.
func (s *Store) claimReturning(tx *gorm.DB, ids []int64, owner string, now time.Time) ([]Message, error) {
	cols, err := returningColumns(tx)
	if err != nil {
		return nil, err
	}
	due := s.drv.ForUpdateSkipLocked(tx.Model(&Message{}).Select("id").
		Where(s.drv.KeysIn("id", ids)).
		Where("(status = ? OR (status = ? AND next_attempt_at <= ?))", StatusPending, StatusRetry, now))
	var rows []Message
	err = tx.Raw(`UPDATE outbox SET status = ?, version = version + 1, claimed_by = ?, claimed_at = ?
WHERE id IN (?)
RETURNING `+cols, StatusProcessing, owner, now, due).Scan(&rows).Error
	return rows, err
}

// returningColumns is the RETURNING list of a claim: Message's columns by
// name, not *. PostgreSQL's driver caches each statement's plan per
// connection, and a cached RETURNING * fails with "cached plan must not
// change result type" once a migration (a rolling upgrade) adds a column.
func returningColumns(tx *gorm.DB) (string, error) {
	stmt := &gorm.Statement{DB: tx}
	if err := stmt.Parse(&Message{}); err != nil {
		return "", fmt.Errorf("outbox columns: %w", err)
	}
	cols := make([]string, len(stmt.Schema.DBNames))
	for i, name := range stmt.Schema.DBNames {
		cols[i] = stmt.Quote(name)
	}
	return strings.Join(cols, ", "), nil
}

// versionMatch is the set-based optimistic lock over msgs: "this row still
// has the version I hold", for every (id, version) of msgs, as a condition
// the database resolves by primary key.
func (s *Store) versionMatch(msgs []Message) clause.Expr {
	pairs := make([]database.Pair, len(msgs))
	for i, m := range msgs {
		pairs[i] = database.Pair{First: m.ID, Second: m.Version}
	}
	return s.drv.PairsIn("id", "version", pairs)
}

// sortClaimed puts claimed rows in claim order, (created, id): sorting a
// few hundred rows here spares the database a sort of whole rows.
func sortClaimed(rows []Message) {
	slices.SortFunc(rows, func(a, b Message) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

// candidates returns up to limit due rows that are the head of their
// aggregate's unsent events, after the row after by (created, id) when it
// is not nil. PENDING and RETRY are read by two index-ordered
// scans of idx_outbox_status_created_id, merged, so neither needs a sort.
// A PENDING row is always due: it is new, released after an outage (it was
// due then) or requeued. Its next_attempt_at comes from the clock of the
// instance that wrote it, so it is not compared: a row written by an
// instance whose clock ran ahead would wait that far. The
// head check looks for an earlier row of the aggregate that still holds it
// (PENDING, RETRY, PROCESSING or FAIL, not discarded): unsent_aggregate_id, a generated
// column (migration 00004), is the aggregate id exactly for those rows, so
// the check is one dive into idx_outbox_unsent_aggregate_id that skips the
// aggregate's SENT history.
//
// A zero now is the database's clock (database.NowExpr), read by this
// statement: each row carries a reading of it (candidate.Now), and a claim
// stamps its rows with the first row's, without a round trip of its own for
// the clock between a commit and its send. On PostgreSQL a claim reads its
// candidates inside its one statement instead (claimWindowAtOnce), which
// reads the clock once for the due check and the stamp.
func (s *Store) candidates(tx *gorm.DB, limit int, now time.Time, after *candidate) ([]candidate, error) {
	var q string
	var vars []any
	if now.IsZero() {
		clock := database.NowExpr(tx)
		q, vars = s.headsSQL(clock.SQL, clock.Vars, limit, after)
		// The clock as a column outside the union: inside, PostgreSQL
		// would sort the two scans' rows instead of merging them in index
		// order.
		q = "SELECT id, created, " + clock.SQL + " AS db_now FROM (\n" + q + ") w ORDER BY created, id"
		vars = append(slices.Clip(clock.Vars), vars...)
	} else {
		q, vars = s.headsSQL("?", []any{now}, limit, after)
	}
	var rows []candidate
	if err := tx.Raw(q, vars...).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("find claim candidates: %w", err)
	}
	return rows, nil
}

// headsSQL is the read of candidates: up to limit due heads, after the
// row after by (created, id) when it is not nil, as id and created,
// ordered. clock (with its vars) is the time RETRY rows are due by.
func (s *Store) headsSQL(clock string, clockVars []any, limit int, after *candidate) (string, []any) {
	next, args := "", []any(nil)
	if after != nil {
		// In the form the database reads as a range of the index after
		// the status.
		c := s.drv.After("o.created", "o.id", after.Created, after.ID)
		next, args = " AND "+c.SQL, c.Vars
	}
	part := func(due, alias string) string {
		return `SELECT id, created FROM (
	SELECT o.id, o.created FROM outbox o
	WHERE ` + due + next + `
	  AND NOT EXISTS (SELECT 1 FROM outbox e
	    WHERE e.unsent_aggregate_id = o.aggregate_id AND e.id < o.id)
	ORDER BY o.created, o.id LIMIT ?) ` + alias
	}
	q := part("o.status = ?", "p") + "\nUNION ALL\n" + part("o.status = ? AND o.next_attempt_at <= "+clock, "r") +
		"\nORDER BY created, id LIMIT ?"
	vars := append(append([]any{StatusPending}, args...), limit, StatusRetry)
	vars = append(append(append(vars, clockVars...), args...), limit, limit)
	return q, vars
}

// candidate is a row candidates found: its id, its created for the next
// window to start after, and, when candidates read the database's clock,
// that reading.
type candidate struct {
	ID      int64
	Created time.Time
	Now     time.Time `gorm:"column:db_now"`
}

// MarkSent records the broker's acknowledgement of claimed rows: SENT with
// sent_at. Rows whose claim is no longer current (recovered by another
// instance) are left alone; their number is returned as fenced.
func (s *Store) MarkSent(ctx context.Context, msgs []Message, at time.Time) (fenced int, err error) {
	err = database.Transaction(ctx, s.db, func(tx *gorm.DB) error {
		fenced, err = s.markSent(tx, msgs, at)
		return err
	})
	if err != nil {
		return fenced, fmt.Errorf("mark sent: %w", err)
	}
	return fenced, nil
}

func (s *Store) markSent(tx *gorm.DB, msgs []Message, at time.Time) (fenced int, err error) {
	return s.updateClaimedTx(tx, msgs, map[string]any{
		"status":  StatusSent,
		"sent_at": database.Normalize(at),
	})
}

// updateClaimed applies changes to the rows of msgs that are still
// PROCESSING under the version their claim gave them, bumping the version,
// in one transaction of bounded statements; it returns how many rows were
// fenced (no longer held by this claim).
func (s *Store) updateClaimed(ctx context.Context, msgs []Message, changes map[string]any) (fenced int, err error) {
	err = database.Transaction(ctx, s.db, func(tx *gorm.DB) error {
		fenced, err = s.updateClaimedTx(tx, msgs, changes)
		return err
	})
	return fenced, err
}

func (s *Store) updateClaimedTx(tx *gorm.DB, msgs []Message, changes map[string]any) (fenced int, err error) {
	changes["version"] = gorm.Expr("version + 1")
	for chunk := range slices.Chunk(msgs, maxPairsPerStatement) {
		res := s.byKey(tx).
			Where("status = ?", StatusProcessing).
			Where(s.versionMatch(chunk)).
			Updates(changes)
		if res.Error != nil {
			return 0, res.Error
		}
		fenced += len(chunk) - int(res.RowsAffected)
	}
	return fenced, nil
}

// Failure is a failed send attempt of one claimed row.
type Failure struct {
	// Message is the row as claimed.
	Message Message
	// Err says why; it becomes last_error.
	Err string
	// NextAttemptAt is when the row is due again if it is retried.
	NextAttemptAt time.Time
	// Final makes the row FAIL instead of RETRY.
	Final bool
}

// MarkFailed records failed attempts: retry_count+1, last_error, and RETRY
// with next_attempt_at, or FAIL when the failure is final. Rows whose claim is
// no longer current are left alone and counted as fenced.
func (s *Store) MarkFailed(ctx context.Context, failures []Failure) (fenced int, err error) {
	err = database.Transaction(ctx, s.db, func(tx *gorm.DB) error {
		fenced = 0
		for _, f := range failures {
			status := StatusRetry
			if f.Final {
				status = StatusFail
			}
			res := tx.Model(&Message{}).
				Where("id = ? AND version = ? AND status = ?", f.Message.ID, f.Message.Version, StatusProcessing).
				Updates(map[string]any{
					"status":          status,
					"retry_count":     gorm.Expr("retry_count + 1"),
					"next_attempt_at": database.Normalize(f.NextAttemptAt),
					"last_error":      database.TruncateError(f.Err),
					"version":         gorm.Expr("version + 1"),
				})
			if res.Error != nil {
				return fmt.Errorf("mark failed: %w", res.Error)
			}
			fenced += 1 - int(res.RowsAffected)
		}
		return nil
	})
	return fenced, err
}

// Release hands claimed rows back without spending an attempt: PENDING when
// they never failed, RETRY otherwise, due as before. The relay releases a
// batch the broker could not be reached for, since an outage is not the
// rows' fault.
func (s *Store) Release(ctx context.Context, msgs []Message) (fenced int, err error) {
	fenced, err = s.updateClaimed(ctx, msgs, map[string]any{
		"status": gorm.Expr("CASE WHEN retry_count = 0 THEN ? ELSE ? END", StatusPending, StatusRetry),
	})
	if err != nil {
		return fenced, fmt.Errorf("release: %w", err)
	}
	return fenced, nil
}

// ClaimedBy returns the rows owner holds PROCESSING, ordered by id. A relay
// whose claim got no answer (the connection lost during its commit) reads
// back what that claim may have taken, to release it at once instead of
// leaving it to stale recovery.
func (s *Store) ClaimedBy(ctx context.Context, owner string) ([]Message, error) {
	var rows []Message
	err := s.db.WithContext(ctx).Where("status = ? AND claimed_by = ?", StatusProcessing, owner).Order("id").Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("claimed by %s: %w", owner, err)
	}
	return rows, nil
}

// WrittenSent returns the ids of msgs (rows as claimed) that are SENT at
// the version their SENT write gives, the write of this very claim: a
// relay whose combined acknowledgement and claim got no answer finds out
// which acknowledgements that commit wrote.
func (s *Store) WrittenSent(ctx context.Context, msgs []Message) (map[int64]bool, error) {
	want := make(map[int64]int64, len(msgs))
	for _, m := range msgs {
		want[m.ID] = m.Version + 1
	}
	written := map[int64]bool{}
	for chunk := range slices.Chunk(msgs, maxPairsPerStatement) {
		ids := make([]int64, len(chunk))
		for i, m := range chunk {
			ids[i] = m.ID
		}
		var rows []struct {
			ID      int64
			Version int64
		}
		if err := s.db.WithContext(ctx).Model(&Message{}).Select("id", "version").
			Where("id IN ? AND status = ?", ids, StatusSent).Find(&rows).Error; err != nil {
			return nil, fmt.Errorf("read acknowledgements back: %w", err)
		}
		for _, r := range rows {
			if want[r.ID] == r.Version {
				written[r.ID] = true
			}
		}
	}
	return written, nil
}

// Recovery counts what RecoverStale did.
type Recovery struct {
	// Retried rows went back to RETRY.
	Retried int
	// Failed rows had no attempts left and became FAIL.
	Failed int
}

// staleClaimError is the last_error of a claim RecoverStale took back.
const staleClaimError = "claim expired: the relay instance stopped before recording a result"

// RecoverStale takes back claims older than staleBefore, left by an instance
// that died or hung between claim and result. A recovery counts as a failed
// attempt, so a row that kills its relay every time still ends in FAIL: rows
// that already used maxRetries retries become FAIL, the others RETRY, due at
// retryAt. Bumping the version fences any late write of the old claim.
func (s *Store) RecoverStale(ctx context.Context, staleBefore time.Time, maxRetries int, retryAt time.Time) (Recovery, error) {
	staleBefore, retryAt = database.Normalize(staleBefore), database.Normalize(retryAt)
	var rec Recovery
	// The stale rows by a plain read, before any write lock (stale claims
	// are rare), then changed by primary key (byKey), each UPDATE checking
	// again that they are stale. On MySQL an UPDATE by status and
	// claimed_at reads every PROCESSING entry of
	// idx_outbox_status_created_id with a lock, live claims' rows among
	// them, and waits for their transactions.
	var found []int64
	if err := s.db.WithContext(ctx).Model(&Message{}).Where("status = ? AND claimed_at < ?", StatusProcessing, staleBefore).
		Pluck("id", &found).Error; err != nil || len(found) == 0 {
		return rec, err
	}
	err := database.Transaction(ctx, s.db, func(tx *gorm.DB) error {
		rec = Recovery{}
		for chunk := range slices.Chunk(found, maxPairsPerStatement) {
			stale := func() *gorm.DB {
				return s.byKey(tx).Where(s.drv.KeysIn("id", chunk)).
					Where("status = ? AND claimed_at < ?", StatusProcessing, staleBefore)
			}
			res := stale().Where("retry_count >= ?", maxRetries).Updates(map[string]any{
				"status":      StatusFail,
				"retry_count": gorm.Expr("retry_count + 1"),
				"last_error":  staleClaimError,
				"version":     gorm.Expr("version + 1"),
			})
			if res.Error != nil {
				return fmt.Errorf("fail stale claims: %w", res.Error)
			}
			rec.Failed += int(res.RowsAffected)
			res = stale().Updates(map[string]any{
				"status":          StatusRetry,
				"retry_count":     gorm.Expr("retry_count + 1"),
				"next_attempt_at": retryAt,
				"last_error":      staleClaimError,
				"version":         gorm.Expr("version + 1"),
			})
			if res.Error != nil {
				return fmt.Errorf("recover stale claims: %w", res.Error)
			}
			rec.Retried += int(res.RowsAffected)
		}
		return nil
	})
	return rec, err
}

// byKey is the outbox for statements that name their rows by id: read by
// primary key (Driver.ThroughIndex). On MySQL a locking statement of a few
// ids on a small outbox is otherwise a scan of the whole table, which keeps
// a lock on every row it passes, so another relay's claim would skip or
// wait for rows this one does not take.
func (s *Store) byKey(tx *gorm.DB) *gorm.DB {
	return tx.Table(s.drv.ThroughIndex("outbox", "PRIMARY")).Model(&Message{})
}
