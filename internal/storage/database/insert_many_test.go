package database_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
)

// manyPost is a few columns of the posts table, among them a nullable
// time and a boolean.
type manyPost struct {
	ID              int64      `gorm:"column:id;primaryKey;autoIncrement"`
	Title           string     `gorm:"column:title"`
	Content         string     `gorm:"column:content"`
	Status          string     `gorm:"column:status"`
	ScheduledAt     time.Time  `gorm:"column:scheduled_at"`
	CreatedAt       time.Time  `gorm:"column:created_at;autoCreateTime:false"`
	UpdatedAt       time.Time  `gorm:"column:updated_at;autoUpdateTime:false"`
	PublishBy       *time.Time `gorm:"column:publish_by"`
	SeriesException bool       `gorm:"column:series_exception"`
	Reannounced     int        `gorm:"column:reannounced"`
}

func (manyPost) TableName() string { return "posts" }

// manyEvent is a few columns of the outbox table: a JSON payload and two
// unique keys, one of them nullable.
type manyEvent struct {
	ID            int64     `gorm:"column:id;primaryKey;autoIncrement"`
	EventID       string    `gorm:"column:event_id"`
	EventType     string    `gorm:"column:event_type"`
	AggregateID   int64     `gorm:"column:aggregate_id"`
	Payload       string    `gorm:"column:payload"`
	Created       time.Time `gorm:"column:created"`
	NextAttemptAt time.Time `gorm:"column:next_attempt_at"`
	DedupKey      *string   `gorm:"column:dedup_key"`
}

func (manyEvent) TableName() string { return "outbox" }

// InsertMany writes every row with its NULLs, times and booleans as given,
// and sets the ids in the rows' order, across the statements it splits the
// rows into (1,000 rows a statement, fewer on SQLite).
func TestInsertManyWritesRowsAndSetsTheirIDsInOrder(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		at := database.Normalize(time.Now().Add(time.Hour))
		by := at.Add(time.Minute)
		rows := make([]*manyPost, 2345)
		for i := range rows {
			rows[i] = &manyPost{Title: strings.Repeat("t", i%7+1), Content: "c\u00e9\U0001F600", Status: "RESERVED",
				ScheduledAt: at.Add(time.Duration(i) * time.Second), CreatedAt: at, UpdatedAt: at, Reannounced: i % 3}
			if i%2 == 0 {
				rows[i].PublishBy, rows[i].SeriesException = &by, true
			}
		}
		require.NoError(t, database.Transaction(context.Background(), db.DB, func(tx *gorm.DB) error {
			return database.InsertMany(tx, rows)
		}))
		var stored []manyPost
		require.NoError(t, db.Order("id").Find(&stored).Error)
		require.Len(t, stored, len(rows))
		for i, r := range rows {
			require.Positive(t, r.ID)
			if i > 0 {
				require.Greater(t, r.ID, rows[i-1].ID, "ids follow the rows' order")
			}
			require.Equal(t, *r, stored[i], "row %d", i)
		}
	})
}

