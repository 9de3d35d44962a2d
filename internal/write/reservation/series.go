package reservation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/plugin/optimisticlock"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/storage/database"
)

// Defaults and limits of recurring series.
const (
	// DefaultSeriesHorizon is how far ahead a series' occurrences become
	// posts unless ServiceConfig.SeriesHorizon says otherwise: a week, so
	// that a client sees (and may change or cancel) a week of occurrence
	// posts, far beyond the reservation lead.
	DefaultSeriesHorizon = 7 * 24 * time.Hour
	// MinSeriesHorizon and MaxSeriesHorizon bound SeriesHorizon.
	MinSeriesHorizon = time.Hour
	MaxSeriesHorizon = 90 * 24 * time.Hour
	// DefaultSeriesLimit is the most occurrences a series may have within
	// any span of its horizon; a denser rule is refused.
	DefaultSeriesLimit = 1000
	// NextOccurrencesShown is how many upcoming occurrences a series'
	// JSON lists.
	NextOccurrencesShown = 5
	// MaxPublishWithin bounds a series' publishWithin.
	MaxPublishWithin = 365 * 24 * time.Hour
)

// SeriesStatus is the state of a series.
type SeriesStatus string

// The series statuses. ACTIVE makes occurrences into posts; ENDED has made
// its last one (COUNT or UNTIL reached), and an edit with a rule that has
// more makes it ACTIVE again; CANCELLED makes none and is final.
const (
	SeriesActive    SeriesStatus = "ACTIVE"
	SeriesEnded     SeriesStatus = "ENDED"
	SeriesCancelled SeriesStatus = "CANCELLED"
)

// ErrSeriesNotFound: no series has the id (or it is another owner's).
var ErrSeriesNotFound = errors.New("series not found")

// Series is a recurring series, one row of the series table (migration
// 00012).
type Series struct {
	ID      int64  `gorm:"column:id;primaryKey;autoIncrement"`
	OwnerID string `gorm:"column:owner_id"`
	Title   string `gorm:"column:title"`
	Content string `gorm:"column:content"`
	// TimeZone is the IANA name of the zone of Start and the rule.
	TimeZone string `gorm:"column:time_zone"`
	// StartLocal is the series' start, a wall time of TimeZone with its
	// fields given as a UTC time (the rule's DTSTART).
	StartLocal time.Time `gorm:"column:start_local"`
	// RRule is the RFC 5545 rule as the client wrote it.
	RRule string `gorm:"column:rrule"`
	// PublishWithin is the ISO 8601 duration after each occurrence that
	// sets its post's publishBy; nil: the service's late limit.
	PublishWithin *string      `gorm:"column:publish_within"`
	Status        SeriesStatus `gorm:"column:status"`
	// MaterializedUntil is the instant up to which the occurrences have
	// been made into posts (those from the series' creation or last edit).
	MaterializedUntil time.Time `gorm:"column:materialized_until"`
	CreatedAt         time.Time `gorm:"column:created_at;autoCreateTime:false"`
	UpdatedAt         time.Time `gorm:"column:updated_at;autoUpdateTime:false"`
	Version           int64     `gorm:"column:version"`
}

// TableName is the table of migration 00012.
func (Series) TableName() string { return "series" }

// seriesOccurrence is one row of series_occurrences: an occurrence made into
// a post. Its primary key makes that happen once.
type seriesOccurrence struct {
	SeriesID   int64     `gorm:"column:series_id;primaryKey;autoIncrement:false"`
	Occurrence time.Time `gorm:"column:occurrence;primaryKey"`
	PostID     *int64    `gorm:"column:post_id"`
}

func (seriesOccurrence) TableName() string { return "series_occurrences" }

// SeriesInput is a new series.
type SeriesInput struct {
	Title, Content string
	// TimeZone is an IANA zone name.
	TimeZone string
	// Start is a wall time of TimeZone, its fields given as a UTC time.
	Start time.Time
	// RRule is an RFC 5545 RRULE value.
	RRule string
	// PublishWithin is an ISO 8601 duration; nil: none.
	PublishWithin *string
}

// SeriesUpdate changes a series; nil fields keep their value.
// ClearPublishWithin removes the series' publishWithin.
type SeriesUpdate struct {
	Title, Content, TimeZone, RRule *string
	Start                           *time.Time
	PublishWithin                   *string
	ClearPublishWithin              bool
}

