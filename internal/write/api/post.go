package api

import "github.com/postingsvc/posting/internal/write/reservation"

// PostJSON is a post as the HTTP API and the operator console show it (the
// OpenAPI document's Post). Times are RFC 3339 in UTC; PublishedAt is null
// until the post is published. The webhook has a shape of its own (package
// webhook), and the idempotency store keeps a form of its own
// (reservation), so a change here changes neither what receivers get nor
// what a stored answer reads back.
type PostJSON struct {
	ID          int64              `json:"id"`
	Title       string             `json:"title"`
	Content     string             `json:"content"`
	Status      reservation.Status `json:"status"`
	ScheduledAt string             `json:"scheduledAt"`
	CreatedAt   string             `json:"createdAt"`
	UpdatedAt   string             `json:"updatedAt"`
	PublishedAt *string            `json:"publishedAt"`
	// PublishBy is the latest instant the post may be published (its own,
	// or scheduledAt plus the service's late limit); null: no deadline.
	PublishBy *string `json:"publishBy"`
	// OwnerID is the JWT subject that created the post; "" when it was
	// created without authentication.
	OwnerID string `json:"ownerId"`
	// SeriesID is the series the post is an occurrence of; absent for a
	// post created on its own.
	SeriesID *int64 `json:"seriesId,omitempty"`
	// Occurrence is the occurrence's local date-time in its series' zone,
	// without an offset; absent for a post created on its own.
	Occurrence *string `json:"occurrence,omitempty"`
	// SeriesException, present on occurrences only, is true once the post
	// was changed or cancelled on its own: its series' edits leave it alone.
	SeriesException *bool `json:"seriesException,omitempty"`
}

// NewPostJSON returns p as the API shows it.
func NewPostJSON(p *reservation.Post) PostJSON {
	out := PostJSON{
		ID:          p.ID,
		Title:       p.Title,
		Content:     p.Content,
		Status:      p.Status,
		ScheduledAt: reservation.FormatJSONTime(p.ScheduledAt),
		CreatedAt:   reservation.FormatJSONTime(p.CreatedAt),
		UpdatedAt:   reservation.FormatJSONTime(p.UpdatedAt),
		OwnerID:     p.OwnerID,
	}
	if p.PublishedAt != nil {
		s := reservation.FormatJSONTime(*p.PublishedAt)
		out.PublishedAt = &s
	}
	if p.PublishBy != nil {
		s := reservation.FormatJSONTime(*p.PublishBy)
		out.PublishBy = &s
	}
	if p.SeriesID != nil {
		id, exc := *p.SeriesID, p.SeriesException
		out.SeriesID, out.SeriesException = &id, &exc
		if p.Occurrence != nil {
			s := reservation.FormatLocalTime(*p.Occurrence)
			out.Occurrence = &s
		}
	}
	return out
}
