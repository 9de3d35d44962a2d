package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/cmd/posting/postingtest"
	"github.com/postingsvc/posting/internal/brokers/rabbitmq/rabbitmqtest"
	"github.com/postingsvc/posting/internal/operate/overdue"
	"github.com/postingsvc/posting/internal/publish/worker"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/storage/database/databasetest"
	"github.com/postingsvc/posting/internal/write/api"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// The fault test's settings and timeline. Times are offsets from the run's
// start S (the second after the posts are planned); every fault is done at
// its offset or, on a slow machine, as soon as the step before it is done,
// and the assertions use the instants the test recorded, never these
// offsets.
const (
	faultPosts = 60
	// faultGrace is POSTING_OVERDUE_AFTER: past it a post due and not
	// final is overdue.
	faultGrace = 5 * time.Second
	// faultLead is POSTING_RESERVATION_LEAD: a post is WORKING, its
	// reservation event on the queue and a PENDING publication in the
	// worker this long before its time.
	faultLead = 5 * time.Second
	// faultLate is the publishBy of the posts that have one: scheduledAt
	// plus this.
	faultLate = 3 * time.Second
	// faultCheckInterval is POSTING_OVERDUE_INTERVAL: the lease holder's
	// posting_posts_overdue is at most this (and one check's run) old.
	faultCheckInterval = time.Second
	// faultAdminToken is the serves' POSTING_ADMIN_TOKEN.
	faultAdminToken = "fault-admin-token-0123456789abcdef0123456789"

	firstDue        = 10 * time.Second
	dueSpan         = 70 * time.Second // the posts fall due from S+10s to S+80s
	killServe0At    = 12 * time.Second
	killServe1At    = 18 * time.Second
	killWorkerAt    = 24 * time.Second
	cutBrokerAt     = 30 * time.Second
	brokerCut       = 10 * time.Second
	stopWorkerAt    = 47 * time.Second
	foreignAt       = 52 * time.Second
	cancelStoppedAt = 60 * time.Second
	foreignUntil    = 62 * time.Second
	restartWorkerAt = 66 * time.Second
	// cancelBefore is how long before its time a post of the "before its
	// time" kind is cancelled: WORKING by then (the lead is longer), its
	// publication PENDING in the worker.
	cancelBefore = 3 * time.Second
)

// cancelKind says when the test cancels a post through the API.
type cancelKind int

const (
	keep          cancelKind = iota
	cancelEarly              // right after the creates: RESERVED
	cancelBeforeT            // cancelBefore its time: WORKING, a PENDING publication
	cancelStopped            // past its grace while no worker runs on the database: overdue
)

// plannedPost is a post of the run: what the API was asked, and what it
// answered.
type plannedPost struct {
	id     int64
	at     time.Time  // scheduledAt
	by     *time.Time // publishBy; nil: none (and no POSTING_PUBLISH_LATE_LIMIT)
	cancel cancelKind

	// Written by the cancelling goroutine before the run's end.
	cancelled bool      // the API answered 200 (or showed the post CANCELLED after a lost answer)
	answered  time.Time // when
	// firm: the cancel was answered when no worker on the database could
	// have a publisher call for the post in flight: before its time (the
	// worker calls a publisher only once the database's clock reached
	// scheduledAt), or while no worker ran on the database. design.md
	// documents that a cancel committing during the webhook call leaves
	// the post CANCELLED after the receiver was told, so only a firm
	// cancel proves that the receiver must never hear of the post.
	firm bool
}

// faultReceiver is the webhook of the worker on the real database (path /)
// and of the worker on the other database (/foreign): it counts calls and
// idempotency keys per post.
type faultReceiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   map[int64]int
	keys    map[int64]map[string]bool
	foreign map[int64]int
}

