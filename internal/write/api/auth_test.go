package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/brokers/kafka"
	"github.com/postingsvc/posting/internal/brokers/kafka/kafkatest"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/send/relay"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/api"
	"github.com/postingsvc/posting/internal/write/auth"
	"github.com/postingsvc/posting/internal/write/auth/authtest"
	"github.com/postingsvc/posting/internal/write/reservation"
)

var testSecret = []byte("test-secret-test-secret-test-sec")

const (
	testIssuer   = "https://idp.example"
	testAudience = "posting"
)

// verifier returns a Verifier of tokens signed with testSecret (and, with
// a JWKS endpoint, with its keys) on the API tests' clock.
func verifier(t *testing.T, secret []byte, jwksURL string) *auth.Verifier {
	t.Helper()
	v, err := auth.New(auth.Config{Secret: secret, JWKSURL: jwksURL, Issuer: testIssuer, Audience: testAudience,
		Now: func() time.Time { return testNow }, JWKSUnknownKIDWait: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(v.Close)
	return v
}

// claimsFor are valid claims for sub on the API tests' clock.
func claimsFor(sub string, scopes ...string) jwt.MapClaims {
	c := jwt.MapClaims{"sub": sub, "iss": testIssuer, "aud": testAudience,
		"iat": testNow.Unix(), "exp": testNow.Add(time.Hour).Unix()}
	if len(scopes) > 0 {
		c["scope"] = strings.Join(scopes, " ")
	}
	return c
}

func signHS(t *testing.T, key []byte, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(key)
	require.NoError(t, err)
	return s
}

func tokenFor(t *testing.T, sub string, scopes ...string) string {
	t.Helper()
	return signHS(t, testSecret, claimsFor(sub, scopes...))
}

// doAs sends a request with "Authorization: Bearer token" (none when token
// is "").
func (e *apiEnv) doAs(t *testing.T, token, method, path, body string) (*http.Response, []byte) {
	t.Helper()
	h := http.Header{}
	if body != "" {
		h.Set("Content-Type", "application/json")
	}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return e.doHeaders(t, method, path, body, h)
}

const newPostBody = `{"title":"t","content":"c","scheduledAt":"2030-01-03T00:00:00Z"}`

// createAs creates a post as token's subject and returns its JSON.
func (e *apiEnv) createAs(t *testing.T, token string) map[string]any {
	t.Helper()
	resp, body := e.doAs(t, token, http.MethodPost, "/api/v1/posts", newPostBody)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
	return decodeObject(t, body)
}

// listIDs lists posts as token's subject (query added to the path) and
// returns their ids.
func (e *apiEnv) listIDs(t *testing.T, token, query string) []string {
	t.Helper()
	resp, body := e.doAs(t, token, http.MethodGet, "/api/v1/posts"+query, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var page struct{ Items []map[string]any }
	require.NoError(t, json.Unmarshal(body, &page))
	ids := []string{}
	for _, p := range page.Items {
		ids = append(ids, idOf(t, p))
	}
	return ids
}

// Every refusal of the issue (missing, malformed, bad signature, alg none,
// HS/RS confusion, expired, nbf in the future, wrong iss, wrong aud) on
// every route of /api/v1: 401 problem+json with the RFC 6750 challenge, a
// detail that does not repeat the token, nothing written, and the token in
// no log line.
func TestAuthRefusalsWriteNothing(t *testing.T) {
	t.Parallel()
	jwks := authtest.NewJWKS(t)
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		hs := apiSetup(t, db, func(c *api.Config) { c.Auth = verifier(t, testSecret, "") })
		rs := apiSetup(t, db, func(c *api.Config) { c.Auth = verifier(t, nil, jwks.URL) })
		existing := idOf(t, hs.createAs(t, tokenFor(t, "alice")))
		// The JWKS API accepts its provider's tokens: the refusals below are
		// about the token, not about the set-up.
		resp, body := rs.doAs(t, jwks.Sign(t, claimsFor("alice")), http.MethodGet, "/api/v1/posts/"+existing, "")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		before := loadPost(t, db.DB, existing)
		posts0, rows0 := counts(t, db.DB)

		none, err := jwt.NewWithClaims(jwt.SigningMethodNone, claimsFor("alice")).SignedString(jwt.UnsafeAllowNoneSignatureType)
		require.NoError(t, err)
		bad := func(k string, v any) jwt.MapClaims { c := claimsFor("alice"); c[k] = v; return c }
		for name, c := range map[string]struct {
			env       *apiEnv
			token     string
			challenge string
			detail    string
		}{
			"missing":           {hs, "", `Bearer`, "Authorization: Bearer"},
			"malformed":         {hs, "abc.def", `Bearer error="invalid_token"`, "not a well-formed JWT"},
			"bad signature":     {hs, signHS(t, []byte("another-secret-another-secret-00"), claimsFor("alice")), `Bearer error="invalid_token"`, "signature does not verify"},
			"alg none":          {hs, none, `Bearer error="invalid_token"`, "alg is not accepted"},
			"HS/RS confusion":   {rs, signHS(t, jwks.PublicKeyPEM(t), claimsFor("alice")), `Bearer error="invalid_token"`, "alg is not accepted"},
			"expired":           {hs, signHS(t, testSecret, bad("exp", testNow.Add(-time.Hour).Unix())), `Bearer error="invalid_token"`, "expired (exp)"},
			"nbf in the future": {hs, signHS(t, testSecret, bad("nbf", testNow.Add(time.Hour).Unix())), `Bearer error="invalid_token"`, "not valid yet (nbf)"},
			"wrong iss":         {hs, signHS(t, testSecret, bad("iss", "https://other.example")), `Bearer error="invalid_token"`, "issuer (iss)"},
			"wrong aud":         {hs, signHS(t, testSecret, bad("aud", "someone-else")), `Bearer error="invalid_token"`, "audience (aud)"},
		} {
			for _, req := range []struct{ method, path, body string }{
				{http.MethodPost, "/api/v1/posts", newPostBody},
				{http.MethodPatch, "/api/v1/posts/" + existing, `{"title":"changed"}`},
				{http.MethodPost, "/api/v1/posts/" + existing + "/cancel", ""},
				{http.MethodGet, "/api/v1/posts/" + existing, ""},
				{http.MethodGet, "/api/v1/posts", ""},
			} {
				resp, body := c.env.doAs(t, c.token, req.method, req.path, req.body)
				p := requireProblem(t, resp, body, http.StatusUnauthorized)
				require.Equal(t, c.challenge, resp.Header.Get("WWW-Authenticate"), "%s: %s %s", name, req.method, req.path)
				require.Contains(t, p.Detail, c.detail, name)
				if c.token != "" {
					require.NotContains(t, string(body), c.token, name)
					require.NotContains(t, hs.logs.String()+rs.logs.String(), c.token, name)
				}
			}
		}
		posts, rows := counts(t, db.DB)
		require.Equal(t, posts0, posts, "no post written")
		require.Equal(t, rows0, rows, "no outbox row written")
		after := loadPost(t, db.DB, existing)
		require.Equal(t, before.Version, after.Version)
		require.Equal(t, before.Title, after.Title)
		require.Equal(t, reservation.StatusReserved, after.Status)
	})
}

// alice and bob see, list, change and cancel only their own posts; the
// other's post answers 404 and stays as it was; an admin-scope token sees
// both, filters by ownerId and changes either.
func TestAuthOwnersSeeOnlyTheirPosts(t *testing.T) {
	eachAPIWithAuth(t, func(t *testing.T, e *apiEnv) {
		alice, bob, admin := tokenFor(t, "alice"), tokenFor(t, "bob"), tokenFor(t, "root", "posts:read", auth.AdminScope)
		a1, a2 := e.createAs(t, alice), e.createAs(t, alice)
		b1 := e.createAs(t, bob)
		require.Equal(t, "alice", a1["ownerId"])
		require.Equal(t, "bob", b1["ownerId"])
		aliceIDs, bobID := []string{idOf(t, a1), idOf(t, a2)}, idOf(t, b1)
		stored := loadPost(t, e.db.DB, bobID)
		require.Equal(t, "bob", stored.OwnerID)
		_, rows0 := counts(t, e.db.DB)

		for _, req := range []struct{ method, path, body string }{
			{http.MethodGet, "/api/v1/posts/" + bobID, ""},
			{http.MethodPatch, "/api/v1/posts/" + bobID, `{"title":"mine now"}`},
			{http.MethodPost, "/api/v1/posts/" + bobID + "/cancel", ""},
		} {
			resp, body := e.doAs(t, alice, req.method, req.path, req.body)
			p := requireProblem(t, resp, body, http.StatusNotFound)
			require.Equal(t, "no post has id "+bobID, p.Detail, "the same answer as for an id that does not exist")
		}
		after := loadPost(t, e.db.DB, bobID)
		require.Equal(t, stored.Version, after.Version)
		require.Equal(t, "t", after.Title)
		require.Equal(t, reservation.StatusReserved, after.Status)
		_, rows := counts(t, e.db.DB)
		require.Equal(t, rows0, rows, "no event for a refused change")

		require.Equal(t, aliceIDs, e.listIDs(t, alice, ""))
		require.Equal(t, aliceIDs, e.listIDs(t, alice, "?status=RESERVED"))
		require.Equal(t, aliceIDs[:1], e.listIDs(t, alice, "?limit=1"))
		require.Equal(t, []string{bobID}, e.listIDs(t, bob, ""))
		require.Equal(t, aliceIDs, e.listIDs(t, alice, "?ownerId=alice"))
		resp, body := e.doAs(t, alice, http.MethodGet, "/api/v1/posts?ownerId=bob", "")
		p := requireProblem(t, resp, body, http.StatusForbidden)
		require.Equal(t, "ownerId", p.Field)

		// The owner's own change goes through.
		resp, body = e.doAs(t, bob, http.MethodPatch, "/api/v1/posts/"+bobID, `{"title":"bob's"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Equal(t, "bob", decodeObject(t, body)["ownerId"])

		// The admin sees every post and filters by owner.
		require.Equal(t, append(append([]string{}, aliceIDs...), bobID), e.listIDs(t, admin, ""))
		require.Equal(t, aliceIDs, e.listIDs(t, admin, "?ownerId=alice"))
		require.Equal(t, []string{bobID}, e.listIDs(t, admin, "?ownerId=bob&status=RESERVED"))
		require.Empty(t, e.listIDs(t, admin, "?ownerId=carol"))
		resp, body = e.doAs(t, admin, http.MethodGet, "/api/v1/posts/"+aliceIDs[0], "")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		resp, body = e.doAs(t, admin, http.MethodPost, "/api/v1/posts/"+bobID+"/cancel", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		cancelled := decodeObject(t, body)
		require.Equal(t, "CANCELLED", cancelled["status"])
		require.Equal(t, "bob", cancelled["ownerId"], "an admin's change keeps the owner")
		// A post the admin creates is the admin's.
		require.Equal(t, "root", e.createAs(t, admin)["ownerId"])
	})
}

// Writes beyond the limit answer 429 problem+json with Retry-After and
// write nothing; another caller and reads are not held back; once the
// window has passed the caller can write again.
func TestAuthWriteLimit(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		e := apiSetup(t, db, func(c *api.Config) {
			c.Auth = verifier(t, testSecret, "")
			c.WriteLimit = api.WriteLimit{Requests: 3, Window: time.Second}
		})
		alice, bob := tokenFor(t, "alice"), tokenFor(t, "bob")
		id := idOf(t, e.createAs(t, alice))
		resp, body := e.doAs(t, alice, http.MethodPatch, "/api/v1/posts/"+id, `{"title":"x"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		e.createAs(t, alice)
		posts0, rows0 := counts(t, db.DB)

		limited := 0
		for range 3 {
			resp, body = e.doAs(t, alice, http.MethodPost, "/api/v1/posts", newPostBody)
			if resp.StatusCode == http.StatusTooManyRequests {
				limited++
				requireProblem(t, resp, body, http.StatusTooManyRequests)
				require.Equal(t, "1", resp.Header.Get("Retry-After"))
			} else {
				// The sliding window may have moved on meanwhile.
				require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
			}
		}
		require.Positive(t, limited, "3 writes allowed per second, 6 sent")
		posts, rows := counts(t, db.DB)
		require.Equal(t, posts0+int64(3-limited), posts, "a 429 writes nothing")
		require.Equal(t, rows0+int64(3-limited), rows)

		resp, body = e.doAs(t, alice, http.MethodGet, "/api/v1/posts", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, "reads are not limited: %s", body)
		e.createAs(t, bob) // another caller has a budget of its own

		// Recovers: poll with a deadline until alice may write again.
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, body = e.doAs(t, alice, http.MethodPost, "/api/v1/posts", newPostBody)
			if resp.StatusCode == http.StatusCreated {
				break
			}
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(body))
			require.True(t, time.Now().Before(deadline), "still limited after 10s")
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// Without authentication the limit is per client IP.
func TestWriteLimitWithoutAuthByIP(t *testing.T) {
	t.Parallel()
	e := apiSetup(t, databasetest.NewSQLite(t), func(c *api.Config) {
		c.WriteLimit = api.WriteLimit{Requests: 1, Window: time.Hour}
	})
	e.createAs(t, "")
	resp, body := e.doAs(t, "", http.MethodPost, "/api/v1/posts", newPostBody)
	requireProblem(t, resp, body, http.StatusTooManyRequests)
	require.Equal(t, "3600", resp.Header.Get("Retry-After"))
	posts, _ := counts(t, e.db.DB)
	require.EqualValues(t, 1, posts)
}

// The owner reaches the Kafka message: the CREATED and CANCELLED
// POSTING_EVENTs and the POSTING_RESERVATION_EVENT of alice's posts,
// relayed to the in-process broker, carry "ownerId":"alice".
func TestAuthOwnerReachesKafka(t *testing.T) {
	t.Parallel()
	databasetest.Each(t, func(t *testing.T, db *database.DB) {
		t.Parallel()
		broker := kafkatest.Start(t)
		svc, err := reservation.NewService(db.DB, reservation.ServiceConfig{})
		require.NoError(t, err)
		v, err := auth.New(auth.Config{Secret: testSecret}) // on the real clock
		require.NoError(t, err)
		t.Cleanup(v.Close)
		h, err := api.NewHandler(api.Config{Posts: svc, Auth: v,
			Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		e := &apiEnv{db: db, svc: svc, srv: srv}
		// Tokens on the real clock: the relay and the scheduler use it.
		tok := signHS(t, testSecret, jwt.MapClaims{"sub": "alice", "iss": testIssuer, "aud": testAudience,
			"exp": time.Now().Add(time.Hour).Unix()})
		later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		soon := time.Now().Add(2 * time.Minute).UTC().Format(time.RFC3339)
		resp, body := e.doAs(t, tok, http.MethodPost, "/api/v1/posts", `{"title":"a","content":"c","scheduledAt":"`+later+`"}`)
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		cancelled := idOf(t, decodeObject(t, body))
		resp, body = e.doAs(t, tok, http.MethodPost, "/api/v1/posts/"+cancelled+"/cancel", "")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		resp, body = e.doAs(t, tok, http.MethodPost, "/api/v1/posts", `{"title":"b","content":"c","scheduledAt":"`+soon+`"}`)
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		due := idOf(t, decodeObject(t, body))
		sched, err := reservation.NewScheduler(db.DB, reservation.DefaultSchedulerConfig())
		require.NoError(t, err)
		res, err := sched.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, res.Marked)

		producer, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: []string{broker.Addr}, Topic: broker.Topic}, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		t.Cleanup(func() { _ = producer.Close() })
		rel, err := relay.New(outbox.NewStore(db), producer, relay.Config{InstanceID: "auth-test-" + string(db.Dialect),
			Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		// One event per post is in flight at a time: a few polls send all 4.
		for i := 0; i < 20; i++ {
			if _, err := rel.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			if relaytestSent(t, db) == 4 {
				break
			}
		}
		_, err = rel.Flush(context.Background())
		require.NoError(t, err)

		records := broker.Records(t, 4, 20*time.Second)
		require.Len(t, records, 4)
		perPost := map[string][]string{}
		for _, r := range records {
			var v map[string]any
			require.NoError(t, json.Unmarshal(r.Value, &v))
			require.Equal(t, "alice", v["ownerId"], string(r.Value))
			require.Equal(t, r.Headers["event-id"], v["eventId"])
			kind := r.Headers["event-type"]
			if a, ok := v["action"].(string); ok {
				kind += ":" + a
			}
			perPost[r.Key] = append(perPost[r.Key], kind)
		}
		require.Equal(t, map[string][]string{
			cancelled: {"POSTING_EVENT:CREATED", "POSTING_EVENT:CANCELLED"},
			due:       {"POSTING_EVENT:CREATED", "POSTING_RESERVATION_EVENT"},
		}, perPost)
	})
}

// relaytestSent counts the outbox rows that are SENT.
func relaytestSent(t *testing.T, db *database.DB) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.DB.Model(&outbox.Message{}).Where("status = ?", outbox.StatusSent).Count(&n).Error)
	return n
}

// A sub that differs from alice's only by trailing spaces is another
// caller, but MySQL's PAD SPACE collations (utf8mb4_bin included) compare
// "alice " equal to "alice": such a token must not reach alice's posts on
// any dialect. The verifier refuses it, so no post can be owned by it
// either.
func TestSubWithTrailingSpaceIsNotAlice(t *testing.T) {
	eachAPIWithAuth(t, func(t *testing.T, e *apiEnv) {
		id := idOf(t, e.createAs(t, tokenFor(t, "alice")))
		posts0, rows0 := counts(t, e.db.DB)
		spaced := tokenFor(t, "alice ")
		for _, r := range []struct{ method, path, body string }{
			{http.MethodGet, "/api/v1/posts/" + id, ""},
			{http.MethodGet, "/api/v1/posts", ""},
			{http.MethodPatch, "/api/v1/posts/" + id, `{"title":"taken"}`},
			{http.MethodPost, "/api/v1/posts/" + id + "/cancel", ""},
			{http.MethodPost, "/api/v1/posts", newPostBody},
		} {
			resp, body := e.doAs(t, spaced, r.method, r.path, r.body)
			requireProblem(t, resp, body, http.StatusUnauthorized)
			require.Equal(t, `Bearer error="invalid_token"`, resp.Header.Get("WWW-Authenticate"))
		}
		posts, rows := counts(t, e.db.DB)
		require.Equal(t, posts0, posts)
		require.Equal(t, rows0, rows)
		post := loadPost(t, e.db.DB, id)
		require.Equal(t, "t", post.Title)
		require.EqualValues(t, 1, post.Version.Int64)
	})
}
