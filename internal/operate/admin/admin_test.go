package admin_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/operate/admin"
	"github.com/postingsvc/posting/internal/platform/clocktest"
	"github.com/postingsvc/posting/internal/platform/logtest"
	"github.com/postingsvc/posting/internal/platform/response"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/storage/database/migrations"
	"github.com/postingsvc/posting/internal/write/reservation"
	"github.com/postingsvc/posting/internal/write/reservation/reservationtest"
)

var t0 = clocktest.T0

const token = "s3cret-admin-token-of-32-bytes-ok"

type fixture struct {
	db  *database.DB
	h   http.Handler
	now time.Time
}

func setup(t *testing.T, db *database.DB) *fixture {
	t.Helper()
	f := &fixture{db: db, now: t0.Add(time.Hour)}
	mux := routesMux(t, admin.Config{DB: db.DB, Token: token, Now: func() time.Time { return f.now }, PurgePause: -1,
		AuthFailures: -1}) // TestUnauthorized fails on purpose far more often than the bound allows
	f.h = mux
	return f
}

// do sends a request with the given Authorization header ("" for none) and
// decodes the JSON answer into a map.
func (f *fixture) do(t *testing.T, method, target, auth string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	var body map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	return rec, body
}

func (f *fixture) append(t *testing.T, post int64) outbox.Message {
	t.Helper()
	return reservationtest.Append(t, f.db.DB, post, t0)
}

func (f *fixture) set(t *testing.T, id int64, status outbox.Status) {
	t.Helper()
	values := map[string]any{"status": status}
	switch status {
	case outbox.StatusFail:
		values["retry_count"], values["last_error"] = 4, "rejected"
	case outbox.StatusSent:
		values["sent_at"] = t0.Add(time.Minute)
	}
	require.NoError(t, f.db.Model(&outbox.Message{}).Where("id = ?", id).Updates(values).Error)
}

func (f *fixture) status(t *testing.T, id int64) outbox.Status {
	t.Helper()
	return databasetest.Load[outbox.Message](t, f.db.DB, id).Status
}

// badParam is a request the admin API refuses with 400 naming field.
type badParam struct{ method, path, field string }

// requireBadParams sends each request and requires its 400 naming the field.
func (f *fixture) requireBadParams(t *testing.T, auth string, bad ...badParam) {
	t.Helper()
	for _, b := range bad {
		rec, body := f.do(t, b.method, b.path, auth)
		require.Equal(t, http.StatusBadRequest, rec.Code, b.path)
		require.Equal(t, b.field, body["field"], b.path)
	}
}

// routesMux serves the admin routes of cfg on one ServeMux.
func routesMux(t *testing.T, cfg admin.Config) *http.ServeMux {
	t.Helper()
	routes, err := admin.Routes(cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.Handle(pattern, h)
	}
	return mux
}

func id(m outbox.Message) string { return strconv.FormatInt(m.ID, 10) }

func TestNoTokenNoRoutes(t *testing.T) {
	t.Parallel()
	routes, err := admin.Routes(admin.Config{})
	require.NoError(t, err)
	require.Empty(t, routes)

	_, err = admin.Routes(admin.Config{Token: token})
	require.ErrorContains(t, err, "DB must be set")
}

