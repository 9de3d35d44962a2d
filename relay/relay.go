package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/postingsvc/posting/config"
	"github.com/postingsvc/posting/internal/backoff"
	"github.com/postingsvc/posting/internal/startstop"
	"github.com/postingsvc/posting/outbox"
)

// Config configures a Relay. Zero fields take the defaults of the contract
// (DefaultConfig); MaxRetries is a pointer because zero retries is a setting
// of its own.
type Config struct {
	// InstanceID is written into claims and logs. Required; at most
	// MaxInstanceIDLen bytes. A claim's owner is InstanceID and a token of
	// this relay's run (see Owner), so that neither a restart nor a second
	// process given the same id takes another run's claims for its own.
	InstanceID string
	// Interval is the pause between polls. Default 5s; at least 10ms. A poll
	// whose batch came back full is followed at once by another.
	Interval time.Duration
	// BatchSize is the number of rows claimed per poll while there is no
	// backlog, and the least a poll counts as full. Default 100; 1..5000.
	BatchSize int
	// MaxBatchSize bounds the batch while polls come back full: each full
	// claim doubles the next one up to it, and polls that find less shrink
	// it back to BatchSize (see batchSizer). At or below BatchSize the batch
	// stays BatchSize. Default DefaultMaxBatchSize; 1..5000.
	MaxBatchSize int
	// MaxRetries is the number of retries after the first attempt: the
	// (1+MaxRetries)th failed attempt makes a row FAIL. Default (nil)
	// DefaultMaxRetries; 0..100. Retries(0) is zero retries.
	MaxRetries *int
	// StaleAfter is how long a claim may stay PROCESSING before another instance
	// recovers it. Default 2m; at least 1s and more than 2*Interval, and New
	// refuses one that does not exceed the sender's send bound (see
	// SendBounder) plus WriteTimeout by a quarter (a *StaleLimitError): a
	// healthy slow send would look dead and be sent again.
	StaleAfter time.Duration
	// WriteTimeout bounds the write of a batch's send results, which goes on
	// even when the relay is being stopped. Default 30s.
	WriteTimeout time.Duration
	// RetryBase is the delay before the first retry of a rejected row; each
	// further retry doubles it, with jitter, up to RetryMax. Default 1s.
	RetryBase time.Duration
	// RetryMax caps the retry delay. Default 5m; at least RetryBase.
	RetryMax time.Duration
	// OutageBackoffMax caps the pause between polls while the broker cannot be
	// reached; the pause starts at Interval and doubles. Default 30s.
	OutageBackoffMax time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives the loop's logs. Default slog.Default().
	Logger *slog.Logger
	// TracerProvider makes the spans of a poll that claimed rows: "relay
	// poll" with its "outbox claim" and "outbox send", the send linked to
	// each row's trace context. Default: the no-op provider.
	TracerProvider trace.TracerProvider
	// Observe, if set, is called with the result of every poll, and of every
	// write of deferred acknowledgements outside a poll (for metrics).
	Observe func(Result, time.Duration, error)
}

// MaxInstanceIDLen bounds Config.InstanceID: with the run token (see
// Relay.Owner) the claim owner fits the outbox's claimed_by column (255).
const MaxInstanceIDLen = 200

// DefaultStaleAfter is the default of Config.StaleAfter.
const DefaultStaleAfter = 2 * time.Minute

// DefaultMaxRetries is the default of Config.MaxRetries.
const DefaultMaxRetries = 3

// DefaultConfig returns a Config with every field but InstanceID and Observe
// at its default: the one place the defaults are written. A caller that
// takes values from elsewhere (a command line) starts from it, so that a
// zero it was given is refused by Validate rather than replaced.
func DefaultConfig() Config {
	return Config{
		Interval:         5 * time.Second,
		BatchSize:        100,
		MaxBatchSize:     DefaultMaxBatchSize,
		MaxRetries:       Retries(DefaultMaxRetries),
		StaleAfter:       DefaultStaleAfter,
		WriteTimeout:     30 * time.Second,
		RetryBase:        time.Second,
		RetryMax:         5 * time.Minute,
		OutageBackoffMax: 30 * time.Second,
		Now:              time.Now,
		Logger:           slog.Default(),
		TracerProvider:   noop.NewTracerProvider(),
	}
}

// Retries returns n for Config.MaxRetries.
func Retries(n int) *int { return &n }

func (c *Config) setDefaults() {
	// An outage's backoff starts at the interval: with an interval longer
	// than the default cap, the cap is the interval (polls no less often
	// than usual), not a refusal of a setting the operator cannot set.
	if c.OutageBackoffMax == 0 && c.Interval > DefaultConfig().OutageBackoffMax {
		c.OutageBackoffMax = c.Interval
	}
	config.FillZero(c, DefaultConfig())
}