// SeriesView is a series with its upcoming occurrences, computed from its
// rule.
type SeriesView struct {
	Series
	Next []Occurrence
}

// seriesPlan is a series' rule compiled: the recurrence and the duration of
// publishWithin.
type seriesPlan struct {
	rec    *recurrence
	within time.Duration
}

// compile checks s's fields and compiles its rule, without the checks that
// depend on the time (see checkRule).
func (svc *Service) compile(s *Series) (*seriesPlan, error) { return compileSeries(s) }

func compileSeries(s *Series) (*seriesPlan, error) {
	if err := validateText("title", s.Title, MaxTitleLength, titleControls); err != nil {
		return nil, err
	}
	if err := validateText("content", s.Content, MaxContentLength, contentControls); err != nil {
		return nil, err
	}
	loc, err := loadZone(s.TimeZone)
	if err != nil {
		return nil, err
	}
	if s.StartLocal.IsZero() {
		return nil, invalidField("start", "is required")
	}
	if !storable(s.StartLocal) {
		return nil, invalidField("start", "must lie within the years 1 to 9999")
	}
	p := &seriesPlan{}
	if s.PublishWithin != nil {
		d, err := parseISODuration(*s.PublishWithin)
		if err != nil {
			return nil, invalidField("publishWithin", err.Error())
		}
		if d <= 0 || d > MaxPublishWithin {
			return nil, invalidField("publishWithin", "must be longer than zero and at most "+daysOrDuration(MaxPublishWithin))
		}
		p.within = d
	}
	if p.rec, err = parseRecurrence(s.RRule, s.StartLocal, loc); err != nil {
		return nil, err
	}
	return p, nil
}

// checkRule refuses a rule without an occurrence from now on, or denser
// than the limit per horizon. A new start or rule (newStart) is refused
// too when it has so many occurrences before now that every expansion of
// the series would spend long on them; a stored one only grows into that
// with the years, and an edit of other fields does not refuse it then.
func (svc *Service) checkRule(p *seriesPlan, now time.Time, newStart bool) error {
	maxSkip := math.MaxInt
	if newStart {
		maxSkip = maxOccurrencesBefore
	}
	return p.rec.check(now, svc.cfg.SeriesHorizon, svc.cfg.SeriesLimit, maxSkip)
}

// seriesNow reads the clock series are materialized by: the database's.
func (svc *Service) seriesNow(ctx context.Context, db *gorm.DB) (time.Time, error) {
	t, err := svc.cfg.SeriesClock(ctx, db)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return database.Normalize(t), nil
}

// materializeTo is how far a materialization reaches from now: an eighth
// beyond the horizon, so a series is due again only after an eighth of the
// horizon has passed rather than at every run.
func (svc *Service) materializeTo(now time.Time) time.Time {
	return now.Add(svc.cfg.SeriesHorizon + svc.cfg.SeriesHorizon/8)
}

// seriesWrites is what a series create or edit spends of a write limit:
// one write per occurrence within the reach of a materialization (each a
// post made, or a post the edit changes), at least one. The reach starts
// at the series' first occurrence from now on: a series starting beyond
// it makes no post now but as many once its start comes within reach, at
// no request's cost.
func (svc *Service) seriesWrites(plan *seriesPlan, now time.Time) int {
	from := now
	if next := plan.rec.next(now, 1); len(next) == 1 {
		from = next[0].At
	}
	n := len(plan.rec.between(from, from.Add(svc.materializeTo(now).Sub(now)), svc.cfg.SeriesLimit))
	return max(1, min(n, svc.cfg.SeriesLimit))
}

