package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/postingsvc/posting/internal/platform/startstop"
	"github.com/postingsvc/posting/internal/send/outbox"
)

// Result counts what one poll did.
type Result struct {
	// Recovered stale claims put back to RETRY, and RecoveredFailed ones that
	// had no attempts left and became FAIL.
	Recovered, RecoveredFailed int
	// Claimed rows this poll.
	Claimed int
	// Sent rows the broker acknowledged, counted when their SENT is written:
	// acknowledgements left to the next poll (see Deferred) count in that
	// poll's Sent.
	Sent int
	// Deferred rows the broker acknowledged this poll whose SENT write was
	// left to the next poll's claim transaction: the next poll follows at
	// once (a full batch, or the loop, which polls again after any poll that
	// sent rows), and one commit per batch is saved (not on SQLite, see
	// outbox.Store.DefersAcksToNextClaim). Stop (and Flush) write whatever
	// is left.
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

	// hooks are nil but in the package's tests (see hooks).
	hooks *hooks

	// pollMu serializes polls and flushes, which share pending.
	pollMu sync.Mutex
	// pending are the rows claimed whose outcome is not written yet: the
	// acknowledgements deferred to the next claim, the rows to release, the
	// rejections to write, the batch claimed for the next poll (see pending).
	pending pending
	// ackedSinceClaim is how many rows the broker acknowledged since the
	// last claim read its candidates, whoever claimed them (a poll, or the
	// one before it for a batch claimed beside a send): their posts' next
	// events became heads after that read, so the loop looks again at once.
	// A poll that claims nothing (it sends the batch claimed beside the send
	// before) keeps the count of the polls before it: a rejection of its
	// whole batch must not leave those events to the timer.
	ackedSinceClaim int
	// recoveredAt is when RunOnce last looked for stale claims.
	recoveredAt time.Time
	// troubleUntil holds stale recovery back after a failed poll (by the
	// relay's own clock): until a stale limit after the last failure.
	troubleUntil time.Time
	// wake holds one request to end the loop's pause early (see Wake);
	// requests made while one is pending are folded into it.
	wake chan struct{}
	// ownWake says a wake came from this process's commits (Wake), not
	// only from another instance's (WakeForPeer).
	ownWake atomic.Bool
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
	r.ownWake.Store(true)
	r.signal()
}

// WakeForPeer is Wake for rows another instance appended (a PostgreSQL
// notification): that instance's relay, woken in its own process, most
// often claims them first, so the poll looks for a due row with a plain
// read before it opens a claim transaction, as a poll of the timer does.
// After Wake the poll goes straight to its claim.
func (r *Relay) WakeForPeer() { r.signal() }

func (r *Relay) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// tookOwnWake reports whether the wake the loop took came from this
// process's commits (see Wake), and clears that.
func (r *Relay) tookOwnWake() bool { return r.ownWake.Swap(false) }

// Config returns the relay's configuration with defaults filled in.
func (r *Relay) Config() Config { return r.cfg }

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