// Validate reports the first setting out of its limits, as a *config.Error
// naming the field.
func (c Config) Validate() error {
	const f = "relay.Config."
	switch {
	case c.InstanceID == "":
		return config.Invalid(f+"InstanceID", c.InstanceID, "required")
	case len(c.InstanceID) > MaxInstanceIDLen:
		return config.Invalid(f+"InstanceID", c.InstanceID, "longer than %d bytes", MaxInstanceIDLen)
	case !utf8.ValidString(c.InstanceID) || strings.ContainsRune(c.InstanceID, 0):
		return config.Invalid(f+"InstanceID", c.InstanceID, "must be UTF-8 text without NUL (claimed_by is a text column)")
	case c.Interval < 10*time.Millisecond:
		return config.Invalid(f+"Interval", c.Interval, "below 10ms")
	case c.BatchSize < 1 || c.BatchSize > 5000:
		return config.Invalid(f+"BatchSize", c.BatchSize, "want 1..5000")
	case c.MaxBatchSize < 1 || c.MaxBatchSize > 5000:
		return config.Invalid(f+"MaxBatchSize", c.MaxBatchSize, "want 1..5000")
	case c.MaxRetries != nil && (*c.MaxRetries < 0 || *c.MaxRetries > 100):
		return config.Invalid(f+"MaxRetries", *c.MaxRetries, "want 0..100")
	case c.StaleAfter < time.Second || c.StaleAfter <= 2*c.Interval:
		return config.Invalid(f+"StaleAfter", c.StaleAfter, "must be at least 1s and more than twice the interval (%s)", c.Interval)
	case c.WriteTimeout <= 0:
		return config.Invalid(f+"WriteTimeout", c.WriteTimeout, "must be positive")
	}
	// In the fields' order, so the setting named first is the first out.
	if err := backoff.CheckRetry(f, c.RetryBase, c.RetryMax); err != nil {
		return err
	}
	if c.OutageBackoffMax < c.Interval {
		return config.Invalid(f+"OutageBackoffMax", c.OutageBackoffMax, "below the interval %s", c.Interval)
	}
	return nil
}

// Result counts what one poll did.
type Result struct {
	// Recovered stale claims put back to RETRY, and RecoveredFailed ones that
	// had no attempts left and became FAIL.
	Recovered, RecoveredFailed int
	// Claimed rows this poll.
	Claimed int
	// Sent rows the broker acknowledged, counted when their SENT is written:
	// a full batch's acknowledgements are written by the next poll (see
	// Deferred), so they count in that poll's Sent.
	Sent int
	// Deferred rows the broker acknowledged this poll whose SENT write was
	// left to the next poll's claim transaction: the batch was full, so the
	// next poll follows at once, and one commit per batch is saved (on MySQL
	// only, see outbox.Store.DefersAcksToNextClaim). Stop (and Flush) write
	// whatever is left.
	Deferred int
	// Retried rows the broker rejected, due again later.
	Retried int
	// Failed rows rejected for the last time, now FAIL.
	Failed int
	// Released rows handed back unchanged because the broker was unreachable.
	Released int
	// Held rows whose send ended without an answer (UnansweredError): kept
	// PROCESSING until their request is torn down, then released.
	Held int
	// Lost rows a claim without an answer had taken, found under this
	// relay's owner and released (counted in Released too).
	Lost int
	// Fenced result writes refused because the claim had been recovered by
	// another instance meanwhile.
	Fenced int
	// Unavailable is set when the broker could not be reached.
	Unavailable bool
}

// Relay moves outbox rows to a Sender. Any number of relays, in any number
// of processes, may run on one database.
type Relay struct {
	startstop.BaseStartStop

	cfg   Config
	store *outbox.Store
	send  Sender
	batch *batchSizer
	// owner is written into this relay's claims: InstanceID#run token.
	owner string

	// afterClaim, if set, runs between claim and send (tests simulate a crash there).
	afterClaim func()
	// claimAnswer, if set, sees what each claim returned and may change it
	// (tests lose the answer of a committed claim there).
	claimAnswer func([]outbox.Message, error) ([]outbox.Message, error)

	// pollMu serializes polls and flushes, which share acked.
	pollMu sync.Mutex
	// acked are rows the broker acknowledged whose SENT write is deferred to
	// the next poll's claim transaction, acknowledged at ackedAt. They stay
	// PROCESSING in the database until then, so a crash in between leaves
	// them to stale recovery, like any row claimed and not yet recorded.
	acked   []outbox.Message
	ackedAt time.Time
	// unreleased are rows the broker could not be reached for whose release
	// failed too (the database was unreachable as well). They are released
	// before anything else, like acked, so that the outage spends none of
	// their attempts through stale recovery.
	unreleased []outbox.Message
	// unsettled are rows whose send ended without an answer
	// (UnansweredError): PROCESSING until their request is torn down, then
	// released like unreleased.
	unsettled []unsettledRow
	// unfailed are rejections whose write failed (the database was
	// unreachable): written before anything else, like unreleased, so that
	// each spends its one attempt, not a second through stale recovery.
	unfailed []outbox.Failure
	// lostClaim is set when a claim returned an error: its commit may have
	// gone through with the answer lost (the connection cut, a failover), so
	// rows may be PROCESSING under owner that this relay does not know of.
	// The next write reads them back and releases them (releaseLost) rather
	// than leave them and their posts' next events to stale recovery.
	lostClaim bool
	// unrecorded are rows a broken sender answered for fewer of than it
	// was given: sent or not, nobody knows, so they are left PROCESSING for
	// stale recovery, and the read-back of a lost claim must not take them
	// for its rows (while they stay PROCESSING at the claim's version).
	unrecorded []outbox.Message
	// next is a batch claimed by a Pump while the batch before was being
	// sent: PROCESSING under this relay's claim, not sent yet. The next poll
	// sends it before it claims anything; Flush releases it (PENDING again,
	// no attempt spent) when the relay stops or pauses.
	next []outbox.Message
	// nextAt is when the claim of next began, by this process's monotonic
	// clock: a batch older than maxNextAge is released, not sent.
	nextAt time.Time
	// recoveredAt is when RunOnce last looked for stale claims.
	recoveredAt time.Time
	// troubleUntil holds stale recovery back after a failed poll (by the
	// relay's own clock): until a stale limit after the last failure.
	troubleUntil time.Time
	// wake holds one request to end the loop's pause early (see Wake);
	// requests made while one is pending are folded into it.
	wake chan struct{}
}

