package e2e_test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// `posting serve` killed with SIGKILL while 32 clients create posts, whose
// creates share transactions, loses no post it answered 201 for: each is
// stored RESERVED with its CREATED event, on MariaDB, PostgreSQL and SQLite.
// On PostgreSQL the posts carry fewer transaction ids than there are posts:
// the creates were grouped.
func TestServeKilledAmidGroupedCreatesKeepsEveryAnsweredPost(t *testing.T) {
	t.Parallel()
	for _, d := range []database.Dialect{database.MySQL, database.PostgreSQL, database.SQLite} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			dbURL := databasetest.URL(t, d, "group")
			b := kafkatest.Start(t)
			serve := postingtest.StartFreshServe(t, "POSTING_DATABASE_URL="+dbURL, "POSTING_KAFKA_BROKERS="+b.Addr,
				"POSTING_API_WRITE_RATE=off")
			var (
				mu       sync.Mutex
				answered []int64
				clients  sync.WaitGroup
			)
			stop := make(chan struct{})
			for range 32 {
				clients.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						if id, ok := tryCreatePost(serve.HTTP, time.Now().Add(time.Hour)); ok {
							mu.Lock()
							answered = append(answered, id)
							mu.Unlock()
						}
					}
				})
			}
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(answered) >= 500
			}, 60*time.Second, 10*time.Millisecond, "500 creates answered")
			kill9(t, serve)
			close(stop)
			clients.Wait()

			db := databasetest.Open(t, dbURL)
			for _, id := range answered {
				var p reservation.Post
				require.NoError(t, db.Where("id = ?", id).Take(&p).Error, "post %d was answered 201", id)
				require.Equal(t, reservation.StatusReserved, p.Status)
				var events int64
				require.NoError(t, db.Model(&outbox.Message{}).Where("aggregate_id = ? AND event_type = ?", id, "POSTING_EVENT").Count(&events).Error)
				require.EqualValues(t, 1, events, "the CREATED event of post %d", id)
			}
			if d == database.PostgreSQL {
				var posts, txs int64
				require.NoError(t, db.Raw("SELECT COUNT(*), COUNT(DISTINCT xmin::text) FROM posts").Row().Scan(&posts, &txs))
				require.Less(t, txs, posts, "grouped creates share transactions")
				t.Logf("%d posts in %d transactions, %d answered", posts, txs, len(answered))
			}
		})
	}
}

// tryRetitle sends PATCH /api/v1/posts/{id} with title and reports whether
// it was answered 200.
func tryRetitle(addr string, id int64, title string) bool {
	req, err := http.NewRequest(http.MethodPatch, fmt.Sprintf("http://%s/api/v1/posts/%d", addr, id), strings.NewReader(fmt.Sprintf(`{"title":%q}`, title)))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// `posting serve` killed with SIGKILL while 32 clients edit posts, whose
// edits share transactions, loses no edit it answered 200 for: each client
// retitles its own post 1, 2, 3… one edit after the other, and the stored
// title is the last answered one, or the one in flight at the kill, with an
// UPDATED event for each. On PostgreSQL the posts' last edits carry fewer
// transaction ids than there are posts: the edits were grouped.
func TestServeKilledAmidGroupedEditsKeepsEveryAnsweredEdit(t *testing.T) {
	t.Parallel()
	for _, d := range []database.Dialect{database.MySQL, database.PostgreSQL, database.SQLite} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			dbURL := databasetest.URL(t, d, "groupedit")
			b := kafkatest.Start(t)
			serve := postingtest.StartFreshServe(t, "POSTING_DATABASE_URL="+dbURL, "POSTING_KAFKA_BROKERS="+b.Addr,
				"POSTING_API_WRITE_RATE=off")
			const clients = 32
			ids := make([]int64, clients)
			for i := range ids {
				id, ok := tryCreatePost(serve.HTTP, time.Now().Add(time.Hour))
				require.True(t, ok, "create post %d", i)
				ids[i] = id
			}
			var (
				answered [clients]atomic.Int64 // the last edit answered 200
				total    atomic.Int64
				wg       sync.WaitGroup
			)
			stop := make(chan struct{})
			for i := range clients {
				wg.Go(func() {
					for n := int64(1); ; n++ {
						select {
						case <-stop:
							return
						default:
						}
						if !tryRetitle(serve.HTTP, ids[i], fmt.Sprint(n)) {
							return // killed: the edit in flight is n
						}
						answered[i].Store(n)
						total.Add(1)
					}
				})
			}
			require.Eventually(t, func() bool { return total.Load() >= 500 }, 60*time.Second, 10*time.Millisecond, "500 edits answered")
			kill9(t, serve)
			close(stop)
			wg.Wait()

			db := databasetest.Open(t, dbURL)
			for i, id := range ids {
				var p reservation.Post
				require.NoError(t, db.Where("id = ?", id).Take(&p).Error)
				last := answered[i].Load()
				stored, err := strconv.ParseInt(p.Title, 10, 64)
				if last == 0 {
					require.Contains(t, []string{"failover", "1"}, p.Title, "post %d: no edit answered", id)
					continue
				}
				require.NoError(t, err, "post %d title %q", id, p.Title)
				require.True(t, stored == last || stored == last+1, "post %d: edit %d was answered 200, the stored title is %d", id, last, stored)
				var updated int64
				require.NoError(t, db.Model(&outbox.Message{}).Where("aggregate_id = ? AND event_type = ?", id, "POSTING_EVENT").Count(&updated).Error)
				require.EqualValues(t, stored+1, updated, "post %d: CREATED and one UPDATED per stored edit", id)
				require.EqualValues(t, stored+1, p.Version.Int64, "post %d: one version per edit", id)
			}
			if d == database.PostgreSQL {
				var txs int64
				require.NoError(t, db.Raw("SELECT COUNT(DISTINCT xmin::text) FROM posts WHERE id IN ?", ids).Row().Scan(&txs))
				require.Less(t, txs, int64(clients), "the posts' last edits share transactions")
				t.Logf("%d edits answered; the %d posts' last edits in %d transactions", total.Load(), clients, txs)
			}
		})
	}
}
