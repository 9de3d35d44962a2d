package spike

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// FloorChunk is how many posts one transaction of Floor writes.
const FloorChunk = 1000

// Floor is the database's floor under a spike of posts: how long raw SQL
// takes to write, in bulk, what publishing them writes at least, a
// PUBLISHED publication per post and each post's PUBLISHED status, in
// transactions of FloorChunk posts, one multi-row INSERT and one UPDATE
// each. It seeds its own posts, as Run does, on a database without posts
// (ErrNotEmpty otherwise), and leaves them for the caller to delete.
func Floor(ctx context.Context, db *gorm.DB, posts int) (time.Duration, error) {
	var n int64
	if err := db.WithContext(ctx).Model(&reservation.Post{}).Count(&n).Error; err != nil {
		return 0, err
	}
	if n > 0 {
		return 0, fmt.Errorf("%w: %d posts", ErrNotEmpty, n)
	}
	if _, err := seed(ctx, db, posts, time.Hour); err != nil {
		return 0, err
	}
	var seeded []reservation.Post
	if err := db.WithContext(ctx).Select("id", "scheduled_at").Order("id").Find(&seeded).Error; err != nil {
		return 0, err
	}
	start := time.Now()
	for i := 0; i < len(seeded); i += FloorChunk {
		chunk := seeded[i:min(i+FloorChunk, len(seeded))]
		err := database.Transaction(ctx, db, func(tx *gorm.DB) error {
			return publishInBulk(tx, chunk)
		})
		if err != nil {
			return 0, fmt.Errorf("bulk floor: %w", err)
		}
	}
	return time.Since(start), nil
}

// publishInBulk writes a PUBLISHED publication for each of posts and sets
// the posts PUBLISHED.
func publishInBulk(tx *gorm.DB, posts []reservation.Post) error {
	now := database.Normalize(time.Now())
	var b strings.Builder
	b.WriteString("INSERT INTO publications (post_id, event_id, partition_id, scheduled_at, status, attempts, created_at, updated_at, published_at) VALUES ")
	args := make([]any, 0, 6*len(posts))
	ids := make([]int64, len(posts))
	for i, p := range posts {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("(?,?,0,?,'PUBLISHED',1,?,?,?)")
		args = append(args, p.ID, uuid.NewString(), p.ScheduledAt, now, now, now)
		ids[i] = p.ID
	}
	if err := tx.Exec(b.String(), args...).Error; err != nil {
		return fmt.Errorf("insert publications: %w", err)
	}
	err := tx.Exec("UPDATE posts SET status = ?, published_at = ?, updated_at = ?, version = version + 1 WHERE id IN ?",
		reservation.StatusPublished, now, now, ids).Error
	if err != nil {
		return fmt.Errorf("set posts published: %w", err)
	}
	return nil
}