// StaleLimitError is why New refuses a StaleAfter that a healthy claim could
// outlast: the sender's send bound plus WriteTimeout, and a quarter more
// for the claim's own transaction and the clocks' reading. New returns it
// as the Err of a *config.Error naming relay.Config.StaleAfter.
type StaleLimitError struct {
	// StaleAfter is the refused value; Min is the least StaleAfter above it.
	StaleAfter, Min time.Duration
	// SendBound and WriteTimeout are what Min is made of.
	SendBound, WriteTimeout time.Duration
}

func (e *StaleLimitError) Error() string {
	return fmt.Sprintf("must be more than %s: a send may take %s and the write of its results %s, plus a quarter",
		e.Min, e.SendBound, e.WriteTimeout)
}

// MinStaleAfter returns the least StaleAfter a relay accepts for a
// sender whose sends take up to sendBound and the given WriteTimeout
// (0: the default): StaleAfter must be more than it.
func MinStaleAfter(sendBound, writeTimeout time.Duration) time.Duration {
	if writeTimeout == 0 {
		writeTimeout = 30 * time.Second
	}
	return (sendBound + writeTimeout) * 5 / 4
}

// ValidateFor is Validate for a relay whose sender's sends take up to
// sendBound (its SendBounder; 0: unbounded): it also refuses a StaleAfter
// such a send could outlast, as New does, so a caller can check before it
// builds the sender. Like Validate, it fills no default: a zero is refused.
func (c Config) ValidateFor(sendBound time.Duration) error {
	if err := c.Validate(); err != nil {
		return err
	}
	return c.checkStaleAfter(sendBound)
}

// checkStaleAfter refuses a StaleAfter that a send of up to sendBound and
// the write of its results could outlast (a *StaleLimitError).
func (c Config) checkStaleAfter(sendBound time.Duration) error {
	if sendBound <= 0 {
		return nil
	}
	if min := MinStaleAfter(sendBound, c.WriteTimeout); c.StaleAfter <= min {
		return &config.Error{Field: "relay.Config.StaleAfter", Value: c.StaleAfter,
			Err: &StaleLimitError{StaleAfter: c.StaleAfter, Min: min, SendBound: sendBound, WriteTimeout: c.WriteTimeout}}
	}
	return nil
}

// New returns a relay that claims from store and sends through send.
func New(store *outbox.Store, send Sender, cfg Config) (*Relay, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid relay config: %w", err)
	}
	if b, ok := send.(SendBounder); ok {
		if err := cfg.checkStaleAfter(b.SendBound()); err != nil {
			return nil, fmt.Errorf("invalid relay config: %w", err)
		}
	}
	return &Relay{cfg: cfg, store: store, send: send, wake: make(chan struct{}, 1),
		batch: newBatchSizer(cfg.BatchSize, cfg.MaxBatchSize), owner: claimOwner(cfg.InstanceID)}, nil
}

// claimOwner returns id and a random token of this run, the owner a relay
// writes into its claims.
func claimOwner(id string) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	return id + "#" + hex.EncodeToString(b[:])
}

// Owner returns what this relay writes into claimed_by: its InstanceID, "#",
// and a token of this relay's run.
func (r *Relay) Owner() string { return r.owner }

// Wake makes the loop poll now if it is pausing between polls, or as soon
// as its poll in progress ends: rows were appended (a PostgreSQL
// notification, or a commit of this process through a db wired with
// database.WithCommitWaker). It never blocks, and any number of calls before the loop
// next looks make one poll. The interval stays the safety net for a wake
// that never comes; a relay backing off an outage ignores wakes.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Config returns the relay's configuration with defaults filled in.
func (r *Relay) Config() Config { return r.cfg }

// RunOnce does one poll: recover stale claims (at most once per Interval),
// claim a batch, send it, and record each result under the claim's version.
// When ctx ends between claim and send the rows stay PROCESSING, as after a
// crash, and are recovered after StaleAfter; once sent, results are recorded
// even if ctx ends meanwhile.
//
// On MySQL, when the batch was full and every row was acknowledged or
// rejected, the SENT write of the acknowledged rows is deferred to the next
// poll, which does it in the transaction of its claim (Result.Deferred); the
// loop polls again at once after a full batch, and writes what is left when
// it pauses or stops. A caller that drives RunOnce itself must call Flush
// when it is done.
func (r *Relay) RunOnce(ctx context.Context) (res Result, err error) { return r.poll(ctx, false) }

