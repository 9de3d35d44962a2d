package reservation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/plugin/optimisticlock"

	"github.com/postingsvc/posting/internal/storage/database"
)

// Limits of idempotency keys (the Idempotency-Key header of the IETF
// httpapi draft).
const (
	// MaxIdempotencyKeyLength is the longest key, in bytes (ASCII).
	MaxIdempotencyKeyLength = 255
	// DefaultIdempotencyRetention is how long a key is honoured.
	DefaultIdempotencyRetention = 24 * time.Hour
	// MinIdempotencyRetention and MaxIdempotencyRetention bound
	// ServiceConfig.IdempotencyRetention.
	MinIdempotencyRetention = time.Minute
	MaxIdempotencyRetention = 720 * time.Hour
)

// IdempotencyKeyField is how the API names the key in errors: the header
// that carries it.
const IdempotencyKeyField = "Idempotency-Key"

// Sentinel errors of CreateOnce, wrapped with %w.
var (
	// ErrIdempotencyKeyReused: the key already created a post from another
	// request (another title, content or scheduledAt).
	ErrIdempotencyKeyReused = errors.New("idempotency key was used with another request")
	// ErrIdempotencyKeyInUse: another request with the key neither
	// committed nor gave up while this one waited for it.
	ErrIdempotencyKeyInUse = errors.New("a request with the idempotency key is in progress")
)

// idempotencyRecord is one row of idempotency_keys (migration 00009): the
// post a key of an owner created, the hash of the request that created it,
// and the post's JSON as it was first answered.
type idempotencyRecord struct {
	ID          int64     `gorm:"column:id;primaryKey;autoIncrement"`
	OwnerID     string    `gorm:"column:owner_id"`
	Key         string    `gorm:"column:idem_key"`
	RequestHash string    `gorm:"column:request_hash"`
	PostID      int64     `gorm:"column:post_id"`
	Response    string    `gorm:"column:response"`
	CreatedAt   time.Time `gorm:"column:created_at;autoCreateTime:false"`
}

// TableName is the table of migration 00009.
func (idempotencyRecord) TableName() string { return "idempotency_keys" }

// ValidateIdempotencyKey refuses a key that is empty, longer than
// MaxIdempotencyKeyLength bytes, holds anything but printable ASCII
// (0x20..0x7E) or begins or ends with a space, with a *ValidationError
// naming IdempotencyKeyField.
func ValidateIdempotencyKey(key string) error {
	if key == "" {
		return invalidField(IdempotencyKeyField, "must not be empty")
	}
	if len(key) > MaxIdempotencyKeyLength {
		return invalidField(IdempotencyKeyField, fmt.Sprintf("must be at most %d characters, got %d", MaxIdempotencyKeyLength, len(key)))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7E {
			return invalidField(IdempotencyKeyField, fmt.Sprintf("must be printable ASCII, got byte 0x%02X at position %d", c, i+1))
		}
	}
	if key[0] == ' ' || key[len(key)-1] == ' ' {
		// HTTP drops them anyway, and MySQL would compare "k " equal to "k".
		return invalidField(IdempotencyKeyField, "must not begin or end with a space")
	}
	return nil
}

// Created is the answer of CreateOnce.
type Created struct {
	// Post is the post the key created: the new one, or on a replay the
	// post as it was first answered.
	Post *Post
	// Replayed is true when the key had already created Post and nothing
	// was written.
	Replayed bool
}

