package reservation

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"gorm.io/gorm"
	"gorm.io/plugin/optimisticlock"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/platform/config"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
)

// Limits of a post's fields, in characters (runes): the posts table holds a
// title in VARCHAR(200), which counts characters, not bytes.
const (
	MaxTitleLength   = 200
	MaxContentLength = 20000
)

// Limits of a page of List.
const (
	DefaultListLimit = 20
	MaxListLimit     = 100
)

// ServiceConfig configures a Service. The zero value is usable.
type ServiceConfig struct {
	// Now is the clock for timestamps and for "scheduledAt lies in the
	// future". Default time.Now.
	Now func() time.Time
	// MaxAhead is how far in the future scheduledAt may lie. Default one year
	// (365*24h); must be positive.
	MaxAhead time.Duration
	// IdempotencyRetention is how long CreateOnce honours an idempotency
	// key: an older key is as good as unused, and the cleaner's
	// PurgeIdempotencyKeys step deletes it with the same retention. Default
	// DefaultIdempotencyRetention (24h); MinIdempotencyRetention (1m) to
	// MaxIdempotencyRetention (720h).
	IdempotencyRetention time.Duration
	// LateLimit is how late a post without its own publishBy may still be
	// published: its publish_by is scheduledAt plus LateLimit, past which it
	// becomes EXPIRED. Default 0: no limit, a post is published however
	// late. At most MaxAhead.
	LateLimit time.Duration
	// SeriesHorizon is how far ahead a series' occurrences become posts.
	// Default DefaultSeriesHorizon (7 days); MinSeriesHorizon (1h) to
	// MaxSeriesHorizon (90 days).
	SeriesHorizon time.Duration
	// SeriesLimit is the most occurrences a series may have within any
	// span of SeriesHorizon; a denser rule is refused. Default
	// DefaultSeriesLimit (1,000); 1..100,000.
	SeriesLimit int
	// GroupSize is the most writes (creates, keyed or not, updates and
	// cancels) that share one transaction (group commit, see writeGroups);
	// 1 writes each in its own. Default DefaultGroupSize (100); 1..1000.
	GroupSize int
	// GroupCommitters is how many group transactions run at once. Default
	// DefaultGroupCommitters (2); 1..100.
	GroupCommitters int
	// GroupWait is how long a committer waits for more writes before it
	// writes its group. Default 0: a create that finds a committer free is
	// written at once; 0..MaxGroupWait.
	GroupWait time.Duration
	// BatchConcurrency is the most CreateBatch transactions that run at
	// once; the others wait their turn before they start theirs. Each
	// writes up to 1,000 posts and their events into the same indexes, and
	// past a few at once the database spends its time on their contention:
	// 32 concurrent batches wrote less than half the posts/s of two.
	// Default DefaultBatchConcurrency (2); 1..1000.
	BatchConcurrency int
	// SeriesClock is the clock series are materialized by. Default
	// database.Now: the database's, so instances whose clocks differ agree
	// on what is due.
	SeriesClock func(ctx context.Context, db *gorm.DB) (time.Time, error)
}

// DefaultServiceConfig returns a ServiceConfig with every field at its
// default: the one place the defaults are written. A caller that takes
// values from elsewhere (a command line) starts from it, so that a zero it
// was given is refused by Validate rather than replaced.
func DefaultServiceConfig() ServiceConfig {
	return ServiceConfig{
		Now:                  time.Now,
		MaxAhead:             365 * 24 * time.Hour,
		IdempotencyRetention: DefaultIdempotencyRetention,
		SeriesHorizon:        DefaultSeriesHorizon,
		SeriesLimit:          DefaultSeriesLimit,
		BatchConcurrency:     DefaultBatchConcurrency,
		GroupSize:            DefaultGroupSize,
		GroupCommitters:      DefaultGroupCommitters,
		SeriesClock:          database.Now,
	}
}

// withDefaults fills the unset fields from DefaultServiceConfig.
func (c ServiceConfig) withDefaults() ServiceConfig {
	config.FillZero(&c, DefaultServiceConfig())
	return c
}

