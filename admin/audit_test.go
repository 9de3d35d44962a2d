package admin_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/admin"
	"github.com/postingsvc/posting/database/databasetest"
	"github.com/postingsvc/posting/internal/logtest"
	"github.com/postingsvc/posting/outbox"
)

// Every change over HTTP is one audit line with the action, the ids and the
// client's address; a refused request logs only its refusal.
func TestAuditLines(t *testing.T) {
	t.Parallel()
	db := databasetest.NewSQLite(t)
	logs := &logtest.Buffer{}
	routes, err := admin.Routes(admin.Config{DB: db.DB, Token: token, PurgePause: -1,
		Now: func() time.Time { return t0.Add(time.Hour) }, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.Handle(pattern, h)
	}
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