// Without the token, with a wrong one or another scheme, every route
// answers 401 problem+json with WWW-Authenticate and changes nothing.
func TestUnauthorized(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		f := setup(t, db)
		m := f.append(t, 1)
		f.set(t, m.ID, outbox.StatusFail)
		for _, auth := range []string{"", "Bearer wrong", "Bearer " + token + "x", "Bearer", "Basic " + token, token} {
			for _, target := range []struct{ method, path string }{
				{"GET", "/admin/outbox/stats"},
				{"GET", "/admin/outbox?status=FAIL"},
				{"POST", "/admin/outbox/" + id(m) + "/requeue"},
				{"POST", "/admin/outbox/" + id(m) + "/discard"},
				{"POST", "/admin/outbox/requeue-failed"},
				{"POST", "/admin/outbox/purge?olderThan=1s"},
				{"GET", "/admin/publications?status=FAILED"},
				{"POST", "/admin/publications/" + id(m) + "/retry"},
				{"GET", "/admin/outbox/history"},
				{"GET", "/admin/posts"},
				{"GET", "/admin/posts/overdue"},
			} {
				rec, body := f.do(t, target.method, target.path, auth)
				require.Equal(t, http.StatusUnauthorized, rec.Code, "%s %s with %q", target.method, target.path, auth)
				require.Equal(t, response.ProblemContentType, rec.Header().Get("Content-Type"))
				require.Contains(t, rec.Header().Get("WWW-Authenticate"), `Bearer realm="posting-admin"`)
				require.Equal(t, "about:blank", body["type"])
				require.Equal(t, "Unauthorized", body["title"])
				require.EqualValues(t, 401, body["status"])
				require.NotEmpty(t, body["detail"])
			}
		}
		rec, _ := f.do(t, "GET", "/admin/outbox/stats", "Bearer wrong")
		require.Contains(t, rec.Header().Get("WWW-Authenticate"), `error="invalid_token"`)
		require.Equal(t, outbox.StatusFail, f.status(t, m.ID))
	})
}