// Pump is RunOnce pipelined, as the relay's loop polls: when the batch it
// sends is full (more rows are likely waiting), it claims the next batch
// while this one is being sent, and keeps it for the next poll, which sends
// it first. The claim and the send overlap instead of following each other,
// so the database and the broker work at the same time. The guarantees are
// RunOnce's: the next batch is claimed under the same rule, which never
// takes an event of a post while an earlier one is PROCESSING (the batch in
// the air), so per-post order holds; a crash leaves both batches PROCESSING
// for stale recovery; an unreachable broker releases both. Result.Claimed
// counts the rows claimed during the poll, the next batch's included. A
// caller that drives Pump itself must call Flush when it is done, which
// releases a batch claimed and not sent.
func (r *Relay) Pump(ctx context.Context) (Result, error) { return r.poll(ctx, true) }

// claimed is the outcome of claiming the next batch during a send.
type claimed struct {
	msgs   []outbox.Message
	fenced int
	err    error
	// acked and ackedAt are the deferred acknowledgements the claim
	// wrote, or kept when it failed.
	acked   []outbox.Message
	ackedAt time.Time
}

func (r *Relay) poll(ctx context.Context, pipelined bool) (res Result, err error) {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	// Two clocks: the app's decides when this relay looks again; the
	// database's (shared by every instance) is what claims, retries and
	// stale recovery are written and compared in.
	appNow := r.cfg.Now()
	defer func() {
		if err != nil && ctx.Err() == nil {
			r.troubleUntil = appNow.Add(r.cfg.StaleAfter)
		}
	}()
	now, err := r.store.Now(ctx)
	if err != nil {
		return res, err
	}
	clock := newSharedClock(now)
	if err := r.releaseKept(ctx, &res); err != nil {
		return res, err
	}
	// Polls follow each other at once while full batches come; looking for
	// stale claims once per interval is enough (a claim is stale only after
	// StaleAfter, which is more than two intervals), and saves a read of
	// every PROCESSING row per batch.
	if r.recoveredAt.IsZero() || appNow.Sub(r.recoveredAt) >= r.cfg.Interval || appNow.Before(r.recoveredAt) {
		// Deferred acknowledgements first (one commit per interval): after
		// a database outage longer than StaleAfter their rows would look
		// stale, and this relay would recover, fence and resend its own
		// acknowledged rows.
		if len(r.acked) > 0 {
			fenced, err := r.store.MarkSent(ctx, r.acked, r.ackedAt)
			if err != nil {
				return res, fmt.Errorf("record deferred acknowledgements: %w", err)
			}
			res.Sent, res.Fenced = len(r.acked)-fenced, fenced
			r.acked, r.ackedAt = nil, time.Time{}
		}
		// After a failed poll (the database down, most likely) claims are
		// not judged until the database has answered for a stale limit: an
		// outage counts toward every claim's age, and the instance holding
		// one may be waiting to write its kept results, not dead.
		if !appNow.Before(r.troubleUntil) {
			rec, err := r.store.RecoverStale(ctx, now.Add(-r.cfg.StaleAfter), *r.cfg.MaxRetries, now.Add(r.cfg.RetryBase))
			if err != nil {
				return res, fmt.Errorf("recover stale claims: %w", err)
			}
			res.Recovered, res.RecoveredFailed = rec.Retried, rec.Failed
		}
		r.recoveredAt = appNow
	}

	claimStart := time.Now()
	// A batch a pipelined poll claimed during the previous send goes first.
	msgs := r.next
	r.next = nil
	if len(msgs) > 0 && time.Since(r.nextAt) > r.maxNextAge() {
		// The send before took long: sending this batch now could outlast
		// the stale limit and meet another instance's recovery of it. Hand
		// it back (no attempt spent) and claim afresh.
		fenced, err := r.store.Release(ctx, msgs)
		if err != nil {
			r.next = msgs
			return res, fmt.Errorf("release a batch claimed too long ago: %w", err)
		}
		res.Released, res.Fenced = res.Released+len(msgs)-fenced, res.Fenced+fenced
		msgs = nil
	}
	if len(msgs) == 0 {
		// A zero time: the claim is stamped by the database's clock inside its
		// transaction, not with now, which the work above (or a wait for a
		// lock) may have made old enough to look stale to other instances.
		c := r.claim(ctx, r.acked, r.ackedAt)
		if c.err != nil {
			// Nothing was written, or the answer of a commit was lost: the
			// acknowledgements wait for the next try (a second write of
			// them is fenced), and so does the read-back of the claim.
			r.lostClaim = true
			return res, fmt.Errorf("claim: %w", c.err)
		}
		res.Sent, res.Fenced = res.Sent+len(r.acked)-c.fenced, res.Fenced+c.fenced
		r.acked, r.ackedAt = nil, time.Time{}
		res.Claimed = len(c.msgs)
		msgs = c.msgs
	}
	if len(msgs) == 0 {
		return res, nil
	}
	ctx, poll := r.tracePoll(ctx, claimStart, msgs)
	defer func() { endSpan(poll, err) }()
	if r.afterClaim != nil {
		r.afterClaim()
	}
	if err := ctx.Err(); err != nil {
		// Kept for Flush, which releases them; after a crash, stale recovery.
		r.next = msgs
		return res, fmt.Errorf("stopped between claim and send, %d rows not sent: %w", len(msgs), err)
	}

	// A full batch: more rows are likely waiting. Claim the next batch (and
	// write the acknowledgements deferred so far) while this one is sent.
	// Its rule skips every post with a row of this batch in the air, so no
	// event overtakes an earlier one of its post.
	var nextc chan claimed
	var nextAt time.Time
	if pipelined && len(msgs) >= r.cfg.BatchSize {
		acked, ackedAt := r.acked, r.ackedAt
		r.acked, r.ackedAt = nil, time.Time{}
		nextc = make(chan claimed, 1)
		nextAt = time.Now()
		// This batch's results are written only once the claim has
		// returned, so a claim stuck on the database (a lock wait, a
		// dropped connection not timed out yet) would hold this batch
		// PROCESSING past the stale limit, for another instance to send
		// again. A batch claimed later than maxNextAge would be released
		// unsent anyway: give up the claim then. (Should its commit be cut
		// off, its rows stay PROCESSING for stale recovery, as after a
		// crash.)
		cctx, cancel := context.WithTimeout(ctx, r.maxNextAge())
		defer cancel()
		go func() { nextc <- r.claim(cctx, acked, ackedAt) }()
	}
	errs := r.traceSend(ctx, msgs)
	var claimErr error
	if nextc != nil {
		c := <-nextc
		if c.err != nil {
			// As for a claim before a send: keep the acknowledgements, and
			// read back what the claim may have taken.
			r.acked, r.ackedAt, r.lostClaim = c.acked, c.ackedAt, true
			claimErr = fmt.Errorf("claim the next batch: %w", c.err)
		} else {
			res.Sent, res.Fenced = res.Sent+len(c.acked)-c.fenced, res.Fenced+c.fenced
			res.Claimed += len(c.msgs)
			r.next, r.nextAt = c.msgs, nextAt
		}
	}
	if len(errs) != len(msgs) {
		// A broken sender: treat the outcome as unknown and let stale recovery retry.
		r.unrecorded = append(r.unrecorded, msgs...)
		return res, errors.Join(fmt.Errorf("sender returned %d results for %d messages", len(errs), len(msgs)), claimErr)
	}
	// The sends happened: record them even if we are being stopped.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
	defer cancel()
	res, err = r.record(wctx, msgs, errs, res, clock.now())
	if res.Unavailable && len(r.next) > 0 {
		// The broker is unreachable: hand the next batch back too rather
		// than hold it over the outage backoff.
		fenced, rerr := r.store.Release(wctx, r.next)
		if rerr != nil {
			r.unreleased = append(r.unreleased, r.next...)
			rerr = fmt.Errorf("release the next batch: %w (%d rows kept to release at the next try)", rerr, len(r.next))
		} else {
			res.Released, res.Fenced = res.Released+len(r.next)-fenced, res.Fenced+fenced
		}
		r.next = nil
		err = errors.Join(err, rerr)
	}
	return res, errors.Join(err, claimErr)
}

