package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/api"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// A series created over HTTP in a zone with DST: serve makes its three
// occurrences (five seconds apart) into posts at once, the scheduler and the
// relay announce them, and the worker publishes each at its instant (the
// zone's wall time read by Go's rules), never before, once, on each
// database.
func TestWorkerPublishesSeriesOccurrencesAtTheirInstants(t *testing.T) {
	t.Parallel()
	for _, d := range databasetest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			seriesEndToEnd(t, databasetest.URL(t, d, "e2eseries"))
		})
	}
}

func seriesEndToEnd(t *testing.T, dbURL string) {
	b := kafkatest.Start(t, kafkatest.WithDataDir(t.TempDir()))
	srv, hookCalls := countingWebhook(t)
	logs := &logtest.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve and worker output:\n%s", logs.String())
		}
	})
	httpAddr := postingtest.FreeAddr(t)
	common := []string{"--database-url", dbURL, "--kafka-brokers", b.Addr, "--data-dir", t.TempDir()}
	run(t, logs, append([]string{"serve", "--http-addr", httpAddr, "--instance-id", "e2e-series",
		"--scheduler-spec", "@every 1s", "--reservation-lead", "3s", "--relay-interval", "100ms"}, common...)...)
	require.Eventually(t, func() bool {
		code, _ := postingtest.HTTPGet(httpAddr, "/readyz")
		return code == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond, "serve never became ready")
	run(t, logs, append([]string{"worker", "--instance-id", "e2e-series-worker", "--worker-http-addr", "",
		"--publish-webhook-url", srv.URL}, common...)...)

	// Three wall times in one minute of New York's clock, 10 s ahead.
	loc, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	first := time.Now().Add(10 * time.Second).Truncate(time.Second).In(loc)
	if first.Second() > 45 {
		first = first.Truncate(time.Minute).Add(time.Minute)
	}
	day := time.Date(first.Year(), first.Month(), first.Day(), 0, 0, 0, 0, loc)
	rule := fmt.Sprintf("FREQ=DAILY;BYHOUR=%d;BYMINUTE=%d;BYSECOND=%d,%d,%d;COUNT=3",
		first.Hour(), first.Minute(), first.Second(), first.Second()+5, first.Second()+10)
	body := fmt.Sprintf(`{"title":"s","content":"c","timeZone":"America/New_York","start":%q,"rrule":%q}`,
		day.Format(reservation.LocalTimeLayout), rule)
	resp, err := http.Post("http://"+httpAddr+"/api/v1/series", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(raw))
	var s api.SeriesJSON
	require.NoError(t, json.Unmarshal(raw, &s))

	db := requirePublishedOnce(t, dbURL, 3, time.Until(first.Add(40*time.Second)), hookCalls)
	var posts []reservation.Post
	require.NoError(t, db.DB.Where("series_id = ?", s.ID).Order("scheduled_at").Find(&posts).Error)
	require.Len(t, posts, 3)
	for i, p := range posts {
		wall := first.Add(time.Duration(5*i) * time.Second)
		want := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), wall.Second(), 0, loc)
		require.True(t, p.ScheduledAt.Equal(want), "occurrence %d at %s, want %s", i, p.ScheduledAt, want.UTC())
		require.Equal(t, wall.Format(reservation.LocalTimeLayout), reservation.FormatLocalTime(*p.Occurrence))
		require.Equal(t, reservation.StatusPublished, p.Status)
		lag := p.PublishedAt.Sub(p.ScheduledAt)
		require.GreaterOrEqual(t, lag, time.Duration(0), "published before its instant")
		require.Less(t, lag, 10*time.Second, "published %s late", lag)
	}
	var n int64
	require.NoError(t, db.DB.Model(&reservation.Post{}).Where("series_id IS NULL").Count(&n).Error)
	require.Zero(t, n)
}