func TestOperatorFlow(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		f := setup(t, db)
		auth := "bearer " + token // the scheme is case-insensitive
		failed := f.append(t, 1)
		held := f.append(t, 1)
		sent := f.append(t, 2)
		other := f.append(t, 3)
		f.set(t, failed.ID, outbox.StatusFail)
		f.set(t, sent.ID, outbox.StatusSent)
		f.set(t, other.ID, outbox.StatusFail)

		rec, body := f.do(t, "GET", "/admin/outbox/stats", auth)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		require.Equal(t, map[string]any{"PENDING": 1.0, "PROCESSING": 0.0, "SENT": 1.0, "RETRY": 0.0, "FAIL": 2.0}, body["counts"])
		require.EqualValues(t, 2, body["failed"])
		require.EqualValues(t, 1, body["blocked"])
		require.Equal(t, []any{map[string]any{"id": float64(failed.ID), "eventId": failed.EventID, "postId": 1.0, "blocked": 1.0}}, body["blocking"])
		oldest := body["oldestWaiting"].(map[string]any)
		require.EqualValues(t, held.ID, oldest["id"])
		require.EqualValues(t, 3600, oldest["ageSeconds"])

		rec, body = f.do(t, "GET", "/admin/outbox", auth) // status defaults to FAIL
		require.Equal(t, http.StatusOK, rec.Code)
		items := body["items"].([]any)
		require.Len(t, items, 2)
		first := items[0].(map[string]any)
		require.EqualValues(t, failed.ID, first["id"])
		require.Equal(t, failed.EventID, first["eventId"])
		require.Equal(t, "POSTING_EVENT", first["eventType"])
		require.EqualValues(t, 1, first["postId"])
		require.EqualValues(t, 4, first["retryCount"])
		require.Equal(t, "rejected", first["lastError"])
		require.Equal(t, "2026-12-01T12:00:00Z", first["created"])
		_, body = f.do(t, "GET", "/admin/outbox?status=sent&limit=1", auth)
		require.Len(t, body["items"], 1)

		rec, body = f.do(t, "POST", "/admin/outbox/"+id(failed)+"/requeue", auth)
		require.Equal(t, http.StatusOK, rec.Code, body)
		require.Equal(t, "PENDING", body["status"])
		require.EqualValues(t, 0, body["retryCount"])
		require.Equal(t, outbox.StatusPending, f.status(t, failed.ID))

		rec, body = f.do(t, "POST", "/admin/outbox/"+id(failed)+"/requeue", auth)
		require.Equal(t, http.StatusConflict, rec.Code)
		require.Equal(t, response.ProblemContentType, rec.Header().Get("Content-Type"))
		require.Equal(t, "id "+id(failed)+": status PENDING, only FAIL rows can be requeued", body["detail"])
		rec, body = f.do(t, "POST", "/admin/outbox/"+id(sent)+"/discard", auth)
		require.Equal(t, http.StatusConflict, rec.Code)
		require.Equal(t, "id "+id(sent)+": status SENT, only FAIL rows can be discarded", body["detail"])
		rec, body = f.do(t, "POST", "/admin/outbox/999999/requeue", auth)
		require.Equal(t, http.StatusNotFound, rec.Code)
		require.Equal(t, "id 999999: not found", body["detail"])
		rec, body = f.do(t, "POST", "/admin/outbox/abc/requeue", auth)
		require.Equal(t, http.StatusBadRequest, rec.Code)
		require.Equal(t, "id", body["field"])

		rec, body = f.do(t, "POST", "/admin/outbox/"+id(other)+"/discard", auth)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Equal(t, "FAIL", body["status"])
		require.NotNil(t, body["discardedAt"])
		rec, _ = f.do(t, "POST", "/admin/outbox/"+id(other)+"/requeue", auth)
		require.Equal(t, http.StatusConflict, rec.Code)

		f.set(t, held.ID, outbox.StatusFail)
		rec, body = f.do(t, "POST", "/admin/outbox/requeue-failed", auth)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Equal(t, map[string]any{"requeued": 1.0}, body)
		require.Equal(t, outbox.StatusPending, f.status(t, held.ID))
		require.Equal(t, outbox.StatusFail, f.status(t, other.ID), "a discarded row is not requeued")

		// Without olderThan: 168h, as the CLI and the cleaner; the row sent
		// 59 minutes ago stays.
		rec, body = f.do(t, "POST", "/admin/outbox/purge", auth)
		require.Equal(t, http.StatusOK, rec.Code, body)
		require.EqualValues(t, 0, body["deleted"])
		require.Equal(t, "2026-11-24T13:00:00Z", body["sentBefore"])
		require.Equal(t, outbox.StatusSent, f.status(t, sent.ID))

		rec, body = f.do(t, "POST", "/admin/outbox/purge?olderThan=30m", auth)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Equal(t, map[string]any{"deleted": 1.0, "remaining": 0.0, "complete": true,
			"sentBefore": "2026-12-01T12:30:00Z"}, body)
		var n int64
		require.NoError(t, db.Model(&outbox.Message{}).Where("id = ?", sent.ID).Count(&n).Error)
		require.Zero(t, n)

		f.requireBadParams(t, auth,
			badParam{"GET", "/admin/outbox?status=DONE", "status"},
			badParam{"GET", "/admin/outbox?limit=0", "limit"},
			badParam{"GET", "/admin/outbox?limit=1001", "limit"},
			badParam{"POST", "/admin/outbox/purge?olderThan=soon", "olderThan"},
			badParam{"POST", "/admin/outbox/purge?olderThan=-1h", "olderThan"},
		)
	})
}