func newFaultReceiver(t *testing.T) *faultReceiver {
	r := &faultReceiver{calls: map[int64]int{}, keys: map[int64]map[string]bool{}, foreign: map[int64]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var p api.PostJSON
		if err := json.NewDecoder(req.Body).Decode(&p); err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if req.URL.Path == "/foreign" {
			r.foreign[p.ID]++
		} else {
			r.calls[p.ID]++
			if r.keys[p.ID] == nil {
				r.keys[p.ID] = map[string]bool{}
			}
			r.keys[p.ID][req.Header.Get("Idempotency-Key")] = true
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// snapshot returns copies of the calls per post, the distinct idempotency
// keys per post, and the calls the worker on the other database made.
func (r *faultReceiver) snapshot() (calls, keys, foreign map[int64]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys = map[int64]int{}
	for id, k := range r.keys {
		keys[id] = len(k)
	}
	return maps.Clone(r.calls), keys, maps.Clone(r.foreign)
}

// A fault test of the promise "no post left behind": two
// `serve` and a `worker` of the real binary on MariaDB (and PostgreSQL),
// RabbitMQ through a TCP proxy, 60 posts falling due over 70 s, some with a
// publishBy 3 s after their time, some cancelled through the API. Along the
// run each serve is killed with SIGKILL and restarted, the worker is killed
// and restarted, the broker is cut for 10 s, the worker is stopped for
// longer than the grace (POSTING_OVERDUE_AFTER, 5 s), and meanwhile a
// worker on another database (an explicit sqlite:// file) consumes the same
// queue for 10 s before the real worker returns.
//
// Every 500 ms, straight from the database, every post more than the grace
// past its time is PUBLISHED, CANCELLED, EXPIRED or listed by
// overdue.List; and the operator is told of it: a serve's
// GET /admin/posts/overdue lists every post more than the grace past its
// time and not final, and the lease holder's posting_posts_overdue counts
// at least every post more than the grace plus two check intervals past
// its time and not final (the gauge is as old as the last check). A sample
// whose serves cannot answer (one killed, the lease not yet taken over)
// checks the database only; enough samples must have checked each.
// At the end (a bounded wait), every post is final as the API left it: a
// cancelled one CANCELLED and, when cancelled before anything could publish
// it, never sent to the receiver; one whose publishBy passed while no
// worker ran on the database EXPIRED; an EXPIRED one never sent to the
// receiver nor published; every other one PUBLISHED, not before its time,
// claimed (its first call) not after its publishBy, its publication PUBLISHED, and the receiver
// called for it at least once, always with the same idempotency key (the
// webhook is at least once across a kill -9 of the worker, so calls are
// counted per post, not required to be one). The worker on the other
// database never calls its receiver, no event ends FAIL, and every process
// still running stops cleanly at the end.
func TestFaultsLeaveNoPostBehind(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("takes about two minutes")
	}
	amqpURL := rabbitmqtest.URL(t)
	for _, d := range []database.Dialect{database.MySQL, database.PostgreSQL} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			faultRun(t, amqpURL, databasetest.URL(t, d, "fault"))
		})
	}
}

// faultCluster holds the processes of one run.
type faultCluster struct {
	t         *testing.T
	common    []string // every process: database, broker, exchange, queue
	serveEnv  []string
	serveAddr [2]string
	serves    [2]*postingtest.Proc
	worker    *postingtest.Proc
	hook      string
	gen       atomic.Int32

	mu  sync.Mutex // guards ids: the sampler reads them
	ids [2]string  // the serves' POSTING_INSTANCE_ID
}

// serveIDs returns the serves' instance ids.
func (c *faultCluster) serveIDs() [2]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids
}

func (c *faultCluster) startServe(i int) {
	c.t.Helper()
	id := fmt.Sprintf("fault-serve-%d-%d", i, c.gen.Add(1)) // a new id, as hostname-pid gives
	c.mu.Lock()
	c.ids[i] = id
	c.mu.Unlock()
	env := append(slices.Clone(c.serveEnv), "POSTING_HTTP_ADDR="+c.serveAddr[i], "POSTING_DATA_DIR="+c.t.TempDir(),
		"POSTING_INSTANCE_ID="+id)
	c.serves[i] = postingtest.StartServe(c.t, env...)
}

func (c *faultCluster) startWorker() {
	c.t.Helper()
	c.worker = postingtest.StartFreshWorker(c.t, append(slices.Clone(c.common), "POSTING_PUBLISH_WEBHOOK_URL="+c.hook,
		fmt.Sprintf("POSTING_INSTANCE_ID=fault-worker-%d", c.gen.Add(1)))...)
}

// kill9 kills p with SIGKILL and waits for its exit.
func kill9(t *testing.T, p *postingtest.Proc) {
	t.Helper()
	require.NoError(t, p.Cmd.Process.Kill())
	<-p.Done
}