// CreateOnce is Create under an idempotency key of ctx's owner: the first
// request with the key creates the post, and its key row commits in the
// same transaction as the post and its event. A later request with the key
// and the same input (title, content, the scheduledAt instant) within
// IdempotencyRetention writes nothing and gets that first post back as it
// was answered, Replayed; one with other input gets an error wrapping
// ErrIdempotencyKeyReused. A key's age is read on the database's clock, as
// the cleaner reads it. Requests with one key at once create one post:
// the unique index makes each wait for the transaction that holds the key,
// and then replay. A key the rules refuse is a *ValidationError; so is an
// input they refuse, checked as for Create when the key is not in use.
func (s *Service) CreateOnce(ctx context.Context, key string, in CreateInput) (Created, error) {
	now := s.now()
	if err := ValidateIdempotencyKey(key); err != nil {
		return Created{}, err
	}
	hash := requestHash(in)
	return keyed(ctx, s, key, hash, keyedWrite[Created]{
		what:  "create post",
		valid: func() error { return s.validateCreate(in, now) },
		txn: func(ctx context.Context, fn func(tx *gorm.DB) error) error {
			return s.transact(ctx, 0, fn)
		},
		write: func(tx *gorm.DB) (Created, int64, any, error) {
			created, err := s.insertPost(ctx, tx, in, now)
			if err != nil {
				return Created{}, 0, nil, err
			}
			return Created{Post: created}, created.ID, newStoredPost(created), nil
		},
		replay: func(rec *idempotencyRecord) (Created, error) { return replay(rec, hash) },
	})
}

// keyedWrite is what a write under an idempotency key does at each step of
// keyed; T is its answer.
type keyedWrite[T any] struct {
	// what names the write in its errors ("create post").
	what string
	// valid checks the input once the key is known to be free.
	valid func() error
	// txn runs fn in a transaction (database.Transaction, or a batch's turn
	// at one).
	txn func(ctx context.Context, fn func(tx *gorm.DB) error) error
	// write writes the input through tx and returns the answer, the post
	// the key row names and the key row's response (marshalled as JSON).
	write func(tx *gorm.DB) (out T, postID int64, response any, err error)
	// replay answers a request whose key row rec holds.
	replay func(rec *idempotencyRecord) (T, error)
}

// keyed runs w under key, of ctx's owner, for a request whose input hashes
// to hash. A key row younger than IdempotencyRetention replays the first
// answer without checking the input: the same input passed the checks when
// it was written, and a retry must get that answer also once scheduledAt
// has passed. Otherwise the input is checked, and written in one
// transaction with the key row last (an expired row of the key, not purged
// yet, is deleted first: the key is free again). A request that committed
// the key meanwhile is replayed; one whose key row is gone again is
// ErrIdempotencyKeyInUse.
func keyed[T any](ctx context.Context, s *Service, key, hash string, w keyedWrite[T]) (T, error) {
	var zero T
	owner := ownerOf(ctx)
	// A key is written by one instance and judged by another (and by the
	// cleaner), so its age is the database's clock's, never this one's.
	keyNow, err := database.Now(ctx, s.db)
	if err != nil {
		return zero, err
	}
	keyNow = database.Normalize(keyNow)
	cutoff := keyNow.Add(-s.cfg.IdempotencyRetention)
	prev, err := s.findKey(ctx, owner, key)
	if err != nil {
		return zero, err
	}
	if prev != nil && !prev.CreatedAt.Before(cutoff) {
		return w.replay(prev)
	}
	if err := w.valid(); err != nil {
		return zero, err
	}
	var out T
	err = w.txn(ctx, func(tx *gorm.DB) error {
		if prev != nil {
			if err := tx.Where("id = ? AND created_at < ?", prev.ID, cutoff).Delete(&idempotencyRecord{}).Error; err != nil {
				return fmt.Errorf("delete expired idempotency key: %w", err)
			}
		}
		var postID int64
		var response any
		var err error
		if out, postID, response, err = w.write(tx); err != nil {
			return err
		}
		body, err := json.Marshal(response)
		if err != nil {
			return err
		}
		// Last, so that a request holding the key for long holds nothing
		// else a waiter needs; a waiter's own writes roll back.
		return tx.Create(&idempotencyRecord{OwnerID: owner, Key: key, RequestHash: hash,
			PostID: postID, Response: string(body), CreatedAt: keyNow}).Error
	})
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		// Another request committed the key while this one waited on it.
		prev, err := s.findKey(ctx, owner, key)
		if err != nil {
			return zero, err
		}
		if prev == nil {
			return zero, fmt.Errorf("%w: try again", ErrIdempotencyKeyInUse)
		}
		return w.replay(prev)
	}
	if err != nil {
		return zero, fmt.Errorf("%s: %w", w.what, err)
	}
	return out, nil
}