// An HTTP purge stops after its budget, between two statements, and answers
// what it deleted and what remains, so the client gets its answer before the
// server's write timeout (a purge of 500k rows ran 134 s and answered
// nothing); repeated calls finish it. Only old SENT rows go, and each call
// is an audit line with its figures.
func TestPurgeAnswersWithinItsBudget(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		logs := &logtest.Buffer{}
		f := &fixture{db: db, now: t0.Add(time.Hour)}
		// A budget of 1ns ends after the first statement of every call.
		f.h = routesMux(t, admin.Config{DB: db.DB, Token: token, Now: func() time.Time { return f.now },
			PurgeBatchSize: 2, PurgePause: -1, PurgeBudget: time.Nanosecond,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		auth := "Bearer " + token
		for post := int64(1); post <= 7; post++ {
			f.set(t, f.append(t, post).ID, outbox.StatusSent) // sent at t0+1m
		}
		pending := f.append(t, 8)
		young := f.append(t, 9)
		f.set(t, young.ID, outbox.StatusSent)
		require.NoError(t, db.Model(&outbox.Message{}).Where("id = ?", young.ID).
			Update("sent_at", t0.Add(45*time.Minute)).Error)

		for i, want := range []map[string]any{
			{"deleted": 2.0, "remaining": 5.0, "complete": false},
			{"deleted": 2.0, "remaining": 3.0, "complete": false},
			{"deleted": 2.0, "remaining": 1.0, "complete": false},
			{"deleted": 1.0, "remaining": 0.0, "complete": true},
			{"deleted": 0.0, "remaining": 0.0, "complete": true},
		} {
			rec, body := f.do(t, "POST", "/admin/outbox/purge?olderThan=30m", auth)
			require.Equal(t, http.StatusOK, rec.Code, body)
			want["sentBefore"] = "2026-12-01T12:30:00Z"
			require.Equal(t, want, body, "call %d", i+1)
		}
		var left []int64
		require.NoError(t, db.Model(&outbox.Message{}).Order("id").Pluck("id", &left).Error)
		require.Equal(t, []int64{pending.ID, young.ID}, left, "the PENDING row and the young SENT row stay")
		require.Contains(t, logs.String(), "action=outbox.purge ids=[] source=192.0.2.1:1234 deleted=2 remaining=5 complete=false sent_before=2026-12-01T12:30:00.000Z")
		require.Contains(t, logs.String(), "action=outbox.purge ids=[] source=192.0.2.1:1234 deleted=1 remaining=0 complete=true")

		// With pauses, the pause that would end past the budget is not
		// taken: a budget of 50ms with 20ms pauses deletes at most 3 rows of
		// one per statement, where a whole purge would take the 7 and 120ms.
		for post := int64(10); post <= 16; post++ {
			f.set(t, f.append(t, post).ID, outbox.StatusSent)
		}
		f.h = routesMux(t, admin.Config{DB: db.DB, Token: token, Now: func() time.Time { return f.now },
			PurgeBatchSize: 1, PurgePause: 20 * time.Millisecond, PurgeBudget: 50 * time.Millisecond})
		rec, body := f.do(t, "POST", "/admin/outbox/purge?olderThan=30m", auth)
		require.Equal(t, http.StatusOK, rec.Code, body)
		require.Equal(t, false, body["complete"], body)
		deleted := int(body["deleted"].(float64))
		require.True(t, deleted >= 1 && deleted <= 3, body)
		require.EqualValues(t, 7-deleted, body["remaining"], body)
	})
}

// publication writes a post of status and its publication of pubStatus,
// refused once when FAILED, and returns the post id.
func (f *fixture) publication(t *testing.T, post reservation.Status, pub worker.PublicationStatus) int64 {
	t.Helper()
	p := &reservation.Post{Title: "t", Content: "c", Status: post, ScheduledAt: t0, CreatedAt: t0, UpdatedAt: t0}
	require.NoError(t, f.db.Create(p).Error)
	row := worker.Publication{PostID: p.ID, EventID: "0193a1b2-0000-7000-8000-0000000000" + strconv.FormatInt(p.ID+10, 10),
		ScheduledAt: t0, Status: pub, CreatedAt: t0, UpdatedAt: t0}
	if pub == worker.PublicationFailed {
		msg := "webhook refused: 422 Unprocessable Entity"
		row.Attempts, row.LastError = 1, &msg
	}
	require.NoError(t, f.db.Create(&row).Error)
	return p.ID
}

func (f *fixture) publicationStatus(t *testing.T, postID int64) worker.PublicationStatus {
	t.Helper()
	return databasetest.Load[worker.Publication](t, f.db.DB, postID).Status
}