// CreateSeries stores a new ACTIVE series and, in the same transaction,
// makes its occurrences within the horizon into posts, each with its
// CREATED event. Occurrences before now are not made. Once the input is
// checked, it spends seriesWrites through ctx's Charge, and returns the
// Charge's error, writing nothing, when that refuses.
func (svc *Service) CreateSeries(ctx context.Context, in SeriesInput) (*SeriesView, error) {
	s := &Series{Title: in.Title, Content: in.Content, TimeZone: in.TimeZone, StartLocal: database.Normalize(in.Start),
		RRule: strings.TrimSpace(in.RRule), PublishWithin: in.PublishWithin, Status: SeriesActive, OwnerID: ownerOf(ctx), Version: 1}
	plan, err := svc.compile(s)
	if err != nil {
		return nil, err
	}
	now, err := svc.seriesNow(ctx, svc.db.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	if err := svc.checkRule(plan, now, true); err != nil {
		return nil, err
	}
	if err := charge(ctx, svc.seriesWrites(plan, now)); err != nil {
		return nil, err
	}
	err = database.Transaction(ctx, svc.db, func(tx *gorm.DB) error {
		now, err := svc.seriesNow(ctx, tx)
		if err != nil {
			return err
		}
		row := *s // a retried transaction starts from the input again
		row.MaterializedUntil, row.CreatedAt, row.UpdatedAt = now, now, now
		if err := tx.Create(&row).Error; err != nil {
			return fmt.Errorf("insert series: %w", err)
		}
		if _, err := svc.materialize(ctx, tx, &row, plan, now); err != nil {
			return err
		}
		*s = row
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("create series: %w", err)
	}
	return svc.view(s, plan, now), nil
}

// view is s with its next occurrences from now.
func (svc *Service) view(s *Series, plan *seriesPlan, now time.Time) *SeriesView {
	v := &SeriesView{Series: *s, Next: []Occurrence{}}
	if s.Status != SeriesCancelled && plan != nil {
		v.Next = plan.rec.next(now, NextOccurrencesShown)
	}
	return v
}

// PublishByOf is the publishBy the view's series gives an occurrence at at;
// nil when it sets none.
func (v *SeriesView) PublishByOf(at time.Time) *time.Time {
	if v.PublishWithin == nil {
		return nil
	}
	d, err := parseISODuration(*v.PublishWithin)
	if err != nil {
		return nil
	}
	t := at.Add(d)
	return &t
}

// materialize makes the occurrences of s whose instants lie from
// s.MaterializedUntil to materializeTo(now) into posts, through tx, in which
// the caller holds s's row (a new row, or one read with lockSeries). Each
// occurrence first claims its (series, occurrence) key with an insert that
// skips a taken key: an occurrence claimed before (by another instance, or
// kept through an edit) is passed over, so each becomes a post once. At
// most SeriesLimit are made per call; the rest wait for the next.
func (svc *Service) materialize(ctx context.Context, tx *gorm.DB, s *Series, plan *seriesPlan, now time.Time) (int, error) {
	to := svc.materializeTo(now)
	if !to.After(s.MaterializedUntil) || s.Status == SeriesCancelled {
		return 0, nil
	}
	occs := plan.rec.between(s.MaterializedUntil, to, svc.cfg.SeriesLimit)
	slices.SortStableFunc(occs, func(a, b Occurrence) int { return a.At.Compare(b.At) })
	until := to
	if len(occs) > svc.cfg.SeriesLimit {
		until = occs[svc.cfg.SeriesLimit].At
		occs = occs[:svc.cfg.SeriesLimit]
	}
	drv := database.DriverOf(tx)
	made := 0
	for _, o := range occs {
		claim := seriesOccurrence{SeriesID: s.ID, Occurrence: database.Normalize(o.Local)}
		res := drv.InsertIgnore(tx).Create(&claim)
		if res.Error != nil {
			return made, fmt.Errorf("claim occurrence %s of series %d: %w", FormatLocalTime(o.Local), s.ID, res.Error)
		}
		if res.RowsAffected == 0 {
			continue // made before, or kept by an edit
		}
		p, err := svc.insertOccurrence(ctx, tx, s, plan, o, now)
		if err != nil {
			return made, err
		}
		if err := tx.Model(&seriesOccurrence{}).Where("series_id = ? AND occurrence = ?", s.ID, claim.Occurrence).
			Update("post_id", p.ID).Error; err != nil {
			return made, fmt.Errorf("record post of occurrence: %w", err)
		}
		made++
	}
	s.MaterializedUntil = until
	if s.Status == SeriesActive && len(plan.rec.next(until, 1)) == 0 {
		s.Status = SeriesEnded
	}
	err := tx.Model(&Series{}).Where("id = ?", s.ID).
		Updates(map[string]any{"materialized_until": s.MaterializedUntil, "status": s.Status}).Error
	if err != nil {
		return made, fmt.Errorf("advance series %d: %w", s.ID, err)
	}
	return made, nil
}

// insertOccurrence writes the RESERVED post of occurrence o of s and its
// CREATED event through tx. The post belongs to the series' owner.
func (svc *Service) insertOccurrence(ctx context.Context, tx *gorm.DB, s *Series, plan *seriesPlan, o Occurrence, now time.Time) (*Post, error) {
	id, local := s.ID, database.Normalize(o.Local)
	at := database.Normalize(o.At)
	p := &Post{
		Title:       s.Title,
		Content:     s.Content,
		Status:      StatusReserved,
		ScheduledAt: at,
		CreatedAt:   now,
		UpdatedAt:   now,
		OwnerID:     s.OwnerID,
		Version:     optimisticlock.Version{Int64: 1, Valid: true},
		Traceparent: traceparentOf(ctx),
		PublishBy:   svc.occurrencePublishBy(plan, at),
		SeriesID:    &id,
		Occurrence:  &local,
	}
	if err := svc.insert.exec(ctx, tx, p); err != nil {
		return nil, fmt.Errorf("insert occurrence post: %w", err)
	}
	return p, appendChangeEvent(tx, p, event.ActionCreated, now)
}

// occurrencePublishBy is the deadline of an occurrence at at: at plus the
// series' publishWithin, else the service's late limit, else none.
func (svc *Service) occurrencePublishBy(plan *seriesPlan, at time.Time) *time.Time {
	if plan.within > 0 {
		t := database.Normalize(at.Add(plan.within))
		return &t
	}
	return svc.publishBy(at, nil)
}

// lockSeries reads series id visible to ctx's caller through tx, locked
// until tx ends, or returns an error wrapping ErrSeriesNotFound.
func lockSeries(ctx context.Context, tx *gorm.DB, id int64) (*Series, error) {
	var s Series
	q := database.DriverOf(tx).ForUpdate(tx.Scopes(visibleTo(ctx)).Where("id = ?", id))
	if err := q.Take(&s).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return nil, fmt.Errorf("%w: id %d", ErrSeriesNotFound, id)
		}
		return nil, fmt.Errorf("load series %d: %w", id, err)
	}
	return &s, nil
}