// Validate reports a setting outside its limits, as a *config.Error naming
// the field.
func (c ServiceConfig) Validate() error {
	const f = "reservation.ServiceConfig."
	if c.Now == nil {
		return config.Invalid(f+"Now", nil, "must be set")
	}
	if c.MaxAhead <= 0 {
		return config.Invalid(f+"MaxAhead", c.MaxAhead, "must be positive")
	}
	if c.LateLimit < 0 || c.LateLimit > c.MaxAhead {
		return config.Invalid(f+"LateLimit", c.LateLimit, "want 0 (no limit) up to MaxAhead %s", c.MaxAhead)
	}
	if c.SeriesHorizon < MinSeriesHorizon || c.SeriesHorizon > MaxSeriesHorizon {
		return config.Invalid(f+"SeriesHorizon", c.SeriesHorizon, "want %s..%s", MinSeriesHorizon, daysOrDuration(MaxSeriesHorizon))
	}
	if c.SeriesLimit < 1 || c.SeriesLimit > 100_000 {
		return config.Invalid(f+"SeriesLimit", c.SeriesLimit, "want 1..100000")
	}
	if c.GroupSize < 1 || c.GroupSize > 1000 {
		return config.Invalid(f+"GroupSize", c.GroupSize, "want 1..1000")
	}
	if c.GroupCommitters < 1 || c.GroupCommitters > 100 {
		return config.Invalid(f+"GroupCommitters", c.GroupCommitters, "want 1..100")
	}
	if c.GroupWait < 0 || c.GroupWait > MaxGroupWait {
		return config.Invalid(f+"GroupWait", c.GroupWait, "want 0..%s", MaxGroupWait)
	}
	if c.BatchConcurrency < 1 || c.BatchConcurrency > 1000 {
		return config.Invalid(f+"BatchConcurrency", c.BatchConcurrency, "want 1..1000")
	}
	if c.SeriesClock == nil {
		return config.Invalid(f+"SeriesClock", nil, "must be set")
	}
	if c.IdempotencyRetention < MinIdempotencyRetention || c.IdempotencyRetention > MaxIdempotencyRetention {
		return config.Invalid(f+"IdempotencyRetention", c.IdempotencyRetention, "want %s..%s",
			MinIdempotencyRetention, MaxIdempotencyRetention)
	}
	return nil
}

// Service is the write side of posts: every change writes the post and its
// POSTING_EVENT outbox row in one transaction, so an event exists exactly
// when its change does.
type Service struct {
	db     *gorm.DB
	cfg    ServiceConfig
	insert *postInsert
	// batches holds a token for each CreateBatch transaction running
	// (BatchConcurrency).
	batches chan struct{}
	// groups shares transactions among concurrent writes; nil with a
	// GroupSize of 1.
	groups *writeGroups
}

// NewService returns a Service on db (which must have the migrated schema).
func NewService(db *gorm.DB, cfg ServiceConfig) (*Service, error) {
	if db == nil {
		return nil, fmt.Errorf("invalid service config: %w", errors.New("db must not be nil"))
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid service config: %w", err)
	}
	insert, err := newPostInsert(db)
	if err != nil {
		return nil, err
	}
	s := &Service{db: db, cfg: cfg, insert: insert, batches: make(chan struct{}, cfg.BatchConcurrency)}
	if cfg.GroupSize > 1 {
		s.groups = newWriteGroups(s, cfg)
	}
	return s, nil
}

// CreateInput is a new post.
type CreateInput struct {
	Title, Content string
	ScheduledAt    time.Time
	// PublishBy, when set, is the latest instant the post may be
	// published, not before ScheduledAt; nil takes the service's
	// LateLimit (or no deadline).
	PublishBy *time.Time
}

// UpdateInput changes a RESERVED post; nil fields keep their value. A
// ScheduledAt changed without PublishBy moves the post's deadline by the
// same amount, so its late window keeps its length.
type UpdateInput struct {
	Title, Content *string
	ScheduledAt    *time.Time
	PublishBy      *time.Time
}

// ListOrder is the order of List's pages.
type ListOrder string

// The orders of List. Both are ascending and end on the id, so a page
// boundary is one exact position.
const (
	// OrderByID lists posts by id (creation order); the default.
	OrderByID ListOrder = "id"
	// OrderByScheduledAt lists posts by scheduledAt, then id.
	OrderByScheduledAt ListOrder = "scheduledAt"
)