func faultRun(t *testing.T, amqpURL, dbURL string) {
	exchange, group := rabbitmqtest.Name("fault-events"), rabbitmqtest.Name("fault-worker")
	rabbitmqtest.DeleteAfter(t, amqpURL, exchange, group, group+".dead")
	proxy := rabbitmqtest.StartProxy(t, amqpURL)
	hook := newFaultReceiver(t)

	c := &faultCluster{t: t, hook: hook.srv.URL + "/", serveAddr: [2]string{postingtest.FreeAddr(t), postingtest.FreeAddr(t)}}
	c.common = []string{"POSTING_DATABASE_URL=" + dbURL, "POSTING_RABBITMQ_URL=" + proxy.URL,
		"POSTING_RABBITMQ_EXCHANGE=" + exchange, "POSTING_WORKER_GROUP=" + group}
	c.serveEnv = append(slices.Clone(c.common), "POSTING_SCHEDULER_SPEC=@every 1s",
		"POSTING_RESERVATION_LEAD="+faultLead.String(), "POSTING_RELAY_INTERVAL=100ms", "POSTING_API_WRITE_RATE=off",
		"POSTING_OVERDUE_AFTER="+faultGrace.String(), "POSTING_OVERDUE_INTERVAL="+faultCheckInterval.String(),
		"POSTING_ADMIN_TOKEN="+faultAdminToken,
		// A worker on another database eats the reservation events of the
		// posts due while it runs, and the re-announcements it sees as
		// well: at most one per grace per post over its 10 s, so 10 is
		// ample and a post is never given up on by the repair.
		"POSTING_OVERDUE_REANNOUNCE=10")
	c.startServe(0)
	c.startServe(1)
	c.startWorker()

	db, err := database.Open(dbURL, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	// The plan. Every other post or so has a publishBy (i%3 == 1 or
	// i%6 == 2: several of them fall due while no worker runs, even when a
	// slow machine shifts the faults by seconds, and some around the kill
	// -9 of the worker, whose claims made in time stand past the deadline).
	start := time.Now().Truncate(time.Second).Add(time.Second)
	plan := make([]*plannedPost, faultPosts)
	stoppedCancels := 0
	for i := range plan {
		off := firstDue + time.Duration(i)*dueSpan/faultPosts
		p := &plannedPost{at: start.Add(off).Truncate(time.Second)}
		if i%3 == 1 || i%6 == 2 {
			by := p.at.Add(faultLate)
			p.by = &by
		}
		switch {
		case i%10 == 3:
			p.cancel = cancelEarly
		case i%10 == 7:
			p.cancel = cancelBeforeT
		case p.by == nil && stoppedCancels < 2 && off > stopWorkerAt+time.Second && off < cancelStoppedAt-faultGrace-time.Second:
			p.cancel = cancelStopped
			stoppedCancels++
		}
		plan[i] = p
	}
	require.Equal(t, 2, stoppedCancels, "the plan cancels two posts while no worker runs")
	for i, p := range plan {
		p.id = createFaultPost(t, c.serveAddr[i%2], p.at, p.by)
	}
	byID := map[int64]*plannedPost{}
	for _, p := range plan {
		byID[p.id] = p
	}
	require.Less(t, time.Now(), start.Add(firstDue-2*time.Second), "the creates took too long for the plan")
	t.Logf("%d posts due from %s to %s", faultPosts, plan[0].at.Format(time.TimeOnly), plan[len(plan)-1].at.Format(time.TimeOnly))

	var mu sync.Mutex // guards the plan's cancel fields
	ctx, stopCancels := context.WithCancel(context.Background())
	cancel := func(p *plannedPost, firmUntil time.Time) {
		ok, at := cancelFaultPost(ctx, t, c.serveAddr[:], p.id)
		mu.Lock()
		defer mu.Unlock()
		p.cancelled, p.answered = ok, at
		p.firm = ok && at.Before(firmUntil)
	}
	for _, p := range plan {
		if p.cancel == cancelEarly {
			cancel(p, p.at.Add(-time.Second))
		}
	}
	var cancels sync.WaitGroup
	t.Cleanup(func() { stopCancels(); cancels.Wait() }) // a test that failed early
	for _, p := range plan {
		if p.cancel == cancelBeforeT {
			cancels.Go(func() {
				select {
				case <-time.After(time.Until(p.at.Add(-cancelBefore))):
					cancel(p, p.at.Add(-500*time.Millisecond))
				case <-ctx.Done():
				}
			})
		}
	}

	s := startSampler(t, db, c, hook)

	at := func(d time.Duration) { time.Sleep(time.Until(start.Add(d))) }
	step := func(format string, args ...any) {
		t.Logf("S+%s: %s", time.Since(start).Round(100*time.Millisecond), fmt.Sprintf(format, args...))
	}
	at(killServe0At)
	kill9(t, c.serves[0])
	lastServeKill := time.Now()
	step("serve 0 killed (SIGKILL)")
	c.startServe(0)
	step("serve 0 back")
	at(killServe1At)
	kill9(t, c.serves[1])
	lastServeKill = time.Now()
	step("serve 1 killed (SIGKILL)")
	c.startServe(1)
	step("serve 1 back")
	at(killWorkerAt)
	kill9(t, c.worker)
	step("worker killed (SIGKILL)")
	c.startWorker()
	step("worker back")
	at(cutBrokerAt)
	proxy.Cut()
	step("broker cut")
	time.Sleep(brokerCut)
	proxy.Restore(t)
	step("broker back")
	at(stopWorkerAt)
	c.worker.Terminate(t)
	stopped := time.Now()
	s.noWorker.Store(true)
	step("worker stopped (SIGTERM)")
	at(foreignAt)
	foreignDB := "sqlite://" + filepath.Join(t.TempDir(), "foreign.db")
	foreign := postingtest.StartFreshWorker(t, append(slices.Clone(c.common), "POSTING_DATABASE_URL="+foreignDB,
		"POSTING_PUBLISH_WEBHOOK_URL="+hook.srv.URL+"/foreign", "POSTING_INSTANCE_ID=fault-foreign-worker")...)
	step("worker on another database (%s) started on the same queue", foreignDB)
	at(cancelStoppedAt)
	for _, p := range plan {
		if p.cancel == cancelStopped {
			// No worker runs on the database: firm whenever answered
			// before the real worker starts again, just below.
			cancel(p, time.Now().Add(time.Hour))
		}
	}
	step("posts past their grace cancelled while no worker runs")
	at(foreignUntil)
	foreign.Terminate(t)
	step("worker on another database stopped")
	at(restartWorkerAt)
	restarting := time.Now()
	c.startWorker()
	s.noWorker.Store(false)
	step("worker back on the database, %s after it stopped", restarting.Sub(stopped).Round(100*time.Millisecond))
	cancels.Wait()

	// Everything healthy: every post becomes final. A claim held by a
	// killed serve's relay waits out the stale limit (2 min by default;
	// RabbitMQ's send bound keeps it above 1m52s), hence the bound.
	last := plan[len(plan)-1].at
	deadline := last.Add(75 * time.Second)
	if d := lastServeKill.Add(2*time.Minute + 20*time.Second); d.After(deadline) {
		deadline = d
	}
	waitAllFinal(t, db, deadline)
	// A post final by now may still have a PENDING publication (a
	// CANCELLED or EXPIRED event on its way to the worker).
	require.Eventually(t, func() bool {
		var n int64
		require.NoError(t, db.DB.Model(&worker.Publication{}).Where("status = ?", worker.PublicationPending).Count(&n).Error)
		return n == 0
	}, 60*time.Second, 250*time.Millisecond, "publications still PENDING after every post is final")
	step("every post final")
	requireNoOverdueTold(t, c)
	s.stopAndCheck(t)

	mu.Lock()
	defer mu.Unlock()
	requireFinalAsPlanned(t, db, hook, byID, stopped, restarting)

	for _, p := range c.serves {
		p.Terminate(t)
	}
	c.worker.Terminate(t)
}

// createFaultPost creates a post due at at (with publishBy by, if set)
// through the API at addr and returns its id.
func createFaultPost(t *testing.T, addr string, at time.Time, by *time.Time) int64 {
	t.Helper()
	body := map[string]string{"title": "fault", "content": "no post left behind", "scheduledAt": at.UTC().Format(time.RFC3339)}
	if by != nil {
		body["publishBy"] = by.UTC().Format(time.RFC3339)
	}
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	resp, err := http.Post("http://"+addr+"/api/v1/posts", "application/json", strings.NewReader(string(raw)))
	require.NoError(t, err)
	defer resp.Body.Close()
	var p api.PostJSON
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	return p.ID
}

// cancelFaultPost cancels post id through whichever serve of addrs answers
// (one may be down: killed and restarting), trying again for up to 30 s.
// It reports whether the post is CANCELLED by it and when that was
// answered; a 409 whose post turns out CANCELLED is an earlier attempt
// that committed but whose answer was lost (a serve killed meanwhile).
func cancelFaultPost(ctx context.Context, t *testing.T, addrs []string, id int64) (bool, time.Time) {
	client := http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		addr := addrs[i%len(addrs)]
		resp, err := client.Post(fmt.Sprintf("http://%s/api/v1/posts/%d/cancel", addr, id), "", nil)
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return true, time.Now()
		case http.StatusConflict:
			code, body := postingtest.HTTPGet(addr, fmt.Sprintf("/api/v1/posts/%d", id))
			var p api.PostJSON
			if code == http.StatusOK && json.Unmarshal([]byte(body), &p) == nil {
				switch reservation.Status(p.Status) {
				case reservation.StatusCancelled:
					return true, time.Now()
				case reservation.StatusPublished, reservation.StatusExpired:
					t.Logf("post %d not cancelled: it is %s", id, p.Status)
					return false, time.Now()
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if ctx.Err() == nil {
		t.Errorf("post %d: no serve answered its cancel within 30 s", id)
	}
	return false, time.Now()
}

// sampler checks the invariant every 500 ms until stopAndCheck.
type sampler struct {
	stop     chan struct{}
	done     chan struct{}
	noWorker atomic.Bool // no worker runs on the database

	mu         sync.Mutex
	samples    int
	violations []string
	errs       []string
	reasons    map[overdue.Reason]map[int64]bool // the posts listed with each reason
	maxTold    int                               // the highest posting_posts_overdue while no worker ran
	// The samples in which a serve's GET /admin/posts/overdue (listing)
	// and the lease holder's posting_posts_overdue (gauge) answered, and
	// those of them that had to tell of at least one post.
	listingSamples, listingNonEmpty int
	gaugeSamples, gaugeNonEmpty     int
}

func startSampler(t *testing.T, db *database.DB, c *faultCluster, hook *faultReceiver) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{}), reasons: map[overdue.Reason]map[int64]bool{}}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			s.sample(db, c, hook)
		}
	}()
	t.Cleanup(func() { s.halt() })
	return s
}