// GetSeries returns series id with its next occurrences, or an error
// wrapping ErrSeriesNotFound (also for another owner's series).
func (svc *Service) GetSeries(ctx context.Context, id int64) (*SeriesView, error) {
	var s Series
	if err := svc.db.WithContext(ctx).Scopes(visibleTo(ctx)).Where("id = ?", id).Take(&s).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return nil, fmt.Errorf("%w: id %d", ErrSeriesNotFound, id)
		}
		return nil, fmt.Errorf("load series %d: %w", id, err)
	}
	now, err := svc.seriesNow(ctx, svc.db.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	return svc.viewStored(&s, now), nil
}

// viewStored is view for a stored series, whose rule compiled when it was
// stored (a rule that no longer does shows no occurrences).
func (svc *Service) viewStored(s *Series, now time.Time) *SeriesView { return NewSeriesView(s, now) }

// NewSeriesView returns s, a stored series, with its next occurrences from
// now (none when its stored rule no longer compiles), for readers outside
// the Service such as the operator console.
func NewSeriesView(s *Series, now time.Time) *SeriesView {
	v := &SeriesView{Series: *s, Next: []Occurrence{}}
	if plan, err := compileSeries(s); err == nil && s.Status != SeriesCancelled {
		v.Next = plan.rec.next(now, NextOccurrencesShown)
	}
	return v
}

// SeriesListQuery selects a page of series in id order.
type SeriesListQuery struct {
	// Status filters by status; "" lists all.
	Status SeriesStatus
	// Limit is 1..MaxListLimit; 0 means DefaultListLimit.
	Limit int
	// Cursor is the previous page's NextCursor; "" starts at the beginning.
	Cursor string
	// OwnerID narrows the list to one owner, as ListQuery.OwnerID does.
	OwnerID *string
}

// SeriesPage is one page of series.
type SeriesPage struct {
	Items      []SeriesView
	NextCursor string
}