// ListQuery selects a page of posts.
type ListQuery struct {
	// Status filters by status; "" lists all posts.
	Status Status
	// ScheduledFrom, when set, keeps posts scheduled at or after it.
	ScheduledFrom time.Time
	// ScheduledTo, when set, keeps posts scheduled before it; it must lie
	// after ScheduledFrom.
	ScheduledTo time.Time
	// Order is OrderByID (also for "") or OrderByScheduledAt.
	Order ListOrder
	// Limit is the page size, 1..MaxListLimit; 0 means DefaultListLimit.
	Limit int
	// Cursor is the NextCursor of the previous page, made with the same
	// Order; "" starts at the beginning.
	Cursor string
	// OwnerID, when not nil, keeps the posts of that owner ("" is the posts
	// created without authentication). It narrows what ctx's Scope lets the
	// caller see; it never widens it.
	OwnerID *string
	// SeriesID, when not nil, keeps the occurrence posts of that series.
	SeriesID *int64
}

// Page is one page of posts in the query's order.
type Page struct {
	Items []Post
	// NextCursor continues after the last item; "" when there are no more posts.
	NextCursor string
	order      ListOrder
}

// CursorAfter is the cursor that continues after Items[i], for a caller that
// answers only the first i+1 items (a page cut short by its size).
func (p *Page) CursorAfter(i int) string {
	last := p.Items[i]
	next := listCursor{id: last.ID}
	if p.order == OrderByScheduledAt {
		next.at = database.Normalize(last.ScheduledAt)
	}
	return next.encode()
}

// ValidationError is an input the rules refuse; Field names it the way the
// API spells it (title, content, scheduledAt, status, scheduledTo, order,
// limit, cursor, or body for an update that changes nothing). It wraps
// ErrInvalidInput.
type ValidationError struct {
	Field, Reason string
}

// Error says which field is wrong and why.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("%s: %s %s", ErrInvalidInput, e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidInput) hold.
func (e *ValidationError) Unwrap() error { return ErrInvalidInput }

func invalidField(field, reason string) error { return &ValidationError{Field: field, Reason: reason} }

// now is the service clock as the database keeps time.
func (s *Service) now() time.Time { return database.Normalize(s.cfg.Now()) }

// Create stores a RESERVED post and its CREATED event, in one transaction.
// Concurrent creates share transactions (ServiceConfig.GroupSize): a create
// returns once the transaction holding it committed, and one that fails
// there fails alone.
func (s *Service) Create(ctx context.Context, in CreateInput) (*Post, error) {
	now := s.now()
	if err := s.validateCreate(in, now); err != nil {
		return nil, err
	}
	if s.groups != nil {
		return s.groups.create(ctx, in, now)
	}
	return s.createAlone(ctx, in, now)
}