func (s *sampler) halt() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// sample takes one sample. What the operator is told is read first: the
// lease holder's posting_posts_overdue, then a serve's GET
// /admin/posts/overdue. overdue.List runs next, and the table is read last.
// A post only moves on, so one still not final at the table's read was not
// final at any earlier read either. Hence:
//   - overdue.List must list every post not final that was more than the
//     grace past its time at the listing's clock (sum.Now);
//   - the serve's listing, made at most readLag before sum.Now, every post
//     not final more than grace + readLag past its time at sum.Now;
//   - the gauge, computed by the holder's last check at most one interval
//     and one check's run (bounded by another interval) before it was read,
//     itself at most readLag before sum.Now, must count at least the posts
//     not final more than grace + 2 × interval + readLag past their time.
func (s *sampler) sample(db *database.DB, c *faultCluster, hook *faultReceiver) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gaugeAt := time.Now()
	gauge, holder, gaugeOK := holderGauge(ctx, db, c)
	listingAt := time.Now()
	told, listingOK := adminOverdue(ctx, c)
	listed, sum, err := overdue.List(ctx, db.DB, faultGrace, 10000)
	listedBy := time.Now() // sum.Now was read before this
	var posts []reservation.Post
	if err == nil {
		err = db.DB.WithContext(ctx).Select("id", "status", "scheduled_at", "publish_by").Order("id").Find(&posts).Error
	}
	calls, _, _ := hook.snapshot()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errs = append(s.errs, err.Error())
		return
	}
	s.samples++
	if s.noWorker.Load() && gaugeOK {
		s.maxTold = max(s.maxTold, gauge)
	}
	on := map[int64]bool{}
	for _, o := range listed {
		on[o.ID] = true
		if s.reasons[o.Reason] == nil {
			s.reasons[o.Reason] = map[int64]bool{}
		}
		s.reasons[o.Reason][o.ID] = true
		// Nothing in this run rejects an event or a publication (the
		// receiver answers 204, the broker's queue is bound), so a post
		// listed as stuck for good, waiting for an operator, is a fault
		// of the service.
		switch o.Reason {
		case overdue.ReasonEventFailed, overdue.ReasonPublicationFailed, overdue.ReasonPublicationSettled:
			s.violations = append(s.violations, fmt.Sprintf("sample %d: post %d %s listed %s (event %s, publication %q: %s)",
				s.samples, o.ID, o.Status, o.Reason, o.EventStatus, o.PublicationStatus, o.Detail))
		}
	}
	cutoff := sum.Now.Add(-faultGrace)
	listingCutoff := cutoff.Add(-listedBy.Sub(listingAt))
	gaugeCutoff := cutoff.Add(-2*faultCheckInterval - listedBy.Sub(gaugeAt))
	var untold, uncounted []string
	for _, p := range posts {
		open := !p.Status.Terminal()
		if open && p.ScheduledAt.Before(cutoff) && !on[p.ID] {
			s.violations = append(s.violations, fmt.Sprintf("sample %d (database clock %s): post %d %s, due %s (%s past), neither final nor listed overdue (%d listed)",
				s.samples, sum.Now.Format(time.RFC3339Nano), p.ID, p.Status, p.ScheduledAt.UTC().Format(time.RFC3339), sum.Now.Sub(p.ScheduledAt), len(listed)))
		}
		if open && p.ScheduledAt.Before(listingCutoff) && !told[p.ID] {
			untold = append(untold, fmt.Sprintf("%d %s (%s past)", p.ID, p.Status, sum.Now.Sub(p.ScheduledAt).Round(time.Millisecond)))
		}
		if open && p.ScheduledAt.Before(gaugeCutoff) {
			uncounted = append(uncounted, fmt.Sprintf("%d %s (%s past)", p.ID, p.Status, sum.Now.Sub(p.ScheduledAt).Round(time.Millisecond)))
		}
		// The receiver never hears of an expired post, at any moment.
		if p.Status == reservation.StatusExpired && calls[p.ID] > 0 {
			s.violations = append(s.violations, fmt.Sprintf("sample %d: post %d EXPIRED and sent to the receiver %d times", s.samples, p.ID, calls[p.ID]))
		}
	}
	if listingOK {
		s.listingSamples++
		if len(untold) > 0 {
			s.violations = append(s.violations, fmt.Sprintf("sample %d (database clock %s): GET /admin/posts/overdue (%d items) did not list posts due more than %s before and not final: %s",
				s.samples, sum.Now.Format(time.RFC3339Nano), len(told), sum.Now.Sub(listingCutoff).Round(time.Millisecond), strings.Join(untold, ", ")))
		}
		if len(told) > 0 || len(untold) > 0 {
			s.listingNonEmpty++
		}
	}
	if gaugeOK {
		s.gaugeSamples++
		if gauge < len(uncounted) {
			s.violations = append(s.violations, fmt.Sprintf("sample %d (database clock %s): the lease holder %s told posting_posts_overdue %d, but %d posts due more than %s before are not final: %s",
				s.samples, sum.Now.Format(time.RFC3339Nano), holder, gauge, len(uncounted), sum.Now.Sub(gaugeCutoff).Round(time.Millisecond), strings.Join(uncounted, ", ")))
		}
		if len(uncounted) > 0 {
			s.gaugeNonEmpty++
		}
	}
}