// maxNextAge is how old a batch claimed for the next poll may be when that
// poll starts its send: a tenth of StaleAfter. New makes StaleAfter exceed
// (send bound + WriteTimeout) * 5/4, so the age plus a whole send and write
// stays below nine tenths of it, and no other instance takes a live claim
// for stale. (Sequential polls start the send right after the claim.)
func (r *Relay) maxNextAge() time.Duration { return r.cfg.StaleAfter / 10 }

// claim writes the deferred acknowledgements acked and claims a batch, in
// one transaction (outbox.Store.MarkSentAndClaim). It touches no field of
// r, so a pipelined poll runs it beside a send.
func (r *Relay) claim(ctx context.Context, acked []outbox.Message, ackedAt time.Time) claimed {
	size := r.batch.size()
	msgs, fenced, err := r.store.MarkSentAndClaim(ctx, acked, ackedAt, r.owner, size, time.Time{})
	if r.claimAnswer != nil {
		msgs, err = r.claimAnswer(msgs, err)
	}
	if err == nil {
		r.batch.observe(size, len(msgs))
	}
	return claimed{msgs: msgs, fenced: fenced, err: err, acked: acked, ackedAt: ackedAt}
}

// sharedClock is the database's time read at the start of a poll, moved on
// by this process's monotonic clock: later times of the poll (sent_at, a
// retry's next_attempt_at) need no second read, and no wall clock enters.
type sharedClock struct {
	at    time.Time // the database's time when read
	since time.Time // this process's time then, with its monotonic reading
}

func newSharedClock(at time.Time) sharedClock { return sharedClock{at: at, since: time.Now()} }

func (c sharedClock) now() time.Time { return c.at.Add(time.Since(c.since)) }