// ListSeries returns a page of the series ctx's caller sees, by id (keyset
// pagination, as List).
func (svc *Service) ListSeries(ctx context.Context, q SeriesListQuery) (*SeriesPage, error) {
	switch q.Status {
	case "", SeriesActive, SeriesEnded, SeriesCancelled:
	default:
		return nil, invalidField("status", fmt.Sprintf("must be one of %s, %s, %s", SeriesActive, SeriesEnded, SeriesCancelled))
	}
	limit := q.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 1 || limit > MaxListLimit {
		return nil, invalidField("limit", fmt.Sprintf("must be between 1 and %d", MaxListLimit))
	}
	query := svc.db.WithContext(ctx).Scopes(visibleTo(ctx))
	if q.Cursor != "" {
		after, ok := decodeCursor(q.Cursor)
		if !ok || after.order() != OrderByID {
			return nil, invalidField("cursor", "is not a cursor returned by this API")
		}
		query = query.Where("id > ?", after.id)
	}
	if q.OwnerID != nil {
		query = query.Where("owner_id = ?", *q.OwnerID)
	}
	if q.Status != "" {
		query = query.Where("status = ?", q.Status)
	}
	var rows []Series
	if err := query.Order("id ASC").Limit(limit + 1).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list series: %w", err)
	}
	page := &SeriesPage{Items: []SeriesView{}}
	if len(rows) > limit {
		rows = rows[:limit]
		page.NextCursor = listCursor{id: rows[limit-1].ID}.encode()
	}
	now, err := svc.seriesNow(ctx, svc.db.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	for i := range rows {
		page.Items = append(page.Items, *svc.viewStored(&rows[i], now))
	}
	return page, nil
}

