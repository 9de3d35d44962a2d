package admin

import (
	"fmt"
	"net/http"

	"github.com/postingsvc/posting/internal/write/api"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// Limits of GET /admin/series.
const (
	// DefaultRecentSeries is the series GET /admin/series answers without ?limit=.
	DefaultRecentSeries = 20
	// MaxRecentSeries bounds ?limit= of GET /admin/series.
	MaxRecentSeries = 100
)

// seriesResponse is the answer of GET /admin/series.
type seriesResponse struct {
	Items []api.SeriesJSON `json:"items"`
}

// recentSeries answers the latest recurring series of every owner, newest
// first, as the API shows a series, with their next occurrences by the
// database's clock.
func (s *server) recentSeries(w http.ResponseWriter, r *http.Request) {
	limit, ok := limitQuery(w, r, DefaultRecentSeries, MaxRecentSeries)
	if !ok {
		return
	}
	now, ok := s.now(w, r)
	if !ok {
		return
	}
	var rows []reservation.Series
	if err := s.cfg.DB.WithContext(r.Context()).Order("id DESC").Limit(limit).Find(&rows).Error; err != nil {
		s.internal(w, r, fmt.Errorf("read recent series: %w", err))
		return
	}
	out := seriesResponse{Items: make([]api.SeriesJSON, 0, len(rows))}
	for i := range rows {
		out.Items = append(out.Items, api.NewSeriesJSON(reservation.NewSeriesView(&rows[i], now)))
	}
	writeJSON(w, http.StatusOK, out)
}