// Flush writes the SENT of rows whose acknowledgement a full batch left for
// the next poll (see RunOnce), releases a batch claimed for the next poll
// and not sent (see Pump), releases rows whose release failed, and releases
// rows whose send got no answer (relay.UnansweredError) once it has settled,
// waiting for that until ctx ends (rows still unsettled then stay
// PROCESSING for stale recovery). The loop calls it when it stops (and,
// without the wait, when it pauses); it does nothing when nothing is
// left. On error the rows stay PROCESSING and
// are recovered after StaleAfter, and may then be sent a second time.
func (r *Relay) Flush(ctx context.Context) (Result, error) { return r.flushKept(ctx, true) }

// flushKept is Flush; without wait, rows whose unanswered send has not
// settled yet stay kept for a later poll instead of being waited for.
func (r *Relay) flushKept(ctx context.Context, wait bool) (Result, error) {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	var res Result
	// A batch claimed for the next poll goes back unchanged: no attempt
	// spent, and the version bump fences nothing of ours.
	r.unreleased, r.next = append(r.unreleased, r.next...), nil
	// Rows whose send got no answer go back once their request is torn
	// down (within the sender's bound); those still not settled when ctx
	// ends stay PROCESSING for stale recovery.
	r.settle(ctx, wait)
	if err := r.releaseKept(ctx, &res); err != nil {
		return res, err
	}
	if len(r.acked) == 0 {
		return res, nil
	}
	fenced, err := r.store.MarkSent(ctx, r.acked, r.ackedAt)
	if err != nil {
		return res, fmt.Errorf("record deferred acknowledgements: %w", err)
	}
	res.Sent, res.Fenced = len(r.acked)-fenced, fenced
	r.acked, r.ackedAt = nil, time.Time{}
	return res, nil
}

// unsettledRow is a row whose send ended without an answer, and the
// channel its sender closes once that request can no longer land.
type unsettledRow struct {
	msg     outbox.Message
	settled <-chan struct{}
}

// settle moves the unsettled rows whose request is torn down to unreleased;
// with wait, it first waits for each until ctx ends. r.pollMu must be held.
func (r *Relay) settle(ctx context.Context, wait bool) {
	kept := r.unsettled[:0]
	for _, u := range r.unsettled {
		if wait {
			select {
			case <-u.settled:
			case <-ctx.Done():
			}
		}
		select {
		case <-u.settled:
			r.unreleased = append(r.unreleased, u.msg)
		default:
			kept = append(kept, u)
		}
	}
	clear(r.unsettled[len(kept):])
	r.unsettled = kept
}

// releaseKept writes the rejections whose write failed in an earlier poll,
// hands back the rows whose release failed, and those whose unanswered
// send is now torn down, and then what a claim without an answer took.
// r.pollMu must be held.
func (r *Relay) releaseKept(ctx context.Context, res *Result) error {
	r.settle(ctx, false)
	if len(r.unfailed) > 0 {
		fenced, err := r.store.MarkFailed(ctx, r.unfailed)
		if err != nil {
			return fmt.Errorf("record rejections kept from an outage: %w", err)
		}
		res.Fenced += fenced
		r.unfailed = nil
	}
	if len(r.unreleased) > 0 {
		fenced, err := r.store.Release(ctx, r.unreleased)
		if err != nil {
			return fmt.Errorf("release rows kept from an outage: %w", err)
		}
		res.Released, res.Fenced = res.Released+len(r.unreleased)-fenced, res.Fenced+fenced
		r.unreleased = nil
	}
	return r.releaseLost(ctx, res)
}

// releaseLost releases the rows a claim without an answer took: those
// PROCESSING under this relay's owner that it holds in none of its lists.
// They were never sent, so they go back with no attempt spent, as at once
// as the database answers, not after the stale limit with one spent; the
// version bump fences nothing of ours. The owner carries this run's token,
// so the claims of an earlier run (a crash, which stale recovery counts)
// or of another process given the same InstanceID are not touched.
// r.pollMu must be held.
func (r *Relay) releaseLost(ctx context.Context, res *Result) error {
	if !r.lostClaim {
		return nil
	}
	if len(r.acked) > 0 {
		// The claim carried these acknowledgements: those its commit wrote
		// are sent, not fenced when written again.
		written, err := r.store.WrittenSent(ctx, r.acked)
		if err != nil {
			return fmt.Errorf("read back a claim that got no answer: %w", err)
		}
		r.acked = slices.DeleteFunc(r.acked, func(m outbox.Message) bool { return written[m.ID] })
		res.Sent += len(written)
		if len(r.acked) == 0 {
			r.ackedAt = time.Time{}
		}
	}
	rows, err := r.store.ClaimedBy(ctx, r.owner)
	if err != nil {
		return fmt.Errorf("read back a claim that got no answer: %w", err)
	}
	held := map[int64]bool{}
	for _, m := range slices.Concat(r.acked, r.next, r.unreleased) {
		held[m.ID] = true
	}
	for _, u := range r.unsettled {
		held[u.msg.ID] = true
	}
	for _, f := range r.unfailed {
		held[f.Message.ID] = true
	}
	// An unrecorded send stays held while its row is PROCESSING at the
	// version of that claim; once stale recovery (or anything else) has
	// moved it on, it is forgotten.
	version := make(map[int64]int64, len(rows))
	for _, m := range rows {
		version[m.ID] = m.Version
	}
	r.unrecorded = slices.DeleteFunc(r.unrecorded, func(m outbox.Message) bool {
		v, ok := version[m.ID]
		return !ok || v != m.Version
	})
	for _, m := range r.unrecorded {
		held[m.ID] = true
	}
	lost := slices.DeleteFunc(rows, func(m outbox.Message) bool { return held[m.ID] })
	if len(lost) > 0 {
		fenced, err := r.store.Release(ctx, lost)
		if err != nil {
			return fmt.Errorf("release a claim that got no answer: %w", err)
		}
		res.Released, res.Fenced = res.Released+len(lost)-fenced, res.Fenced+fenced
		res.Lost += len(lost) - fenced
	}
	r.lostClaim = false
	return nil
}