// stopAndCheck ends the sampling and requires every sample to have kept
// the invariant, enough samples to have checked what the serves told, and
// serve to have told of overdue posts while no worker ran.
func (s *sampler) stopAndCheck(t *testing.T) {
	t.Helper()
	s.halt()
	s.mu.Lock()
	defer s.mu.Unlock()
	var reasons []string
	for r, ids := range s.reasons {
		reasons = append(reasons, fmt.Sprintf("%s: %d posts", r, len(ids)))
	}
	slices.Sort(reasons)
	t.Logf("%d samples; reasons listed: %s; posting_posts_overdue up to %d while no worker ran; %d failed samples; "+
		"GET /admin/posts/overdue answered %d samples (%d had posts to list), the lease holder's gauge %d (%d had posts to count)",
		s.samples, strings.Join(reasons, ", "), s.maxTold, len(s.errs), s.listingSamples, s.listingNonEmpty, s.gaugeSamples, s.gaugeNonEmpty)
	require.Empty(t, s.violations, "samples that broke the invariant")
	// The database stays up: a sample that fails is a fault of the
	// listing, not of the run.
	require.Empty(t, s.errs, "samples that failed")
	require.Greater(t, s.samples, 20)
	// A serve is down for seconds at each kill, and the check's lease
	// waits out its TTL (10 s) when its holder is killed; the other
	// samples must have heard the serves.
	require.Greater(t, s.listingSamples, 20, "samples in which a serve answered GET /admin/posts/overdue")
	require.Greater(t, s.gaugeSamples, 20, "samples in which the lease holder exported posting_posts_overdue")
	require.Positive(t, s.listingNonEmpty, "no sample had a post for GET /admin/posts/overdue to list")
	require.Positive(t, s.gaugeNonEmpty, "no sample had a post for posting_posts_overdue to count")
	require.Greater(t, s.maxTold, 0, "serve never told of an overdue post while no worker ran")
}