// A taken unique key fails the whole statement as gorm.ErrDuplicatedKey and
// writes none of its rows; a text too long for its column is refused, not
// cut.
func TestInsertManyRefusesTakenKeysAndLongTextWhole(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		now := database.Normalize(time.Now())
		key := "k1"
		events := []manyEvent{
			{EventID: "e1", EventType: "POSTING_EVENT", AggregateID: 1, Payload: `{"postId":1,"n":[1,2]}`, Created: now, NextAttemptAt: now, DedupKey: &key},
			{EventID: "e2", EventType: "POSTING_EVENT", AggregateID: 1, Payload: `{"postId":1}`, Created: now, NextAttemptAt: now},
		}
		require.NoError(t, database.Transaction(context.Background(), db.DB, func(tx *gorm.DB) error {
			return database.InsertMany(tx, events)
		}))
		var payload string
		require.NoError(t, db.Raw("SELECT payload FROM outbox WHERE id = ?", events[0].ID).Scan(&payload).Error)
		require.JSONEq(t, `{"postId":1,"n":[1,2]}`, payload)

		again := []manyEvent{
			{EventID: "e3", EventType: "POSTING_EVENT", AggregateID: 2, Payload: `{}`, Created: now, NextAttemptAt: now},
			{EventID: "e4", EventType: "POSTING_EVENT", AggregateID: 2, Payload: `{}`, Created: now, NextAttemptAt: now, DedupKey: &key},
		}
		err := database.Transaction(context.Background(), db.DB, func(tx *gorm.DB) error {
			return database.InsertMany(tx, again)
		})
		require.ErrorIs(t, err, gorm.ErrDuplicatedKey)
		var n int64
		require.NoError(t, db.Table("outbox").Count(&n).Error)
		require.EqualValues(t, 2, n, "the refused statement wrote nothing")

		if db.Dialect == database.SQLite {
			return // SQLite does not hold VARCHAR to its length
		}
		long := []manyPost{{Title: strings.Repeat("x", 201), Content: "c", Status: "RESERVED", ScheduledAt: now, CreatedAt: now, UpdatedAt: now}}
		err = database.Transaction(context.Background(), db.DB, func(tx *gorm.DB) error {
			return database.InsertMany(tx, long)
		})
		require.Error(t, err)
		require.NoError(t, db.Table("posts").Count(&n).Error)
		require.Zero(t, n)
	})
}

// A MySQL server stepping AUTO_INCREMENT by more than 1 (a Galera cluster's
// auto_increment_increment is its size) gives a multi-row INSERT's rows ids
// that GORM, reading back the first without RETURNING (MySQL 8), numbers
// one by one: the service refuses such a server at open rather than answer,
// and write events for, the ids of other rows. MariaDB 10.5 and later
// return each row's id (RETURNING), and are taken whatever the step. The
// URL's own auto_increment_increment=1 (a session variable) is taken.
func TestMySQLWithAnAutoIncrementStepOtherThanOneIsRefusedAtOpen(t *testing.T) {
	t.Parallel()
	url := databasetest.MySQLURL(t, "")
	stepped := url + "?auto_increment_increment=2"
	insertThree := func(t *testing.T, db *database.DB) {
		at := database.Normalize(time.Now())
		rows := []*manyPost{{Title: "a"}, {Title: "b"}, {Title: "c"}}
		for _, r := range rows {
			r.Status, r.ScheduledAt, r.CreatedAt, r.UpdatedAt = "RESERVED", at, at, at
		}
		require.NoError(t, database.Transaction(context.Background(), db.DB, func(tx *gorm.DB) error {
			return database.InsertMany(tx, rows)
		}))
		for _, r := range rows {
			var got manyPost
			require.NoError(t, db.Where("id = ?", r.ID).Take(&got).Error, "post %q was answered id %d, which no row has", r.Title, r.ID)
			require.Equal(t, r.Title, got.Title, "post %q was answered the id of another", r.Title)
		}
	}

	db, err := database.Open(stepped, "")
	if err == nil { // MariaDB: through RETURNING
		t.Cleanup(func() { _ = db.Close() })
		databasetest.Migrate(t, db)
		insertThree(t, db)
	} else {
		require.ErrorContains(t, err, "auto_increment_increment is 2")
	}

	db, err = database.OpenMySQLWithoutReturning(stepped)
	if err == nil {
		t.Cleanup(func() { _ = db.Close() })
		insertThree(t, db)
		t.Fatal("opened a server stepping AUTO_INCREMENT by 2")
	}
	require.ErrorContains(t, err, "auto_increment_increment is 2")

	db, err = database.OpenMySQLWithoutReturning(url + "?auto_increment_increment=1")
	require.NoError(t, err)
	insertThree(t, db)
	require.NoError(t, db.Close())
}
