package admin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/admin"
	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/outbox"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

const token = "s3cret-admin-token"

type fixture struct {
	db  *database.DB
	h   http.Handler
	now time.Time
}

func setup(t *testing.T, db *database.DB) *fixture {
	t.Helper()
	f := &fixture{db: db, now: t0.Add(time.Hour)}
	routes, err := admin.Routes(admin.Config{DB: db.DB, Token: token, Now: func() time.Time { return f.now }, PurgePause: -1})
	require.NoError(t, err)
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.Handle(pattern, h)
	}
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
	m, err := outbox.Append(f.db.DB, outbox.Event{Type: outbox.PostingEvent, PostID: post, OccurredAt: t0,
		Fields: map[string]any{"action": "CREATED"}})
	require.NoError(t, err)
	return *m
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
	var m outbox.Message
	require.NoError(t, f.db.First(&m, id).Error)
	return m.Status
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
			} {
				rec, body := f.do(t, target.method, target.path, auth)
				require.Equal(t, http.StatusUnauthorized, rec.Code, "%s %s with %q", target.method, target.path, auth)
				require.Equal(t, admin.ProblemContentType, rec.Header().Get("Content-Type"))
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
		require.Equal(t, admin.ProblemContentType, rec.Header().Get("Content-Type"))
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

		rec, body = f.do(t, "POST", "/admin/outbox/purge?olderThan=30m", auth)
		require.Equal(t, http.StatusOK, rec.Code)
		require.EqualValues(t, 1, body["deleted"])
		require.Equal(t, "2026-12-01T12:30:00Z", body["sentBefore"])
		var n int64
		require.NoError(t, db.Model(&outbox.Message{}).Where("id = ?", sent.ID).Count(&n).Error)
		require.Zero(t, n)

		for _, bad := range []struct{ method, path, field string }{
			{"GET", "/admin/outbox?status=DONE", "status"},
			{"GET", "/admin/outbox?limit=0", "limit"},
			{"GET", "/admin/outbox?limit=1001", "limit"},
			{"POST", "/admin/outbox/purge", "olderThan"},
			{"POST", "/admin/outbox/purge?olderThan=-1h", "olderThan"},
		} {
			rec, body = f.do(t, bad.method, bad.path, auth)
			require.Equal(t, http.StatusBadRequest, rec.Code, bad.path)
			require.Equal(t, bad.field, body["field"], bad.path)
		}
	})
}
