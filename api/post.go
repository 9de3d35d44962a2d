package api

import (
	"time"

	"github.com/postingsvc/posting/reservation"
)

// PostJSON is a post as the API shows it and the worker's webhook sends it.
// Times are RFC 3339 in UTC; PublishedAt is null until the post is published.
type PostJSON struct {
	ID          int64              `json:"id"`
	Title       string             `json:"title"`
	Content     string             `json:"content"`
	Status      reservation.Status `json:"status"`
	ScheduledAt string             `json:"scheduledAt"`
	CreatedAt   string             `json:"createdAt"`
	UpdatedAt   string             `json:"updatedAt"`
	PublishedAt *string            `json:"publishedAt"`
	// OwnerID is the JWT subject that created the post; "" when it was
	// created without authentication.
	OwnerID string `json:"ownerId"`
}

// NewPostJSON returns p as the API shows it.
func NewPostJSON(p *reservation.Post) PostJSON {
	out := PostJSON{
		ID:          p.ID,
		Title:       p.Title,
		Content:     p.Content,
		Status:      p.Status,
		ScheduledAt: formatJSONTime(p.ScheduledAt),
		CreatedAt:   formatJSONTime(p.CreatedAt),
		UpdatedAt:   formatJSONTime(p.UpdatedAt),
		OwnerID:     p.OwnerID,
	}
	if p.PublishedAt != nil {
		s := formatJSONTime(*p.PublishedAt)
		out.PublishedAt = &s
	}
	return out
}

func formatJSONTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
