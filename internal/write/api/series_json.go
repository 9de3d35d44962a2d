package api

import "github.com/postingsvc/posting/internal/write/reservation"

// SeriesJSON is a series as the HTTP API shows it (the OpenAPI document's
// Series). start and the occurrences' occurrence are local date-times of
// timeZone without an offset; every other time is RFC 3339 in UTC.
type SeriesJSON struct {
	ID            int64                    `json:"id"`
	Title         string                   `json:"title"`
	Content       string                   `json:"content"`
	TimeZone      string                   `json:"timeZone"`
	Start         string                   `json:"start"`
	RRule         string                   `json:"rrule"`
	PublishWithin *string                  `json:"publishWithin"`
	Status        reservation.SeriesStatus `json:"status"`
	OwnerID       string                   `json:"ownerId"`
	CreatedAt     string                   `json:"createdAt"`
	UpdatedAt     string                   `json:"updatedAt"`
	// MaterializedUntil is the instant up to which occurrences have been
	// made into posts (GET /api/v1/posts?seriesId= lists them).
	MaterializedUntil string `json:"materializedUntil"`
	// NextOccurrences are the next occurrences of the rule from now, at
	// most reservation.NextOccurrencesShown; empty once the series ended or was
	// cancelled.
	NextOccurrences []OccurrenceJSON `json:"nextOccurrences"`
}

// OccurrenceJSON is one occurrence of a series: its local time and the
// instant it stands for.
type OccurrenceJSON struct {
	Occurrence  string  `json:"occurrence"`
	ScheduledAt string  `json:"scheduledAt"`
	PublishBy   *string `json:"publishBy"`
}

// NewSeriesJSON returns v as the API shows it.
func NewSeriesJSON(v *reservation.SeriesView) SeriesJSON {
	out := SeriesJSON{
		ID:                v.ID,
		Title:             v.Title,
		Content:           v.Content,
		TimeZone:          v.TimeZone,
		Start:             reservation.FormatLocalTime(v.StartLocal),
		RRule:             v.RRule,
		PublishWithin:     v.PublishWithin,
		Status:            v.Status,
		OwnerID:           v.OwnerID,
		CreatedAt:         reservation.FormatJSONTime(v.CreatedAt),
		UpdatedAt:         reservation.FormatJSONTime(v.UpdatedAt),
		MaterializedUntil: reservation.FormatJSONTime(v.MaterializedUntil),
		NextOccurrences:   make([]OccurrenceJSON, 0, len(v.Next)),
	}
	for _, o := range v.Next {
		oj := OccurrenceJSON{Occurrence: reservation.FormatLocalTime(o.Local), ScheduledAt: reservation.FormatJSONTime(o.At)}
		if by := v.PublishByOf(o.At); by != nil {
			s := reservation.FormatJSONTime(*by)
			oj.PublishBy = &s
		}
		out.NextOccurrences = append(out.NextOccurrences, oj)
	}
	return out
}