func TestPublications(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		f := setup(t, db)
		auth := "Bearer " + token
		refused := f.publication(t, reservation.StatusWorking, worker.PublicationFailed)
		cancelled := f.publication(t, reservation.StatusCancelled, worker.PublicationFailed)
		pending := f.publication(t, reservation.StatusWorking, worker.PublicationPending)
		post := func(n int64) string { return strconv.FormatInt(n, 10) }

		rec, body := f.do(t, "GET", "/admin/publications", auth) // status defaults to FAILED
		require.Equal(t, http.StatusOK, rec.Code, body)
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		items := body["items"].([]any)
		require.Len(t, items, 2)
		first := items[0].(map[string]any)
		require.EqualValues(t, refused, first["postId"])
		require.Equal(t, "FAILED", first["status"])
		require.Equal(t, "WORKING", first["postStatus"])
		require.EqualValues(t, 1, first["attempts"])
		require.Equal(t, "webhook refused: 422 Unprocessable Entity", first["lastError"])
		require.Equal(t, "2026-12-01T12:00:00Z", first["scheduledAt"])
		require.EqualValues(t, cancelled, items[1].(map[string]any)["postId"])

		_, body = f.do(t, "GET", "/admin/publications?status=failed&limit=1&after="+post(refused), auth)
		require.Len(t, body["items"], 1)
		require.EqualValues(t, cancelled, body["items"].([]any)[0].(map[string]any)["postId"])
		_, body = f.do(t, "GET", "/admin/publications?status=PENDING", auth)
		require.Len(t, body["items"], 1)
		_, body = f.do(t, "GET", "/admin/publications?status=PUBLISHED", auth)
		require.Equal(t, []any{}, body["items"])

		rec, body = f.do(t, "POST", "/admin/publications/"+post(refused)+"/retry", auth)
		require.Equal(t, http.StatusOK, rec.Code, body)
		require.Equal(t, "PENDING", body["status"])
		require.EqualValues(t, 0, body["attempts"])
		require.Nil(t, body["lastError"])
		require.Equal(t, worker.PublicationPending, f.publicationStatus(t, refused))

		for _, c := range []struct {
			post   string
			code   int
			detail string
		}{
			{post(refused), http.StatusConflict, "post " + post(refused) + ": publication is PENDING, only FAILED ones can be retried"},
			{post(cancelled), http.StatusConflict, "post " + post(cancelled) + ": post is CANCELLED, only a WORKING post is published"},
			{post(pending), http.StatusConflict, "post " + post(pending) + ": publication is PENDING, only FAILED ones can be retried"},
			{"999999", http.StatusNotFound, "post 999999: not found"},
		} {
			rec, body = f.do(t, "POST", "/admin/publications/"+c.post+"/retry", auth)
			require.Equal(t, c.code, rec.Code, c.post)
			require.Equal(t, response.ProblemContentType, rec.Header().Get("Content-Type"))
			require.Equal(t, c.detail, body["detail"])
		}
		require.Equal(t, worker.PublicationFailed, f.publicationStatus(t, cancelled))

		f.requireBadParams(t, auth,
			badParam{"GET", "/admin/publications?status=FAIL", "status"},
			badParam{"GET", "/admin/publications?limit=0", "limit"},
			badParam{"GET", "/admin/publications?limit=1001", "limit"},
			badParam{"GET", "/admin/publications?after=x", "after"},
			badParam{"POST", "/admin/publications/abc/retry", "id"},
			badParam{"POST", "/admin/publications/0/retry", "id"},
		)
	})
}

