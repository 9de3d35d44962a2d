package overdue

import (
	"time"

	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// Limits of a listing (posting posts overdue --limit, GET
// /admin/posts/overdue?limit=).
const (
	// DefaultListLimit is the posts a listing shows without a limit.
	DefaultListLimit = 100
	// MaxListLimit bounds a listing's limit.
	MaxListLimit = 1000
)

// ListJSON is a listing of overdue posts as GET /admin/posts/overdue and
// `posting posts overdue --json` answer it (the OpenAPI document's
// OverduePosts): the summary of all overdue posts and the listed ones.
type ListJSON struct {
	// Count is the number of overdue posts, listed or not.
	Count int `json:"count"`
	// OldestSeconds is how long past its scheduledAt the oldest one is; 0
	// when none is.
	OldestSeconds float64 `json:"oldestSeconds"`
	// GraceSeconds is the grace the listing used (POSTING_OVERDUE_AFTER).
	GraceSeconds float64 `json:"graceSeconds"`
	// Items are the listed posts, longest overdue first.
	Items []PostJSON `json:"items"`
}

// PostJSON is one overdue post and why it is stuck. Times are RFC 3339 in
// UTC; what the tables do not hold is null.
type PostJSON struct {
	PostID         int64              `json:"postId"`
	OwnerID        string             `json:"ownerId"`
	Status         reservation.Status `json:"status"`
	ScheduledAt    string             `json:"scheduledAt"`
	PublishBy      *string            `json:"publishBy"`
	OverdueSeconds float64            `json:"overdueSeconds"`
	Reason         Reason             `json:"reason"`
	// Detail is the last error of the event or the publication: text from
	// a broker or a webhook receiver, as it came.
	Detail              *string        `json:"detail"`
	Reannounced         int            `json:"reannounced"`
	EventStatus         *outbox.Status `json:"eventStatus"`
	PublicationStatus   *string        `json:"publicationStatus"`
	PublicationAttempts int            `json:"publicationAttempts"`
}

// NewListJSON returns what List answered, listed with grace, as JSON.
func NewListJSON(posts []Post, sum Summary, grace time.Duration) ListJSON {
	out := ListJSON{Count: sum.Count, OldestSeconds: sum.Oldest.Seconds(), GraceSeconds: grace.Seconds(),
		Items: make([]PostJSON, 0, len(posts))}
	for _, p := range posts {
		j := PostJSON{PostID: p.ID, OwnerID: p.OwnerID, Status: p.Status,
			ScheduledAt: reservation.FormatJSONTime(p.ScheduledAt), OverdueSeconds: p.Overdue.Seconds(),
			Reason: p.Reason, Reannounced: p.Reannounced, PublicationAttempts: p.PublicationAttempts}
		if p.PublishBy != nil {
			s := reservation.FormatJSONTime(*p.PublishBy)
			j.PublishBy = &s
		}
		if p.Detail != "" {
			j.Detail = &p.Detail
		}
		if p.EventStatus != "" {
			j.EventStatus = &p.EventStatus
		}
		if p.PublicationStatus != "" {
			j.PublicationStatus = &p.PublicationStatus
		}
		out.Items = append(out.Items, j)
	}
	return out
}