// holderGauge reads posting_posts_overdue from the serve that holds the
// overdue check's lease: the one serve that exports it, or, when both do
// (one lost the lease and has not yet run a check since), the one the
// lease names. ok false when neither answers with it (a serve killed, or
// the lease of a killed holder not yet taken over).
func holderGauge(ctx context.Context, db *database.DB, c *faultCluster) (n int, holder string, ok bool) {
	ids := c.serveIDs()
	var got []int
	for i, addr := range c.serveAddr {
		if v, exported := overdueGauge(addr); exported {
			n, holder = v, ids[i]
			got = append(got, i)
		}
	}
	switch len(got) {
	case 0:
		return 0, "", false
	case 1:
		return n, holder, true
	}
	l, held, err := database.ReadLease(ctx, db.DB, overdue.LeaseName)
	if err != nil || !held {
		return 0, "", false
	}
	for _, i := range got {
		if ids[i] == l.Holder {
			v, exported := overdueGauge(c.serveAddr[i])
			return v, l.Holder, exported
		}
	}
	return 0, "", false
}

// adminOverdue returns the posts a serve lists at GET /admin/posts/overdue,
// from the first serve that answers; ok false when neither does.
func adminOverdue(ctx context.Context, c *faultCluster) (map[int64]bool, bool) {
	client := http.Client{Timeout: 5 * time.Second}
	for _, addr := range c.serveAddr {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet,
			"http://"+addr+"/admin/posts/overdue?limit="+strconv.Itoa(overdue.MaxListLimit), nil)
		if err != nil {
			return nil, false
		}
		req.Header.Set("Authorization", "Bearer "+faultAdminToken)
		resp, err := client.Do(req)
		if err != nil {
			continue
		}
		var l overdue.ListJSON
		err = json.NewDecoder(resp.Body).Decode(&l)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || l.Count != len(l.Items) {
			continue
		}
		out := make(map[int64]bool, len(l.Items))
		for _, p := range l.Items {
			out[p.PostID] = true
		}
		return out, true
	}
	return nil, false
}

