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

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
)

// MaxBatchPosts is the most posts one CreateBatch takes.
const MaxBatchPosts = 1000

// DefaultBatchConcurrency is ServiceConfig.BatchConcurrency's default: two
// batch transactions at once wrote the most posts/s on a 2-core machine,
// on MariaDB and PostgreSQL.
const DefaultBatchConcurrency = 2

// BatchField is how a batch's list of posts is named in errors: the member
// of the API's request body that holds it.
const BatchField = "posts"

// maxInsertTextBytes bounds the title and content bytes of one multi-row
// INSERT of posts. MariaDB refuses a statement larger than its
// max_allowed_packet (16 MiB by default), and 1,000 posts of the longest
// content take up to 80 MB; a batch of small posts still goes in one
// statement.
const maxInsertTextBytes = 4 << 20

// ItemError is one refused field of one post of a batch.
type ItemError struct {
	// Index is the post's position in the batch, from 0.
	Index int
	// Field names the field as the API spells it (title, content,
	// scheduledAt, publishBy).
	Field string
	// Reason says what is wrong with it.
	Reason string
}

// BatchError lists every field the rules refuse in a batch, in the order of
// the posts; nothing of the batch was written. It wraps ErrInvalidInput.
type BatchError struct {
	Items []ItemError
}

