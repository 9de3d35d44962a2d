package inbox

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
)

// Purge deletes inbox rows processed before olderThan, in transactions
// of at most batchSize rows taken in primary-key order (consumer, event_id;
// event ids are UUIDv7, so that is roughly time order), with pause between
// two. Once its row is gone, a redelivery of the event is processed again;
// for the worker that is harmless (a publication is re-created PENDING and
// settled from the post's own status, and the post table is the one that
// says PUBLISHED), and by then Kafka's own retention (7 days by default) has
// usually dropped the message. Safe with several cleaners at once.
func Purge(ctx context.Context, db *gorm.DB, olderThan time.Time, batchSize int, pause time.Duration) (int, error) {
	cutoff := database.Normalize(olderThan)
	return database.PurgeBatches(ctx, db, "inbox rows", batchSize, pause,
		func(db *gorm.DB) ([]Record, error) {
			var rows []Record
			err := db.Select("consumer", "event_id").Where("processed_at < ?", cutoff).
				Order("consumer, event_id").Limit(batchSize).Find(&rows).Error
			return rows, err
		},
		func(tx *gorm.DB, rows []Record) (int64, error) {
			// One statement per consumer (there is one per worker group):
			// "(consumer, event_id) IN" row values are not portable to SQLite.
			byConsumer := map[string][]string{}
			var consumers []string
			for _, r := range rows {
				if _, ok := byConsumer[r.Consumer]; !ok {
					consumers = append(consumers, r.Consumer)
				}
				byConsumer[r.Consumer] = append(byConsumer[r.Consumer], r.EventID)
			}
			var n int64
			for _, consumer := range consumers {
				res := tx.Where("consumer = ? AND event_id IN ? AND processed_at < ?", consumer, byConsumer[consumer], cutoff).
					Delete(&Record{})
				if res.Error != nil {
					return n, res.Error
				}
				n += res.RowsAffected
			}
			return n, nil
		})
}