// overdueGauge reads posting_posts_overdue from the serve at addr; ok false
// when it does not export it (not the check's leader) or does not answer.
func overdueGauge(addr string) (int, bool) {
	code, body := postingtest.HTTPGet(addr, "/metrics")
	if code != http.StatusOK {
		return 0, false
	}
	for line := range strings.SplitSeq(body, "\n") {
		// posting_posts_overdue{instance_id="..."} 3
		rest, ok := strings.CutPrefix(line, "posting_posts_overdue")
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		n, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		return int(n), err == nil
	}
	return 0, false
}

// requireNoOverdueTold waits until the serve that runs the overdue check
// exports posting_posts_overdue 0 (and no other exports more).
func requireNoOverdueTold(t *testing.T, c *faultCluster) {
	t.Helper()
	var seen []string
	require.Eventually(t, func() bool {
		exported, sum := 0, 0
		seen = seen[:0]
		for _, addr := range c.serveAddr {
			n, ok := overdueGauge(addr)
			seen = append(seen, fmt.Sprintf("%s: %d %v", addr, n, ok))
			if ok {
				exported++
				sum += n
			}
		}
		return exported > 0 && sum == 0
	}, 30*time.Second, 250*time.Millisecond, "posting_posts_overdue never came back to 0: %v", &seen)
}

