package reservation

import "time"

// storedPost is the form in which the idempotency store keeps the post a
// key created (the response column), to answer a replay with. Rows written
// before it had a name of its own hold the same fields under the same
// names, so it is frozen: a new field is optional here, and a change to
// the API's JSON shape (api.PostJSON) never changes what a stored answer
// reads back.
type storedPost struct {
	ID          int64   `json:"id"`
	Title       string  `json:"title"`
	Content     string  `json:"content"`
	Status      Status  `json:"status"`
	ScheduledAt string  `json:"scheduledAt"`
	CreatedAt   string  `json:"createdAt"`
	UpdatedAt   string  `json:"updatedAt"`
	PublishedAt *string `json:"publishedAt"`
	PublishBy   *string `json:"publishBy"`
	OwnerID     string  `json:"ownerId"`
}

// newStoredPost returns p in the idempotency store's form.
func newStoredPost(p *Post) storedPost {
	out := storedPost{
		ID:          p.ID,
		Title:       p.Title,
		Content:     p.Content,
		Status:      p.Status,
		ScheduledAt: FormatJSONTime(p.ScheduledAt),
		CreatedAt:   FormatJSONTime(p.CreatedAt),
		UpdatedAt:   FormatJSONTime(p.UpdatedAt),
		OwnerID:     p.OwnerID,
	}
	if p.PublishedAt != nil {
		s := FormatJSONTime(*p.PublishedAt)
		out.PublishedAt = &s
	}
	if p.PublishBy != nil {
		s := FormatJSONTime(*p.PublishBy)
		out.PublishBy = &s
	}
	return out
}

// FormatJSONTime is a time as the service's JSON writes it: RFC 3339 in UTC,
// with as many fraction digits as it has.
func FormatJSONTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