// hasNext reports whether a batch claimed during the last send waits to be sent.
func (r *Relay) hasNext() bool {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	return len(r.next) > 0
}

// pendingAcks reports whether acknowledgements wait for their SENT write,
// or rows for their release.
func (r *Relay) pendingAcks() bool {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	return len(r.acked) > 0 || len(r.unreleased) > 0 || len(r.next) > 0 || len(r.unsettled) > 0 ||
		len(r.unfailed) > 0 || r.lostClaim
}

func (r *Relay) record(ctx context.Context, msgs []outbox.Message, errs []error, res Result, now time.Time) (Result, error) {
	var sent, released []outbox.Message
	var failures []outbox.Failure
	for i, m := range msgs {
		var unanswered *UnansweredError
		switch err := errs[i]; {
		case err == nil:
			sent = append(sent, m)
		case errors.As(err, &unanswered) && unanswered.Settled != nil:
			// It may still land: releasing it now would let another
			// instance send it and the next event of its post first.
			r.unsettled = append(r.unsettled, unsettledRow{msg: m, settled: unanswered.Settled})
			res.Held++
			res.Unavailable = true
		case errors.Is(err, ErrUnavailable):
			released = append(released, m)
		default:
			final := m.RetryCount >= *r.cfg.MaxRetries
			failures = append(failures, outbox.Failure{
				Message:       m,
				Err:           err.Error(),
				NextAttemptAt: now.Add(r.retryDelay(m.RetryCount + 1)),
				Final:         final,
			})
			if final {
				res.Failed++
			} else {
				res.Retried++
			}
		}
	}
	var errsOut []error
	switch {
	case len(sent) == 0:
	case len(msgs) >= r.cfg.BatchSize && len(released) == 0 && res.Held == 0 && r.store.DefersAcksToNextClaim():
		// A full batch: the next poll follows at once and writes these in
		// its claim transaction.
		// (acked holds rows already when a pipelined claim failed.)
		if len(r.acked) == 0 {
			r.ackedAt = now
		}
		r.acked = append(r.acked, sent...)
		res.Deferred = len(sent)
	default:
		fenced, err := r.store.MarkSent(ctx, sent, now)
		if err != nil {
			// Nothing was written (one transaction). Keep the
			// acknowledgements, as for a deferred write: the next poll (or
			// the flush before the loop pauses) writes them, instead of
			// stale recovery sending the rows again with an attempt spent
			// and holding their posts' next events for StaleAfter.
			r.acked, r.ackedAt = append(r.acked, sent...), now
			errsOut = append(errsOut, fmt.Errorf("%w (%d acknowledgements kept for the next try)", err, len(sent)))
			break
		}
		res.Sent, res.Fenced = res.Sent+len(sent)-fenced, res.Fenced+fenced
	}
	if len(failures) > 0 {
		fenced, err := r.store.MarkFailed(ctx, failures)
		res.Fenced += fenced
		if err != nil {
			// Nothing was written (one transaction): write them at the next
			// poll or flush, each rejection one attempt.
			r.unfailed = append(r.unfailed, failures...)
			err = fmt.Errorf("%w (%d rejections kept to write at the next try)", err, len(failures))
		}
		errsOut = append(errsOut, err)
	}
	if len(released) > 0 {
		fenced, err := r.store.Release(ctx, released)
		res.Released, res.Fenced = len(released)-fenced, res.Fenced+fenced
		res.Unavailable = true
		if err != nil {
			// Nothing was written (one transaction): release them at the
			// next poll or flush instead of spending an attempt of each
			// through stale recovery.
			r.unreleased = append(r.unreleased, released...)
			res.Released = 0
			err = fmt.Errorf("%w (%d rows kept to release at the next try)", err, len(released))
		}
		errsOut = append(errsOut, err)
	}
	if err := errors.Join(errsOut...); err != nil {
		// The rows stay PROCESSING: stale recovery retries them; the broker
		// may then see some twice, with the same event-id.
		return res, fmt.Errorf("record send results: %w", err)
	}
	return res, nil
}

// retryDelay is the wait before the given retry (1-based): RetryBase doubled
// per earlier retry, capped at RetryMax, then jittered into [d/2, d] so rows
// rejected together do not come back together.
func (r *Relay) retryDelay(retry int) time.Duration {
	return backoff.Jitter(backoff.Delay(r.cfg.RetryBase, r.cfg.RetryMax, retry-1))
}

