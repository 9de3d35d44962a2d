// Package webhook is the contract of the call the worker makes when it
// publishes a post to POSTING_PUBLISH_WEBHOOK_URL: the body (Body, described
// by the JSON Schema in schema.json), and its Standard Webhooks signature.
package webhook

import (
	_ "embed"
	"errors"

	"github.com/postingsvc/posting/internal/write/reservation"
)

// Body is what a webhook call carries: the post as it was published. It is
// a type of its own, not the HTTP API's post, so that a change to the API
// never silently changes what receivers get; schema.json describes it and a
// test keeps the two equal.
type Body struct {
	// ID is the post's id.
	ID int64 `json:"id"`
	// Title and Content are the post's.
	Title   string `json:"title"`
	Content string `json:"content"`
	// Status is always PUBLISHED.
	Status reservation.Status `json:"status"`
	// OwnerID is the JWT subject that created the post; "" without
	// authentication.
	OwnerID string `json:"ownerId"`
	// The times are RFC 3339 in UTC, with as many fraction digits as they
	// have.
	ScheduledAt string `json:"scheduledAt"`
	CreatedAt   string `json:"createdAt"`
	UpdatedAt   string `json:"updatedAt"`
	PublishedAt string `json:"publishedAt"`
}

// NewBody returns the body announcing p, which must be PUBLISHED with its
// publishedAt set (as the worker hands it to its publisher).
func NewBody(p *reservation.Post) (Body, error) {
	if p.Status != reservation.StatusPublished || p.PublishedAt == nil {
		return Body{}, errors.New("the post is not published")
	}
	return Body{
		ID:          p.ID,
		Title:       p.Title,
		Content:     p.Content,
		Status:      p.Status,
		OwnerID:     p.OwnerID,
		ScheduledAt: reservation.FormatJSONTime(p.ScheduledAt),
		CreatedAt:   reservation.FormatJSONTime(p.CreatedAt),
		UpdatedAt:   reservation.FormatJSONTime(p.UpdatedAt),
		PublishedAt: reservation.FormatJSONTime(*p.PublishedAt),
	}, nil
}

//go:embed schema.json
var schema []byte

// Schema returns a copy of the JSON Schema (draft 2020-12) of Body, which is
// also the OpenAPI document's components.schemas.PublishedPost.
func Schema() []byte { return append([]byte(nil), schema...) }