// waitAllFinal waits until deadline for every post to be PUBLISHED,
// CANCELLED or EXPIRED, logging the way every 10 s, and fails with the
// overdue listing if one is not.
func waitAllFinal(t *testing.T, db *database.DB, deadline time.Time) {
	t.Helper()
	lastLog := time.Now()
	for {
		var open int64
		require.NoError(t, db.DB.Model(&reservation.Post{}).
			Where("status IN ?", []reservation.Status{reservation.StatusReserved, reservation.StatusWorking}).Count(&open).Error)
		if open == 0 {
			return
		}
		if time.Now().After(deadline) || time.Since(lastLog) > 10*time.Second {
			var st []struct {
				Status string
				N      int64
			}
			_ = db.DB.Model(&reservation.Post{}).Select("status, count(*) AS n").Group("status").Scan(&st).Error
			var ob []struct {
				Status string
				N      int64
			}
			_ = db.DB.Model(&outbox.Message{}).Select("status, count(*) AS n").Group("status").Scan(&ob).Error
			listed, _, _ := overdue.List(context.Background(), db.DB, faultGrace, 100)
			var why []string
			for _, o := range listed {
				why = append(why, fmt.Sprintf("%d %s %s (event %s, publication %q, re-announced %d)", o.ID, o.Status, o.Reason, o.EventStatus, o.PublicationStatus, o.Reannounced))
			}
			t.Logf("waiting: posts %v, outbox %v, overdue: %s", st, ob, strings.Join(why, "; "))
			lastLog = time.Now()
			if time.Now().After(deadline) {
				t.Fatalf("%d posts still not final at the deadline", open)
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// requireFinalAsPlanned checks every post's end against the plan, the
// publications and the receiver's calls, and reports every post that is
// not as it should be at once. stopped and restarting bound the time no
// worker ran on the database.
func requireFinalAsPlanned(t *testing.T, db *database.DB, hook *faultReceiver, plan map[int64]*plannedPost, stopped, restarting time.Time) {
	t.Helper()
	var posts []reservation.Post
	require.NoError(t, db.DB.Find(&posts).Error)
	require.Len(t, posts, len(plan))
	var pubs []worker.Publication
	require.NoError(t, db.DB.Find(&pubs).Error)
	pubOf := map[int64]worker.Publication{}
	for _, p := range pubs {
		pubOf[p.PostID] = p
	}
	calls, keys, foreign := hook.snapshot()

	var bad []string
	fail := func(p *reservation.Post, format string, args ...any) {
		bad = append(bad, fmt.Sprintf("post %d (%s, due %s, publishBy %v): %s", p.ID, p.Status,
			p.ScheduledAt.UTC().Format(time.TimeOnly), fmtTime(p.PublishBy), fmt.Sprintf(format, args...)))
	}
	count := map[reservation.Status]int{}
	repeated, reannounced, firmExpired, loose := 0, 0, 0, 0
	for i := range posts {
		p := &posts[i]
		want := plan[p.ID]
		require.NotNil(t, want, "post %d was not created by the test", p.ID)
		count[p.Status]++
		if calls[p.ID] > 1 {
			repeated++
		}
		if p.Reannounced > 0 {
			reannounced++
		}
		if want.cancelled && !want.firm {
			loose++
		}
		pub, hasPub := pubOf[p.ID]
		// A post whose whole window from its time to its publishBy lay
		// while no worker ran on the database could not be published.
		mustExpire := want.by != nil && !want.cancelled &&
			!want.at.Before(stopped.Add(time.Second)) && !want.by.After(restarting.Add(-time.Second))
		if mustExpire {
			firmExpired++
		}
		switch {
		case want.cancelled:
			if p.Status != reservation.StatusCancelled {
				fail(p, "cancelled through the API (answered %s), not CANCELLED", want.answered.Format(time.TimeOnly))
			}
			if want.firm && calls[p.ID] > 0 {
				fail(p, "cancelled before anything could publish it, yet sent to the receiver %d times", calls[p.ID])
			}
			if hasPub && pub.Status != worker.PublicationCancelled && want.firm {
				fail(p, "cancelled, its publication %s", pub.Status)
			}
		case p.Status == reservation.StatusCancelled:
			fail(p, "CANCELLED, but the test never cancelled it")
		case mustExpire && p.Status != reservation.StatusExpired:
			fail(p, "its time and publishBy passed while no worker ran (%s to %s), not EXPIRED",
				stopped.Format(time.TimeOnly), restarting.Format(time.TimeOnly))
		case p.Status == reservation.StatusExpired:
			if want.by == nil {
				fail(p, "EXPIRED without a publishBy")
			}
			if calls[p.ID] > 0 {
				fail(p, "EXPIRED, yet sent to the receiver %d times", calls[p.ID])
			}
			// The publication settles as the post's status says.
			if hasPub && pub.Status != "EXPIRED" {
				fail(p, "EXPIRED, its publication %s (%s)", pub.Status, deref(pub.LastError))
			}
		case p.Status == reservation.StatusPublished:
			if calls[p.ID] == 0 {
				fail(p, "PUBLISHED, but the receiver never heard of it")
			}
			if keys[p.ID] > 1 {
				fail(p, "sent to the receiver with %d idempotency keys", keys[p.ID])
			}
			if !hasPub || pub.Status != worker.PublicationPublished {
				fail(p, "PUBLISHED, its publication %v %s", hasPub, pub.Status)
			}
			if p.PublishedAt == nil || p.PublishedAt.Before(p.ScheduledAt) {
				fail(p, "published at %s, before its time", fmtTime(p.PublishedAt))
			}
			// Published by its deadline by the database's clock, unless
			// its publication began in time: a claim made before the
			// deadline stands past it (the receiver may have been told
			// already, by a call a kill or a stop cut short), and the
			// retry completes it with the same key; the claim's time
			// is checked below.
			if p.PublishBy != nil && p.PublishedAt != nil && p.PublishedAt.After(*p.PublishBy) && p.PublishClaimedAt == nil {
				fail(p, "published at %s, after its publishBy, never claimed", fmtTime(p.PublishedAt))
			}
			if p.PublishBy != nil && p.PublishClaimedAt != nil && p.PublishClaimedAt.After(*p.PublishBy) {
				fail(p, "claimed at %s, after its publishBy", fmtTime(p.PublishClaimedAt))
			}
		default:
			fail(p, "not final")
		}
	}
	for id := range calls {
		if plan[id] == nil {
			bad = append(bad, fmt.Sprintf("the receiver heard of post %d, which the test did not create", id))
		}
	}
	if len(foreign) > 0 {
		bad = append(bad, fmt.Sprintf("the worker on another database called its receiver: %v", foreign))
	}
	var failed int64
	require.NoError(t, db.DB.Model(&outbox.Message{}).Where("status = ?", outbox.StatusFail).Count(&failed).Error)
	if failed > 0 {
		bad = append(bad, fmt.Sprintf("%d events FAIL", failed))
	}
	t.Logf("final: %v; %d expired for want of a worker; %d published posts sent more than once (same key); %d posts re-announced; %d cancels answered too late to rule out a publisher call in flight",
		count, firmExpired, repeated, reannounced, loose)
	require.Positive(t, firmExpired, "the plan has posts whose publishBy passes while no worker runs")
	require.Empty(t, bad, "posts not as the API left them")
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "none"
	}
	return t.UTC().Format("15:04:05.000")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