// Without Config.Now the routes use the database's clock: requeue's
// next_attempt_at and purge's cutoff meet times the relays wrote. MariaDB's
// clock is moved an hour ahead for the one connection of the pool.
func TestDatabaseClock(t *testing.T) {
	t.Parallel()
	db := databasetest.Open(t, databasetest.MySQLURL(t, "posting_admin"))
	sqlDB, err := db.DB.DB()
	require.NoError(t, err)
	_, err = migrations.Apply(context.Background(), db, nil) // the migration lock wants a second connection
	require.NoError(t, err)
	sqlDB.SetMaxOpenConns(1)
	sqlDB.SetMaxIdleConns(1)
	require.NoError(t, db.Exec("SET @@timestamp = UNIX_TIMESTAMP(NOW(6)) + 3600").Error)
	dbNow, err := database.Now(context.Background(), db.DB)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Hour), dbNow, 5*time.Minute, "the session clock is an hour ahead")

	mux := routesMux(t, admin.Config{DB: db.DB, Token: token, PurgePause: -1})
	f := &fixture{db: db, h: mux}
	auth := "Bearer " + token

	failed := f.append(t, 1)
	f.set(t, failed.ID, outbox.StatusFail)
	rec, body := f.do(t, "POST", "/admin/outbox/"+id(failed)+"/requeue", auth)
	require.Equal(t, http.StatusOK, rec.Code, body)
	var m outbox.Message
	require.NoError(t, db.First(&m, failed.ID).Error)
	require.WithinDuration(t, dbNow, m.NextAttemptAt, 5*time.Minute, "next_attempt_at from the database's clock")

	// Sent 30 minutes ago by this host's clock, 90 by the database's.
	sent := f.append(t, 2)
	require.NoError(t, db.Model(&outbox.Message{}).Where("id = ?", sent.ID).Updates(map[string]any{
		"status": outbox.StatusSent, "created": database.Normalize(time.Now().Add(-time.Hour)),
		"sent_at": database.Normalize(time.Now().Add(-30 * time.Minute))}).Error)
	rec, body = f.do(t, "POST", "/admin/outbox/purge?olderThan=1h", auth)
	require.Equal(t, http.StatusOK, rec.Code, body)
	require.EqualValues(t, 1, body["deleted"])
}

// Every change over HTTP is one audit line with the action, the ids and the
// client's address; a refused request logs only its refusal.
func TestAuditLines(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	logs := &logtest.Buffer{}
	mux := routesMux(t, admin.Config{DB: db.DB, Token: token, PurgePause: -1,
		Now: func() time.Time { return t0.Add(time.Hour) }, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	f := &fixture{db: db, h: mux}
	m := f.append(t, 1)
	f.set(t, m.ID, outbox.StatusFail)

	send := func(method, target, auth string) int {
		req := httptest.NewRequest(method, target, nil)
		req.RemoteAddr = "192.0.2.7:41234"
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec.Code
	}
	require.Equal(t, http.StatusUnauthorized, send(http.MethodPost, "/admin/outbox/"+id(m)+"/requeue", "Bearer wrong"))
	require.NotContains(t, logs.String(), "action=outbox.requeue", "a refused request changes nothing")
	require.Contains(t, logs.String(), `msg=audit component=admin action=auth.refused source=192.0.2.7 route="POST /admin/outbox/{id}/requeue" outcome=invalid`)

	require.Equal(t, http.StatusOK, send(http.MethodPost, "/admin/outbox/"+id(m)+"/requeue", "Bearer "+token))
	require.Contains(t, logs.String(), "msg=audit component=admin action=outbox.requeue ids=["+id(m)+"] source=192.0.2.7:41234 event_id="+m.EventID)
	require.Equal(t, http.StatusOK, send(http.MethodPost, "/admin/outbox/purge?olderThan=1h", "Bearer "+token))
	require.Contains(t, logs.String(), "msg=audit component=admin action=outbox.purge ids=[] source=192.0.2.7:41234 deleted=0")
	require.Equal(t, http.StatusOK, send(http.MethodPost, "/admin/outbox/requeue-failed", "Bearer "+token))
	require.Contains(t, logs.String(), "msg=audit component=admin action=outbox.requeue_failed ids=[] source=192.0.2.7:41234 requeued=0")
	require.NotContains(t, logs.String(), token)
}