// createAlone writes in, checked already, in a transaction of its own.
func (s *Service) createAlone(ctx context.Context, in CreateInput, now time.Time) (*Post, error) {
	var created *Post
	err := database.Transaction(ctx, s.db, func(tx *gorm.DB) error {
		var err error
		created, err = s.insertPost(ctx, tx, in, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create post: %w", err)
	}
	return created, nil
}

// insertPost writes a new RESERVED post and its CREATED event through tx.
// It returns a fresh value per call: a retried transaction must not reuse
// the id the rolled-back attempt was given.
func (s *Service) insertPost(ctx context.Context, tx *gorm.DB, in CreateInput, now time.Time) (*Post, error) {
	created := &Post{
		Title:       in.Title,
		Content:     in.Content,
		Status:      StatusReserved,
		ScheduledAt: database.Normalize(in.ScheduledAt),
		CreatedAt:   now,
		UpdatedAt:   now,
		OwnerID:     ownerOf(ctx),
		Version:     optimisticlock.Version{Int64: 1, Valid: true},
		Traceparent: traceparentOf(ctx),
		PublishBy:   s.publishBy(in.ScheduledAt, in.PublishBy),
	}
	if err := s.insert.exec(ctx, tx, created); err != nil {
		return nil, fmt.Errorf("insert post: %w", err)
	}
	return created, appendChangeEvent(tx, created, event.ActionCreated, now)
}

// validateCreate checks a new post against the rules at now.
func (s *Service) validateCreate(in CreateInput, now time.Time) error {
	if err := validateText("title", in.Title, MaxTitleLength, titleControls); err != nil {
		return err
	}
	if err := validateText("content", in.Content, MaxContentLength, contentControls); err != nil {
		return err
	}
	if err := s.validateScheduledAt(in.ScheduledAt, now); err != nil {
		return err
	}
	return validatePublishBy(in.PublishBy, in.ScheduledAt)
}

// publishBy is the deadline stored for a post scheduled at at: the
// client's own, else at plus the service's LateLimit, else none.
func (s *Service) publishBy(at time.Time, own *time.Time) *time.Time {
	switch {
	case own != nil:
		t := database.Normalize(*own)
		return &t
	case s.cfg.LateLimit > 0:
		t := database.Normalize(at).Add(s.cfg.LateLimit)
		return &t
	}
	return nil
}

// storable reports whether t lies within the years 1 to 9999 UTC, what
// every database (and the MySQL driver) can compare with a DATETIME; a
// bound outside them failed the query (a 500) on MariaDB and PostgreSQL.
func storable(t time.Time) bool {
	y := t.UTC().Year()
	return y >= 1 && y <= 9999
}

// validatePublishBy checks a client's publishBy against the post's
// scheduledAt: not before it, and within the years every database stores.
func validatePublishBy(by *time.Time, at time.Time) error {
	if by == nil {
		return nil
	}
	if !storable(*by) {
		return invalidField("publishBy", "must lie within the years 1 to 9999 UTC")
	}
	if database.Normalize(*by).Before(database.Normalize(at)) {
		return invalidField("publishBy", "must not lie before scheduledAt")
	}
	return nil
}

// Get returns the post with id, or an error wrapping ErrNotFound (also when
// the post belongs to another owner than ctx's Scope).
func (s *Service) Get(ctx context.Context, id int64) (*Post, error) {
	return postByID(s.db.WithContext(ctx).Scopes(visibleTo(ctx)), id)
}

// List returns a page of posts in ascending id order, or scheduledAt then
// id order (keyset pagination: a page costs the same however deep it is,
// and posts created meanwhile never shift a page).
func (s *Service) List(ctx context.Context, q ListQuery) (*Page, error) {
	if q.Status != "" && !q.Status.Valid() {
		return nil, invalidField("status", fmt.Sprintf("must be one of %s", statusNames()))
	}
	order := q.Order
	switch order {
	case "":
		order = OrderByID
	case OrderByID, OrderByScheduledAt:
	default:
		return nil, invalidField("order", fmt.Sprintf("must be %s or %s", OrderByID, OrderByScheduledAt))
	}
	from, to := database.Normalize(q.ScheduledFrom), database.Normalize(q.ScheduledTo)
	for _, b := range []struct {
		name string
		at   time.Time
	}{{"scheduledFrom", q.ScheduledFrom}, {"scheduledTo", q.ScheduledTo}} {
		if !b.at.IsZero() && !storable(b.at) {
			return nil, invalidField(b.name, "must lie within the years 1 to 9999 UTC")
		}
	}
	if q.OwnerID != nil && (!utf8.ValidString(*q.OwnerID) || utf8.RuneCountInString(*q.OwnerID) > 255) {
		return nil, invalidField("ownerId", "must be valid UTF-8 of at most 255 characters, as a token's sub is")
	}
	if !q.ScheduledFrom.IsZero() && !q.ScheduledTo.IsZero() && !to.After(from) {
		return nil, invalidField("scheduledTo", "must lie after scheduledFrom")
	}
	limit := q.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 1 || limit > MaxListLimit {
		return nil, invalidField("limit", fmt.Sprintf("must be between 1 and %d", MaxListLimit))
	}
	var after listCursor
	if q.Cursor != "" {
		var ok bool
		if after, ok = decodeCursor(q.Cursor); !ok {
			return nil, invalidField("cursor", "is not a cursor returned by this API")
		}
		if after.order() != order {
			return nil, invalidField("cursor", fmt.Sprintf("was made for order=%s, not order=%s", after.order(), order))
		}
	}
	query := s.db.WithContext(ctx).Scopes(visibleTo(ctx))
	if q.OwnerID != nil {
		query = query.Where("owner_id = ?", *q.OwnerID)
	}
	if q.Status != "" {
		query = query.Where("status = ?", q.Status)
	}
	if q.SeriesID != nil {
		query = query.Where("series_id = ?", *q.SeriesID) // idx_posts_series_id
	}
	if !q.ScheduledFrom.IsZero() {
		query = query.Where("scheduled_at >= ?", from)
	}
	if !q.ScheduledTo.IsZero() {
		query = query.Where("scheduled_at < ?", to)
	}
	// By id with a status this walks idx_posts_status_id, without one the
	// primary key; by time with a status it walks
	// idx_posts_status_scheduled_at_id. For one owner, by id, it walks
	// idx_posts_owner_id or idx_posts_owner_status_id. The keyset condition
	// is the driver's (Driver.After), which each database reads as a range
	// of those indexes.
	switch order {
	case OrderByScheduledAt:
		if q.Cursor != "" {
			query = query.Where(database.DriverOf(query).After("scheduled_at", "id", after.at, after.id))
		}
		query = query.Order("scheduled_at ASC, id ASC")
	default:
		if q.Cursor != "" {
			query = query.Where("id > ?", after.id)
		}
		query = query.Order("id ASC")
	}
	// One row more than the page tells whether another page follows.
	var posts []Post
	if err := query.Limit(limit + 1).Find(&posts).Error; err != nil {
		return nil, fmt.Errorf("list posts: %w", err)
	}
	page := &Page{Items: posts, order: order}
	if len(posts) > limit {
		page.Items = posts[:limit]
		page.NextCursor = page.CursorAfter(limit - 1)
	}
	if page.Items == nil {
		page.Items = []Post{}
	}
	return page, nil
}

// Update changes a RESERVED post and records its UPDATED event. A changed
// scheduledAt must obey the rules of Create; the stored one may be passed
// back as is. It returns a *ValidationError, an error wrapping ErrNotFound,
// ErrInvalidTransition when the post is no longer RESERVED, or ErrConflict
// when the post changed after it was read (the caller may read it again and
// retry). Every successful update bumps the version and writes an event, also
// when the values equal the stored ones.
func (s *Service) Update(ctx context.Context, id int64, in UpdateInput) (*Post, error) {
	if in.Title == nil && in.Content == nil && in.ScheduledAt == nil && in.PublishBy == nil {
		return nil, invalidField("body", "must set at least one of title, content, scheduledAt, publishBy")
	}
	if in.Title != nil {
		if err := validateText("title", *in.Title, MaxTitleLength, titleControls); err != nil {
			return nil, err
		}
	}
	if in.Content != nil {
		if err := validateText("content", *in.Content, MaxContentLength, contentControls); err != nil {
			return nil, err
		}
	}
	now := s.now()
	current, err := postByID(s.db.WithContext(ctx).Scopes(visibleTo(ctx)), id)
	if err != nil {
		return nil, err
	}
	if current.Status != StatusReserved {
		return nil, fmt.Errorf("%w: post %d is %s; only %s posts can be edited", ErrInvalidTransition, id, current.Status, StatusReserved)
	}
	next := *current
	changes := map[string]any{"updated_at": now}
	if in.Title != nil {
		next.Title = *in.Title
		changes["title"] = next.Title
	}
	if in.Content != nil {
		next.Content = *in.Content
		changes["content"] = next.Content
	}
	if in.ScheduledAt != nil {
		at := database.Normalize(*in.ScheduledAt)
		// Only a new time must lie ahead: resending the stored one with
		// another change is no reschedule.
		if !at.Equal(current.ScheduledAt) {
			if err := s.validateScheduledAt(at, now); err != nil {
				return nil, err
			}
		}
		if in.PublishBy == nil && current.PublishBy != nil {
			by := current.PublishBy.Add(at.Sub(current.ScheduledAt))
			if !storable(by) {
				return nil, invalidField("publishBy", "moved with scheduledAt, it would lie beyond the year 9999 UTC; set publishBy with scheduledAt")
			}
			next.PublishBy = &by
			changes["publish_by"] = by
		}
		next.ScheduledAt = at
		changes["scheduled_at"] = at
	}
	if in.PublishBy != nil {
		if err := validatePublishBy(in.PublishBy, next.ScheduledAt); err != nil {
			return nil, err
		}
		by := database.Normalize(*in.PublishBy)
		next.PublishBy = &by
		changes["publish_by"] = by
	}
	next.UpdatedAt = now
	next.Traceparent = traceparentOf(ctx) // the reservation continues the last edit's trace
	changes["traceparent"] = next.Traceparent
	markException(&next, changes)
	if err := s.write(ctx, current, &next, changes, event.ActionUpdated, now); err != nil {
		return nil, fmt.Errorf("update post %d: %w", id, err)
	}
	return &next, nil
}

// Cancel moves a RESERVED or WORKING post to CANCELLED and records its
// CANCELLED event; errors as for Update.
func (s *Service) Cancel(ctx context.Context, id int64) (*Post, error) {
	now := s.now()
	current, err := postByID(s.db.WithContext(ctx).Scopes(visibleTo(ctx)), id)
	if err != nil {
		return nil, err
	}
	if !CanTransition(current.Status, StatusCancelled) {
		return nil, fmt.Errorf("%w: post %d is %s; only %s or %s posts can be cancelled",
			ErrInvalidTransition, id, current.Status, StatusReserved, StatusWorking)
	}
	next := *current
	next.Status = StatusCancelled
	next.UpdatedAt = now
	changes := map[string]any{"status": StatusCancelled, "updated_at": now}
	markException(&next, changes)
	if err := s.write(ctx, current, &next, changes, event.ActionCancelled, now); err != nil {
		return nil, fmt.Errorf("cancel post %d: %w", id, err)
	}
	return &next, nil
}

// write applies changes to the post read as current and appends next's event,
// in one transaction. The post was read outside the transaction: the UPDATE
// only matches while the row still has the version and status that were
// read (the optimisticlock plugin adds "AND version = ?" and sets
// version = version + 1), so a change that slipped in between makes it match
// nothing and the caller gets ErrConflict instead of overwriting it. The
// status condition also guards against a writer that changed the status
// without bumping the version. Keeping the read out of the transaction keeps
// SQLite's single write lock short.
func (s *Service) write(ctx context.Context, current, next *Post, changes map[string]any, action event.Action, now time.Time) error {
	ch := &postChange{current: current, next: next, changes: changes, action: action}
	if err := s.transact(ctx, current.ID, func(tx *gorm.DB) error { return writeChange(tx, ch, now) }); err != nil {
		return err
	}
	next.Version.Int64, next.Version.Valid = current.Version.Int64+1, true
	return nil
}

// transact runs fn, the statements of a write to the post postID (0: a
// new one), in a group transaction (group commit), or in one of its own
// when groups are off.
func (s *Service) transact(ctx context.Context, postID int64, fn func(tx *gorm.DB) error) error {
	if s.groups != nil {
		return s.groups.do(ctx, postID, fn)
	}
	return database.Transaction(ctx, s.db, fn)
}

// postChange is the change of a post read as current into next: changes
// are the columns written, action the event's.
type postChange struct {
	current, next *Post
	changes       map[string]any
	action        event.Action
}

// writeChange is write's statements through tx: the UPDATE, held to the
// version and status read, and the event; ErrConflict, having written
// nothing, when the post moved on.
func writeChange(tx *gorm.DB, ch *postChange, now time.Time) error {
	// A copy as the model: GORM writes the map's values back into it,
	// and the version becomes an SQL expression there.
	model := *ch.current
	res := tx.Model(&model).Where("status = ?", ch.current.Status).Updates(ch.changes)
	if res.Error != nil {
		return fmt.Errorf("write post: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("%w: post %d is no longer at version %d", ErrConflict, ch.current.ID, ch.current.Version.Int64)
	}
	return appendChangeEvent(tx, ch.next, ch.action, now)
}

// appendChangeEvent writes p's POSTING_EVENT row in tx.
func appendChangeEvent(tx *gorm.DB, p *Post, action event.Action, now time.Time) error {
	fields := event.PostingEventFields{Action: action, Status: string(p.Status), ScheduledAt: p.ScheduledAt, OwnerID: p.OwnerID}
	if p.SeriesID != nil {
		fields.SeriesID = p.SeriesID
		if p.Occurrence != nil {
			fields.Occurrence = FormatLocalTime(*p.Occurrence)
		}
	}
	return appendEvent(tx, event.PostingEvent, p.ID, now, fields, "")
}

// appendEvent builds the event of type typ about post postID with its
// fields and writes it to the outbox through tx: the post is the event's
// aggregate, so its events reach the topic in the order they were written.
func appendEvent(tx *gorm.DB, typ event.Type, postID int64, at time.Time, fields any, dedupKey string) error {
	e, err := event.New(typ, postID, at, fields)
	if err != nil {
		return err
	}
	_, err = outbox.Append(tx, OutboxEvent(e, dedupKey))
	return err
}

// OutboxEvent is the outbox row of event e: the one place an event becomes
// a row (its post is the row's aggregate, so a post's events reach the
// broker in the order they were written). dedupKey is empty unless at most
// one such event may exist (event.ReservationDedupKey).
func OutboxEvent(e event.Event, dedupKey string) outbox.Event {
	return outbox.Event{ID: e.EventID, Type: string(e.EventType), AggregateID: e.PostID,
		OccurredAt: e.OccurredAt, Payload: e.Value, DedupKey: dedupKey}
}

// postByID loads a post, translating gorm.ErrRecordNotFound to ErrNotFound.
func postByID(db *gorm.DB, id int64) (*Post, error) {
	var p Post
	if err := db.Where("id = ?", id).Take(&p).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return nil, fmt.Errorf("%w: id %d", ErrNotFound, id)
		}
		return nil, fmt.Errorf("load post %d: %w", id, err)
	}
	return &p, nil
}

// validateText checks a text field: valid UTF-8, not blank, at most maxLen
// characters, and no control characters (Unicode category Cc: C0, DEL, C1)
// except those in allowed. A title allows none: it is one line, shown in
// lists and logs, where a newline or an escape sequence would forge another
// line. Content allows tab, line feed and carriage return (text from a form
// arrives with CRLF line ends).
func validateText(field, v string, maxLen int, allowed string) error {
	if !utf8.ValidString(v) {
		return invalidField(field, "must be valid UTF-8")
	}
	if strings.TrimSpace(v) == "" {
		return invalidField(field, "must not be empty or blank")
	}
	if n := utf8.RuneCountInString(v); n > maxLen {
		return invalidField(field, fmt.Sprintf("must be at most %d characters, got %d", maxLen, n))
	}
	pos := 0
	for _, r := range v {
		pos++
		if unicode.IsControl(r) && !strings.ContainsRune(allowed, r) {
			return invalidField(field, fmt.Sprintf("must not contain control characters, got %U at character %d", r, pos))
		}
	}
	return nil
}

// Control characters a field may hold (see validateText).
const (
	titleControls   = ""
	contentControls = "\t\n\r"
)

func (s *Service) validateScheduledAt(at, now time.Time) error {
	if at.IsZero() {
		return invalidField("scheduledAt", "is required")
	}
	at = database.Normalize(at)
	if !at.After(now) {
		return invalidField("scheduledAt", "must lie in the future")
	}
	if at.Sub(now) > s.cfg.MaxAhead {
		return invalidField("scheduledAt", "must lie at most "+daysOrDuration(s.cfg.MaxAhead)+" ahead")
	}
	return nil
}

// daysOrDuration prints whole days as days, so a one-year limit reads
// "365 days" rather than "8760h0m0s".
func daysOrDuration(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return fmt.Sprintf("%d days", d/day)
	}
	return d.String()
}