// Error names the number of refused fields and the first of them.
func (e *BatchError) Error() string {
	if len(e.Items) == 0 {
		return ErrInvalidInput.Error() + ": batch"
	}
	first := e.Items[0]
	return fmt.Sprintf("%s: %d fields of the batch, the first: post %d %s %s",
		ErrInvalidInput, len(e.Items), first.Index, first.Field, first.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidInput) hold.
func (e *BatchError) Unwrap() error { return ErrInvalidInput }

// CreatedBatch is the answer of CreateBatch.
type CreatedBatch struct {
	// Posts are the created posts in the order of the input: new ones, or
	// on a replay the posts as they were first answered.
	Posts []*Post
	// Replayed is true when the idempotency key had already created Posts
	// and nothing was written.
	Replayed bool
}

// ValidateBatch checks every post of ins against the rules of Create at the
// service's clock, and reports all refused fields at once: a *BatchError, or
// a *ValidationError naming BatchField when the batch is empty or holds
// more than MaxBatchPosts posts. It writes nothing; it is the dry run of
// CreateBatch.
func (s *Service) ValidateBatch(ins []CreateInput) error {
	return s.validateBatch(ins, s.now())
}

func (s *Service) validateBatch(ins []CreateInput, now time.Time) error {
	if err := checkBatchSize(len(ins)); err != nil {
		return err
	}
	var items []ItemError
	for i := range ins {
		items = append(items, s.createErrors(i, ins[i], now)...)
	}
	if len(items) > 0 {
		return &BatchError{Items: items}
	}
	return nil
}

// CheckBatchSize refuses a batch of n posts that is empty or larger than
// MaxBatchPosts, with a *ValidationError naming BatchField.
func CheckBatchSize(n int) error { return checkBatchSize(n) }

func checkBatchSize(n int) error {
	switch {
	case n == 0:
		return invalidField(BatchField, "must hold at least one post")
	case n > MaxBatchPosts:
		return invalidField(BatchField, fmt.Sprintf("must hold at most %d posts, got %d; split the batch", MaxBatchPosts, n))
	}
	return nil
}

// createErrors is validateCreate that goes on past the first refused
// field: every field of post i is checked on its own.
func (s *Service) createErrors(i int, in CreateInput, now time.Time) []ItemError {
	var items []ItemError
	add := func(err error) {
		var ve *ValidationError
		if errors.As(err, &ve) {
			items = append(items, ItemError{Index: i, Field: ve.Field, Reason: ve.Reason})
		}
	}
	add(validateText("title", in.Title, MaxTitleLength, titleControls))
	add(validateText("content", in.Content, MaxContentLength, contentControls))
	add(s.validateScheduledAt(in.ScheduledAt, now))
	if !in.ScheduledAt.IsZero() {
		add(validatePublishBy(in.PublishBy, in.ScheduledAt))
	}
	return items
}

// PreviewBatch is the dry run of CreateBatch: it checks ins as CreateBatch
// does and returns the posts it would create, in order, without ids, or the
// errors of ValidateBatch. It writes and reads nothing.
func (s *Service) PreviewBatch(ctx context.Context, ins []CreateInput) ([]*Post, error) {
	now := s.now()
	if err := s.validateBatch(ins, now); err != nil {
		return nil, err
	}
	return s.newPosts(ctx, ins, now), nil
}

// newPosts are the RESERVED posts of ins created at now by ctx's owner,
// without ids.
func (s *Service) newPosts(ctx context.Context, ins []CreateInput, now time.Time) []*Post {
	owner, tp := ownerOf(ctx), traceparentOf(ctx)
	posts := make([]*Post, len(ins))
	for i, in := range ins {
		posts[i] = &Post{
			Title:       in.Title,
			Content:     in.Content,
			Status:      StatusReserved,
			ScheduledAt: database.Normalize(in.ScheduledAt),
			CreatedAt:   now,
			UpdatedAt:   now,
			OwnerID:     owner,
			Version:     optimisticlock.Version{Int64: 1, Valid: true},
			Traceparent: tp,
			PublishBy:   s.publishBy(in.ScheduledAt, in.PublishBy),
		}
	}
	return posts
}

// CreateBatch stores the posts of ins, RESERVED, each with its CREATED
// event, all in one transaction: every post is written or none. The posts
// go in multi-row INSERTs, and their events in outbox.AppendMany, so a
// batch costs a few statements rather than two per post. Each post is
// checked as Create checks it; if any is refused, nothing is written and
// the error is a *BatchError listing every refused field (or a
// *ValidationError naming BatchField for an empty or oversized batch).
//
// With a key (not ""), the batch is idempotent as CreateOnce makes a
// create: the key row commits with the posts, and a later request with the
// key and the same posts (each one's title, content, scheduledAt instant and
// publishBy, in the same order) within IdempotencyRetention writes nothing
// and gets the first answer again, Replayed. The same key with other posts,
// or a key that created a single post, is ErrIdempotencyKeyReused.
func (s *Service) CreateBatch(ctx context.Context, key string, ins []CreateInput) (CreatedBatch, error) {
	now := s.now()
	if key == "" {
		if err := s.validateBatch(ins, now); err != nil {
			return CreatedBatch{}, err
		}
		var posts []*Post
		err := s.batchTransaction(ctx, func(tx *gorm.DB) error {
			var err error
			posts, err = s.insertBatch(ctx, tx, ins, now)
			return err
		})
		if err != nil {
			return CreatedBatch{}, fmt.Errorf("create %d posts: %w", len(ins), err)
		}
		return CreatedBatch{Posts: posts}, nil
	}
	if err := ValidateIdempotencyKey(key); err != nil {
		return CreatedBatch{}, err
	}
	if err := checkBatchSize(len(ins)); err != nil {
		return CreatedBatch{}, err
	}
	owner, hash := ownerOf(ctx), batchHash(ins)
	return keyed(ctx, s, key, hash, keyedWrite[CreatedBatch]{
		what:  fmt.Sprintf("create %d posts", len(ins)),
		valid: func() error { return s.validateBatch(ins, now) },
		txn:   s.batchTransaction,
		write: func(tx *gorm.DB) (CreatedBatch, int64, any, error) {
			posts, err := s.insertBatch(ctx, tx, ins, now)
			if err != nil {
				return CreatedBatch{}, 0, nil, err
			}
			return CreatedBatch{Posts: posts}, posts[0].ID, newBatchRecord(posts), nil
		},
		replay: func(rec *idempotencyRecord) (CreatedBatch, error) { return replayBatch(rec, hash, owner, ins) },
	})
}

// batchTransaction runs fn in a transaction once fewer than
// BatchConcurrency batch transactions run, or returns ctx's error while it
// waits for its turn.
func (s *Service) batchTransaction(ctx context.Context, fn func(tx *gorm.DB) error) error {
	select {
	case s.batches <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for a batch transaction: %w", context.Cause(ctx))
	}
	defer func() { <-s.batches }()
	return database.Transaction(ctx, s.db, fn)
}

// insertBatch writes the posts of ins and their CREATED events through tx.
// It builds fresh posts per call: a retried transaction must not reuse the
// ids a rolled-back attempt was given.
func (s *Service) insertBatch(ctx context.Context, tx *gorm.DB, ins []CreateInput, now time.Time) ([]*Post, error) {
	posts := s.newPosts(ctx, ins, now)
	if err := insertPosts(tx, posts); err != nil {
		return nil, err
	}
	if err := appendCreatedEvents(tx, posts); err != nil {
		return nil, err
	}
	return posts, nil
}

// insertPosts writes posts, new, through tx in multi-row INSERTs
// (database.InsertMany) of at most maxInsertTextBytes of titles and
// contents (a statement MariaDB's max_allowed_packet takes), their ids read
// back in the rows' order.
func insertPosts(tx *gorm.DB, posts []*Post) error {
	for start := 0; start < len(posts); {
		end, size := start, 0
		for end < len(posts) && (end == start || size+len(posts[end].Title)+len(posts[end].Content) <= maxInsertTextBytes) {
			size += len(posts[end].Title) + len(posts[end].Content)
			end++
		}
		if err := database.InsertMany(tx, posts[start:end]); err != nil {
			return fmt.Errorf("insert %d posts: %w", end-start, err)
		}
		start = end
	}
	return nil
}

// appendCreatedEvents writes the CREATED event of each of posts, new and
// with their ids, through tx, in multi-row INSERTs: each at its post's
// CreatedAt, in its post's trace.
func appendCreatedEvents(tx *gorm.DB, posts []*Post) error {
	evs := make([]outbox.Event, len(posts))
	for i, p := range posts {
		if p.ID <= 0 {
			return fmt.Errorf("insert posts: post %d of %d got no id", i, len(posts))
		}
		e, err := event.New(event.PostingEvent, p.ID, p.CreatedAt,
			event.PostingEventFields{Action: event.ActionCreated, Status: string(p.Status), ScheduledAt: p.ScheduledAt, OwnerID: p.OwnerID})
		if err != nil {
			return err
		}
		evs[i] = OutboxEvent(e, "")
		if p.Traceparent != nil {
			evs[i].Traceparent = *p.Traceparent
		}
	}
	_, err := outbox.AppendMany(tx, evs)
	return err
}

// batchRecord is the response column of a batch's idempotency key: what a
// replay needs beyond the request itself, which the hash proves to be the
// same. The posts' JSON as answered would not fit: 1,000 posts of the
// longest content are 80 MB, more than MEDIUMTEXT holds.
type batchRecord struct {
	Batch struct {
		IDs       []int64   `json:"ids"`
		CreatedAt string    `json:"createdAt"`
		PublishBy []*string `json:"publishBy"`
	} `json:"batch"`
}

func newBatchRecord(posts []*Post) batchRecord {
	var r batchRecord
	r.Batch.IDs = make([]int64, len(posts))
	r.Batch.PublishBy = make([]*string, len(posts))
	for i, p := range posts {
		r.Batch.IDs[i] = p.ID
		if p.PublishBy != nil {
			s := FormatJSONTime(*p.PublishBy)
			r.Batch.PublishBy[i] = &s
		}
	}
	r.Batch.CreatedAt = FormatJSONTime(posts[0].CreatedAt)
	return r
}

// replayBatch answers a batch whose key rec already holds: the posts as
// first answered when the request is the same, ErrIdempotencyKeyReused
// otherwise.
func replayBatch(rec *idempotencyRecord, hash, owner string, ins []CreateInput) (CreatedBatch, error) {
	if rec.RequestHash != hash {
		return CreatedBatch{}, fmt.Errorf("%w: it created post %d from a request with other posts", ErrIdempotencyKeyReused, rec.PostID)
	}
	var r batchRecord
	if err := json.Unmarshal([]byte(rec.Response), &r); err != nil || len(r.Batch.IDs) != len(ins) || len(r.Batch.PublishBy) != len(ins) {
		return CreatedBatch{}, fmt.Errorf("idempotency key of post %d: the stored batch does not match its request", rec.PostID)
	}
	created, err := time.Parse(time.RFC3339Nano, r.Batch.CreatedAt)
	if err != nil {
		return CreatedBatch{}, fmt.Errorf("idempotency key of post %d: %w", rec.PostID, err)
	}
	created = created.UTC()
	posts := make([]*Post, len(ins))
	for i, in := range ins {
		p := &Post{ID: r.Batch.IDs[i], Title: in.Title, Content: in.Content, Status: StatusReserved, OwnerID: owner,
			ScheduledAt: database.Normalize(in.ScheduledAt), CreatedAt: created, UpdatedAt: created,
			Version: optimisticlock.Version{Int64: 1, Valid: true}}
		if s := r.Batch.PublishBy[i]; s != nil {
			t, err := time.Parse(time.RFC3339Nano, *s)
			if err != nil {
				return CreatedBatch{}, fmt.Errorf("idempotency key of post %d: %w", rec.PostID, err)
			}
			t = t.UTC()
			p.PublishBy = &t
		}
		posts[i] = p
	}
	return CreatedBatch{Posts: posts, Replayed: true}, nil
}

// batchHash identifies a batch's input: the SHA-256 of each post's fields
// as requestHash reads them, in order, under a prefix no single create's
// hash input has, so a key of a single create never matches a batch.
func batchHash(ins []CreateInput) string {
	h := sha256.New()
	h.Write([]byte("posting batch\n"))
	for _, in := range ins {
		fields := []string{in.Title, in.Content, FormatJSONTime(database.Normalize(in.ScheduledAt))}
		if in.PublishBy != nil {
			fields = append(fields, FormatJSONTime(database.Normalize(*in.PublishBy)))
		}
		line, _ := json.Marshal(fields)
		h.Write(line)
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}