// flush writes deferred acknowledgements for the loop, even when ctx has
// ended: the sends happened.
func (r *Relay) flush(ctx context.Context, log *slog.Logger, final bool) {
	if !r.pendingAcks() {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	start := time.Now()
	res, err := r.flushKept(fctx, final)
	if r.cfg.Observe != nil {
		r.cfg.Observe(res, time.Since(start), err)
	}
	switch {
	case err != nil:
		log.Error("recording acknowledged rows failed; stale recovery will send them again", "err", err)
	case res.Fenced > 0:
		log.Warn("late results refused: another instance had recovered the claim", "fenced", res.Fenced)
	}
	logLost(log, res)
}

// logLost says when a claim without an answer was found and handed back.
func logLost(log *slog.Logger, res Result) {
	if res.Lost > 0 {
		log.Warn("a claim got no answer (connection lost during its commit); its rows were handed back unsent, no attempt spent",
			"released", res.Lost)
	}
}

// Start runs the relay loop in one goroutine until Stop is called or ctx ends.
func (r *Relay) Start(ctx context.Context) error {
	// Stop ends stop, not ctx: polls run on ctx, so the poll in flight
	// finishes (sends and records) when Stop is asked, and only the end of
	// ctx cuts it off.
	return r.StartLoop(ctx, "relay", func(stop context.Context) { r.loop(ctx, stop) })
}

// Stop asks the loop to exit after the poll in progress, whose sends are
// finished and recorded (deferred acknowledgements included; a batch
// claimed for the next poll is released, PENDING again with no attempt
// spent), and waits for it. It is safe to call twice and without Start.
func (r *Relay) Stop() { r.BaseStartStop.Stop() }

func (r *Relay) loop(ctx, stop context.Context) {
	// The instance id is on every line already when the logger comes from
	// serve; the relay's own id is what matters for claims.
	log := r.cfg.Logger.With("component", "relay", "claim_owner", r.owner)
	log.Info("relay started", "interval", r.cfg.Interval, "batch_size", r.cfg.BatchSize, "max_batch_size", r.cfg.MaxBatchSize,
		"max_retries", *r.cfg.MaxRetries, "stale_after", r.cfg.StaleAfter)
	defer log.Info("relay stopped")
	// A full batch leaves its acknowledgements to the next poll: write them
	// before the loop ends, whether by Stop or by ctx.
	defer r.flush(ctx, log, true)
	outage := backoff.Backoff{Base: r.cfg.Interval, Max: r.cfg.OutageBackoffMax, Exact: true}
	for {
		start := time.Now()
		res, err := r.Pump(ctx)
		if r.cfg.Observe != nil {
			r.cfg.Observe(res, time.Since(start), err)
		}
		wait := r.cfg.Interval
		switch {
		case err != nil && ctx.Err() != nil:
			log.Warn("relay poll interrupted", "err", err)
			return
		case err != nil:
			log.Error("relay poll failed", "err", err, "claimed", res.Claimed)
		case res.Unavailable:
			wait = outage.Next()
			log.Warn("broker unreachable, backing off without spending retries",
				"released", res.Released, "sent", res.Sent, "backoff", wait)
		default:
			outage.Reset()
			if res.Claimed > 0 || res.Recovered > 0 || res.RecoveredFailed > 0 {
				log.Debug("relay poll", "claimed", res.Claimed, "sent", res.Sent, "deferred", res.Deferred, "retried", res.Retried,
					"failed", res.Failed, "recovered", res.Recovered, "fenced", res.Fenced)
			}
			if res.Failed > 0 || res.RecoveredFailed > 0 {
				log.Warn("events failed for good; an operator must requeue them",
					"failed", res.Failed+res.RecoveredFailed)
			}
			if res.Fenced > 0 {
				log.Warn("late results refused: another instance had recovered the claim", "fenced", res.Fenced)
			}
			logLost(log, res)
			if res.Claimed >= r.cfg.BatchSize || r.hasNext() {
				wait = 0 // a full batch, or one claimed for the next poll: more are waiting
			}
		}
		if wait == 0 {
			if !backoff.Sleep(stop, 0) {
				return
			}
			continue
		}
		// Nothing is deferred over a pause (after an error or an outage).
		r.flush(ctx, log, false)
		if pinger, ok := r.send.(Pinger); ok && res.Unavailable {
			if !r.waitOutage(ctx, stop, wait, pinger, log) {
				return
			}
			continue
		}
		if !backoff.SleepOrWake(stop, wait, r.wake) {
			return
		}
	}
}

// waitOutage waits out an outage backoff, asking pinger every Interval
// whether the broker answers again; it returns early when it does, and
// false when the relay is stopped meanwhile.
func (r *Relay) waitOutage(ctx, stop context.Context, wait time.Duration, pinger Pinger, log *slog.Logger) bool {
	deadline := time.Now().Add(wait)
	for {
		step := min(r.cfg.Interval, time.Until(deadline))
		if step <= 0 {
			return true
		}
		if !backoff.Sleep(stop, step) {
			return false
		}
		if time.Until(deadline) <= 0 {
			return true
		}
		pctx, cancel := context.WithTimeout(ctx, max(r.cfg.Interval, time.Second))
		err := pinger.Ping(pctx)
		cancel()
		if err == nil {
			log.Info("broker reachable again; polling before the backoff ends", "backoff_left", time.Until(deadline).Round(time.Millisecond))
			return true
		}
	}
}