func statusNames() string {
	names := make([]string, len(Statuses))
	for i, st := range Statuses {
		names[i] = string(st)
	}
	return strings.Join(names, ", ")
}

// listCursor is the position after the last post of a page: its id, and
// its scheduledAt when the pages are in time order (at is zero otherwise).
type listCursor struct {
	at time.Time
	id int64
}

func (c listCursor) order() ListOrder {
	if c.at.IsZero() {
		return OrderByID
	}
	return OrderByScheduledAt
}

// encode makes the opaque cursor: base64url of the decimal id in id order
// (the form every earlier cursor has), of "<unix microseconds>:<id>" in
// time order.
func (c listCursor) encode() string {
	s := strconv.FormatInt(c.id, 10)
	if !c.at.IsZero() {
		s = strconv.FormatInt(c.at.UnixMicro(), 10) + ":" + s
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

// decodeCursor accepts only cursors encode makes, so a tampered one is
// refused rather than silently read as another position.
func decodeCursor(s string) (listCursor, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return listCursor{}, false
	}
	var c listCursor
	idPart := string(raw)
	if atPart, rest, ok := strings.Cut(idPart, ":"); ok {
		micros, err := strconv.ParseInt(atPart, 10, 64)
		if err != nil {
			return listCursor{}, false
		}
		c.at, idPart = time.UnixMicro(micros).UTC(), rest
		if c.at.IsZero() || !storable(c.at) {
			return listCursor{}, false
		}
	}
	if c.id, err = strconv.ParseInt(idPart, 10, 64); err != nil || c.id <= 0 || c.encode() != s {
		return listCursor{}, false
	}
	return c, true
}