// UpdateSeries changes a series that is not CANCELLED. The change applies
// to its occurrence posts still RESERVED and not exceptions: one whose
// local occurrence the new rule still has keeps its post, which takes the
// new title, content, instant and deadline (an UPDATED event); any other is
// cancelled (a CANCELLED event). Occurrences the new rule adds from now on
// become posts. WORKING, PUBLISHED and exception posts are left as they
// are, and an occurrence they hold is not made again. It returns a
// *ValidationError, an error wrapping ErrSeriesNotFound,
// ErrInvalidTransition for a CANCELLED series, ErrConflict when the
// series changed after it was read, or the error of ctx's Charge, which
// is spent as for CreateSeries.
func (svc *Service) UpdateSeries(ctx context.Context, id int64, in SeriesUpdate) (*SeriesView, error) {
	if in.Title == nil && in.Content == nil && in.TimeZone == nil && in.RRule == nil && in.Start == nil &&
		in.PublishWithin == nil && !in.ClearPublishWithin {
		return nil, invalidField("body", "must set at least one of title, content, timeZone, start, rrule, publishWithin")
	}
	current, err := svc.GetSeries(ctx, id)
	if err != nil {
		return nil, err
	}
	if current.Status == SeriesCancelled {
		return nil, fmt.Errorf("%w: series %d is %s", ErrInvalidTransition, id, SeriesCancelled)
	}
	next := current.Series
	if in.Title != nil {
		next.Title = *in.Title
	}
	if in.Content != nil {
		next.Content = *in.Content
	}
	if in.TimeZone != nil {
		next.TimeZone = *in.TimeZone
	}
	if in.RRule != nil {
		next.RRule = strings.TrimSpace(*in.RRule)
	}
	if in.Start != nil {
		next.StartLocal = database.Normalize(*in.Start)
	}
	if in.ClearPublishWithin {
		next.PublishWithin = nil
	} else if in.PublishWithin != nil {
		next.PublishWithin = in.PublishWithin
	}
	plan, err := svc.compile(&next)
	if err != nil {
		return nil, err
	}
	now, err := svc.seriesNow(ctx, svc.db.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	if err := svc.checkRule(plan, now, in.Start != nil || in.RRule != nil); err != nil {
		return nil, err
	}
	if err := charge(ctx, svc.seriesWrites(plan, now)); err != nil {
		return nil, err
	}
	var out Series
	err = database.Transaction(ctx, svc.db, func(tx *gorm.DB) error {
		locked, err := lockSeries(ctx, tx, id)
		if err != nil {
			return err
		}
		if locked.Version != current.Version {
			return fmt.Errorf("%w: series %d is no longer at version %d", ErrConflict, id, current.Version)
		}
		now, err := svc.seriesNow(ctx, tx)
		if err != nil {
			return err
		}
		row := next
		row.Version, row.UpdatedAt, row.MaterializedUntil, row.Status = locked.Version+1, now, now, SeriesActive
		err = tx.Model(&Series{}).Where("id = ?", id).Updates(map[string]any{
			"title": row.Title, "content": row.Content, "time_zone": row.TimeZone, "start_local": row.StartLocal,
			"rrule": row.RRule, "publish_within": row.PublishWithin, "status": row.Status,
			"materialized_until": row.MaterializedUntil, "updated_at": now, "version": row.Version,
		}).Error
		if err != nil {
			return fmt.Errorf("update series %d: %w", id, err)
		}
		if err := svc.reconcile(ctx, tx, &row, plan, now); err != nil {
			return err
		}
		if _, err := svc.materialize(ctx, tx, &row, plan, now); err != nil {
			return err
		}
		out = row
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("update series %d: %w", id, err)
	}
	return svc.view(&out, plan, now), nil
}

// followers are the posts of series id that its changes apply to: RESERVED
// and not exceptions.
func followers(tx *gorm.DB, id int64) ([]Post, error) {
	var posts []Post
	err := tx.Where("series_id = ? AND status = ? AND series_exception = ?", id, StatusReserved, false).
		Order("id").Find(&posts).Error
	if err != nil {
		return nil, fmt.Errorf("read the posts of series %d: %w", id, err)
	}
	return posts, nil
}

// reconcile applies s, as just changed, to its followers through tx (see
// UpdateSeries).
func (svc *Service) reconcile(ctx context.Context, tx *gorm.DB, s *Series, plan *seriesPlan, now time.Time) error {
	posts, err := followers(tx, s.ID)
	if err != nil || len(posts) == 0 {
		return err
	}
	// The new rule's occurrences over the span of the posts (a zone
	// change moves instants by up to a day).
	from := now
	for _, p := range posts {
		if p.ScheduledAt.Before(from) {
			from = p.ScheduledAt
		}
	}
	keep := map[int64]Occurrence{}
	for _, o := range plan.rec.between(from.Add(-48*time.Hour), svc.materializeTo(now).Add(48*time.Hour), math.MaxInt32) {
		keep[o.Local.UnixMicro()] = o
	}
	for i := range posts {
		p := &posts[i]
		if p.Occurrence == nil {
			continue
		}
		o, ok := keep[p.Occurrence.UTC().UnixMicro()]
		if !ok {
			if err := svc.cancelFollower(tx, p, now); err != nil {
				return err
			}
			continue
		}
		at := database.Normalize(o.At)
		changes := map[string]any{"title": s.Title, "content": s.Content, "scheduled_at": at,
			"publish_by": svc.occurrencePublishBy(plan, at), "updated_at": now, "traceparent": traceparentOf(ctx)}
		next := *p
		next.Title, next.Content, next.ScheduledAt, next.PublishBy, next.UpdatedAt = s.Title, s.Content, at,
			svc.occurrencePublishBy(plan, at), now
		ok, err := writeFollower(tx, p, changes)
		if err != nil {
			return err
		}
		if !ok {
			continue // taken by the scheduler or changed meanwhile: theirs; the others still follow
		}
		if err := appendChangeEvent(tx, &next, event.ActionUpdated, now); err != nil {
			return err
		}
	}
	return nil
}

// writeFollower applies changes to p, bumping its version, only while it is
// still the RESERVED non-exception post at the version read: a post the
// scheduler took or its owner changed meanwhile is left to them.
func writeFollower(tx *gorm.DB, p *Post, changes map[string]any) (bool, error) {
	changes["version"] = gorm.Expr("version + 1")
	res := tx.Table(Post{}.TableName()).
		Where("id = ? AND version = ? AND status = ? AND series_exception = ?", p.ID, p.Version.Int64, StatusReserved, false).
		Updates(changes)
	if res.Error != nil {
		return false, fmt.Errorf("write post %d of series: %w", p.ID, res.Error)
	}
	return res.RowsAffected == 1, nil
}

// cancelFollower cancels p, a follower, with its CANCELLED event, and
// frees its occurrence key, so a later edit whose rule has the occurrence
// again makes it anew.
func (svc *Service) cancelFollower(tx *gorm.DB, p *Post, now time.Time) error {
	ok, err := writeFollower(tx, p, map[string]any{"status": StatusCancelled, "updated_at": now})
	if err != nil || !ok {
		return err
	}
	next := *p
	next.Status, next.UpdatedAt = StatusCancelled, now
	if err := tx.Where("series_id = ? AND occurrence = ?", *p.SeriesID, database.Normalize(*p.Occurrence)).
		Delete(&seriesOccurrence{}).Error; err != nil {
		return fmt.Errorf("free occurrence of post %d: %w", p.ID, err)
	}
	return appendChangeEvent(tx, &next, event.ActionCancelled, now)
}

// CancelSeries makes series id CANCELLED: no further occurrence becomes a
// post, and its RESERVED occurrence posts that are not exceptions are
// cancelled, each with its CANCELLED event. WORKING posts and exceptions
// stay as they are (each can be cancelled on its own). It returns an error
// wrapping ErrSeriesNotFound, or ErrInvalidTransition when the series is
// CANCELLED already.
func (svc *Service) CancelSeries(ctx context.Context, id int64) (*SeriesView, error) {
	var out Series
	var now time.Time
	err := database.Transaction(ctx, svc.db, func(tx *gorm.DB) error {
		s, err := lockSeries(ctx, tx, id)
		if err != nil {
			return err
		}
		if s.Status == SeriesCancelled {
			return fmt.Errorf("%w: series %d is %s already", ErrInvalidTransition, id, SeriesCancelled)
		}
		if now, err = svc.seriesNow(ctx, tx); err != nil {
			return err
		}
		s.Status, s.UpdatedAt, s.Version = SeriesCancelled, now, s.Version+1
		if err := tx.Model(&Series{}).Where("id = ?", id).
			Updates(map[string]any{"status": s.Status, "updated_at": now, "version": s.Version}).Error; err != nil {
			return fmt.Errorf("cancel series %d: %w", id, err)
		}
		posts, err := followers(tx, id)
		if err != nil {
			return err
		}
		for i := range posts {
			if err := svc.cancelFollower(tx, &posts[i], now); err != nil {
				return err
			}
		}
		out = *s
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cancel series %d: %w", id, err)
	}
	return svc.view(&out, nil, now), nil
}

// MaterializeResult is what one MaterializeSeries did.
type MaterializeResult struct {
	// Series counts the series whose horizon was extended.
	Series int
	// Posts counts the occurrence posts made.
	Posts int
}

// MaterializeSeries extends the horizon of up to batch ACTIVE series whose
// materialized occurrences reach less than the horizon ahead, by the
// database's clock, each in its own transaction with its row locked. Any
// number of instances may run it at once: a series' lock makes the second
// wait and then find the work done, and the (series, occurrence) key makes
// each occurrence a post once whatever happens.
func (svc *Service) MaterializeSeries(ctx context.Context, batch int) (MaterializeResult, error) {
	var res MaterializeResult
	now, err := svc.seriesNow(ctx, svc.db.WithContext(ctx))
	if err != nil {
		return res, err
	}
	var ids []int64
	err = svc.db.WithContext(ctx).Model(&Series{}).
		Where("status = ? AND materialized_until < ?", SeriesActive, now.Add(svc.cfg.SeriesHorizon)).
		Order("materialized_until, id").Limit(batch).Pluck("id", &ids).Error
	if err != nil {
		return res, fmt.Errorf("find series to materialize: %w", err)
	}
	var errs []error
	for _, id := range ids {
		made, done, err := svc.materializeOne(ctx, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if done {
			res.Series++
		}
		res.Posts += made
	}
	return res, errors.Join(errs...)
}

// materializeOne extends series id's horizon in one transaction; done is
// false when another instance did it first.
func (svc *Service) materializeOne(ctx context.Context, id int64) (made int, done bool, err error) {
	err = database.Transaction(ctx, svc.db, func(tx *gorm.DB) error {
		made, done = 0, false
		s, err := lockSeries(ctx, tx, id)
		if err != nil {
			return err
		}
		now, err := svc.seriesNow(ctx, tx)
		if err != nil {
			return err
		}
		if s.Status != SeriesActive || !s.MaterializedUntil.Before(now.Add(svc.cfg.SeriesHorizon)) {
			return nil
		}
		plan, err := svc.compile(s)
		if err != nil {
			return fmt.Errorf("series %d: stored rule: %w", id, err)
		}
		done = true
		made, err = svc.materialize(ctx, tx, s, plan, now)
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("materialize series %d: %w", id, err)
	}
	return made, done, nil
}

// markException marks next, about to be written with changes, as an
// exception of its series when it is an occurrence post.
func markException(next *Post, changes map[string]any) {
	if next.SeriesID != nil {
		next.SeriesException = true
		changes["series_exception"] = true
	}
}
