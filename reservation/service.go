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

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/outbox"
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
}

// withDefaults fills the unset fields; it is the one place defaults live.
func (c ServiceConfig) withDefaults() ServiceConfig {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MaxAhead == 0 {
		c.MaxAhead = 365 * 24 * time.Hour
	}
	return c
}

// Validate reports a setting outside its limits.
func (c ServiceConfig) Validate() error {
	if c.Now == nil {
		return errors.New("Now must be set")
	}
	if c.MaxAhead <= 0 {
		return fmt.Errorf("MaxAhead must be positive, got %s", c.MaxAhead)
	}
	return nil
}

// Service is the write side of posts: every change writes the post and its
// POSTING_EVENT outbox row in one transaction, so an event exists exactly
// when its change does.
type Service struct {
	db  *gorm.DB
	cfg ServiceConfig
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
	return &Service{db: db, cfg: cfg}, nil
}

// CreateInput is a new post.
type CreateInput struct {
	Title, Content string
	ScheduledAt    time.Time
}

// UpdateInput changes a RESERVED post; nil fields keep their value.
type UpdateInput struct {
	Title, Content *string
	ScheduledAt    *time.Time
}

// ListQuery selects a page of posts.
type ListQuery struct {
	// Status filters by status; "" lists all posts.
	Status Status
	// Limit is the page size, 1..MaxListLimit; 0 means DefaultListLimit.
	Limit int
	// Cursor is the NextCursor of the previous page; "" starts at the first post.
	Cursor string
}

// Page is one page of posts in id order.
type Page struct {
	Items []Post
	// NextCursor continues after the last item; "" when there are no more posts.
	NextCursor string
}

// ValidationError is an input the rules refuse; Field names it the way the
// API spells it (title, content, scheduledAt, status, limit, cursor, or body
// for an update that changes nothing). It wraps ErrInvalidInput.
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
func (s *Service) now() time.Time { return outbox.Normalize(s.cfg.Now()) }

// Create stores a RESERVED post and its CREATED event.
func (s *Service) Create(ctx context.Context, in CreateInput) (*Post, error) {
	now := s.now()
	if err := validateText("title", in.Title, MaxTitleLength, titleControls); err != nil {
		return nil, err
	}
	if err := validateText("content", in.Content, MaxContentLength, contentControls); err != nil {
		return nil, err
	}
	if err := s.validateScheduledAt(in.ScheduledAt, now); err != nil {
		return nil, err
	}
	var created Post
	err := database.Transaction(ctx, s.db, func(tx *gorm.DB) error {
		// A fresh value per attempt: a retried transaction must not reuse the
		// id the rolled-back attempt was given.
		created = Post{
			Title:       in.Title,
			Content:     in.Content,
			Status:      StatusReserved,
			ScheduledAt: outbox.Normalize(in.ScheduledAt),
			CreatedAt:   now,
			UpdatedAt:   now,
		}
		if err := tx.Create(&created).Error; err != nil {
			return fmt.Errorf("insert post: %w", err)
		}
		return appendChangeEvent(tx, &created, ActionCreated, now)
	})
	if err != nil {
		return nil, fmt.Errorf("create post: %w", err)
	}
	return &created, nil
}

// Get returns the post with id, or an error wrapping ErrNotFound.
func (s *Service) Get(ctx context.Context, id int64) (*Post, error) {
	return postByID(s.db.WithContext(ctx), id)
}

// List returns a page of posts in ascending id order (keyset pagination: a
// page costs the same however deep it is, and posts created meanwhile never
// shift a page).
func (s *Service) List(ctx context.Context, q ListQuery) (*Page, error) {
	if q.Status != "" && !q.Status.Valid() {
		return nil, invalidField("status", fmt.Sprintf("must be one of %s", statusNames()))
	}
	limit := q.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 1 || limit > MaxListLimit {
		return nil, invalidField("limit", fmt.Sprintf("must be between 1 and %d", MaxListLimit))
	}
	var after int64
	if q.Cursor != "" {
		var ok bool
		if after, ok = decodeCursor(q.Cursor); !ok {
			return nil, invalidField("cursor", "is not a cursor returned by this API")
		}
	}
	// With a status this walks idx_posts_status_id, without one the primary
	// key; one row more than the page tells whether another page follows.
	query := s.db.WithContext(ctx).Where("id > ?", after)
	if q.Status != "" {
		query = query.Where("status = ?", q.Status)
	}
	var posts []Post
	if err := query.Order("id ASC").Limit(limit + 1).Find(&posts).Error; err != nil {
		return nil, fmt.Errorf("list posts: %w", err)
	}
	page := &Page{Items: posts}
	if len(posts) > limit {
		page.Items = posts[:limit]
		page.NextCursor = encodeCursor(page.Items[limit-1].ID)
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
	if in.Title == nil && in.Content == nil && in.ScheduledAt == nil {
		return nil, invalidField("body", "must set at least one of title, content, scheduledAt")
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
	current, err := postByID(s.db.WithContext(ctx), id)
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
		at := outbox.Normalize(*in.ScheduledAt)
		// Only a new time must lie ahead: resending the stored one with
		// another change is no reschedule.
		if !at.Equal(current.ScheduledAt) {
			if err := s.validateScheduledAt(at, now); err != nil {
				return nil, err
			}
		}
		next.ScheduledAt = at
		changes["scheduled_at"] = at
	}
	next.UpdatedAt = now
	if err := s.write(ctx, current, &next, changes, ActionUpdated, now); err != nil {
		return nil, fmt.Errorf("update post %d: %w", id, err)
	}
	return &next, nil
}

// Cancel moves a RESERVED or WORKING post to CANCELLED and records its
// CANCELLED event; errors as for Update.
func (s *Service) Cancel(ctx context.Context, id int64) (*Post, error) {
	now := s.now()
	current, err := postByID(s.db.WithContext(ctx), id)
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
	if err := s.write(ctx, current, &next, changes, ActionCancelled, now); err != nil {
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
func (s *Service) write(ctx context.Context, current, next *Post, changes map[string]any, action Action, now time.Time) error {
	err := database.Transaction(ctx, s.db, func(tx *gorm.DB) error {
		// A copy as the model: GORM writes the map's values back into it,
		// and the version becomes an SQL expression there.
		model := *current
		res := tx.Model(&model).Where("status = ?", current.Status).Updates(changes)
		if res.Error != nil {
			return fmt.Errorf("write post: %w", res.Error)
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("%w: post %d is no longer at version %d", ErrConflict, current.ID, current.Version.Int64)
		}
		return appendChangeEvent(tx, next, action, now)
	})
	if err != nil {
		return err
	}
	next.Version.Int64 = current.Version.Int64 + 1
	next.Version.Valid = true
	return nil
}

// appendChangeEvent writes p's POSTING_EVENT row in tx.
func appendChangeEvent(tx *gorm.DB, p *Post, action Action, now time.Time) error {
	_, err := outbox.Append(tx, outbox.Event{
		Type:       outbox.PostingEvent,
		PostID:     p.ID,
		OccurredAt: now,
		Fields:     PostingEventFields{Action: action, Status: p.Status, ScheduledAt: p.ScheduledAt},
	})
	return err
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
	at = outbox.Normalize(at)
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

// encodeCursor makes the opaque cursor that continues after id.
func encodeCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(id, 10)))
}

// decodeCursor accepts only cursors encodeCursor makes, so a tampered one is
// refused rather than silently read as another position.
func decodeCursor(c string) (int64, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, false
	}
	id, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || id <= 0 || encodeCursor(id) != c {
		return 0, false
	}
	return id, true
}