// findKey reads the row of owner's key; nil when there is none.
func (s *Service) findKey(ctx context.Context, owner, key string) (*idempotencyRecord, error) {
	var rec idempotencyRecord
	err := s.db.WithContext(ctx).Where("owner_id = ? AND idem_key = ?", owner, key).Take(&rec).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read idempotency key: %w", err)
	}
	return &rec, nil
}

// replay answers a request whose key rec already holds: the first answer
// when the request is the same, ErrIdempotencyKeyReused otherwise.
func replay(rec *idempotencyRecord, hash string) (Created, error) {
	if rec.RequestHash != hash {
		return Created{}, fmt.Errorf("%w: it created post %d from a request with another title, content or scheduledAt",
			ErrIdempotencyKeyReused, rec.PostID)
	}
	post, err := postFromJSON([]byte(rec.Response))
	if err != nil {
		return Created{}, fmt.Errorf("idempotency key of post %d: %w", rec.PostID, err)
	}
	return Created{Post: post, Replayed: true}, nil
}

// requestHash identifies a create's input: the SHA-256 of its title,
// content and scheduledAt instant (so "01:00:00+01:00" and "00:00:00Z" are
// the same request), in hex.
func requestHash(in CreateInput) string {
	fields := []string{in.Title, in.Content, FormatJSONTime(database.Normalize(in.ScheduledAt))}
	if in.PublishBy != nil {
		// Only when given, so that a key stored before publishBy existed
		// still matches its request.
		fields = append(fields, FormatJSONTime(database.Normalize(*in.PublishBy)))
	}
	b, _ := json.Marshal(fields)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// postFromJSON reads back a post newStoredPost wrote; newStoredPost of the
// result writes the same JSON.
func postFromJSON(b []byte) (*Post, error) {
	var j storedPost
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("stored post: %w", err)
	}
	p := &Post{ID: j.ID, Title: j.Title, Content: j.Content, Status: j.Status, OwnerID: j.OwnerID,
		Version: optimisticlock.Version{Int64: 1, Valid: true}}
	for _, f := range []struct {
		s   string
		dst *time.Time
	}{{j.ScheduledAt, &p.ScheduledAt}, {j.CreatedAt, &p.CreatedAt}, {j.UpdatedAt, &p.UpdatedAt}} {
		t, err := time.Parse(time.RFC3339Nano, f.s)
		if err != nil {
			return nil, fmt.Errorf("stored post: %w", err)
		}
		*f.dst = t.UTC()
	}
	if j.PublishBy != nil {
		t, err := time.Parse(time.RFC3339Nano, *j.PublishBy)
		if err != nil {
			return nil, fmt.Errorf("stored post: %w", err)
		}
		t = t.UTC()
		p.PublishBy = &t
	}
	return p, nil
}

// PurgeIdempotencyKeys deletes idempotency keys recorded before olderThan,
// in transactions of at most batchSize rows by id, with pause between two:
// the cleaner's step for them, given ServiceConfig.IdempotencyRetention as
// the step's retention. Once its row is gone, a key creates a new post.
func PurgeIdempotencyKeys(ctx context.Context, db *gorm.DB, olderThan time.Time, batchSize int, pause time.Duration) (int, error) {
	cutoff := database.Normalize(olderThan)
	return database.PurgeBatches(ctx, db, "idempotency keys", batchSize, pause,
		func(db *gorm.DB) ([]int64, error) {
			var ids []int64
			err := db.Model(&idempotencyRecord{}).Where("created_at < ?", cutoff).
				Order("created_at, id").Limit(batchSize).Pluck("id", &ids).Error
			return ids, err
		},
		func(tx *gorm.DB, ids []int64) (int64, error) {
			res := tx.Where("id IN ? AND created_at < ?", ids, cutoff).Delete(&idempotencyRecord{})
			return res.RowsAffected, res.Error
		})
}
