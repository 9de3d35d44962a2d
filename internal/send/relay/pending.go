package relay

import (
	"context"
	"slices"
	"time"

	"github.com/postingsvc/posting/internal/send/outbox"
)

// pending is what a relay holds from one poll to the next: rows it claimed
// whose outcome is not written yet. Each stays PROCESSING under the relay's
// claim until the relay writes it, so a crash in between leaves it to stale
// recovery, like any row claimed and not yet recorded. Each kind waits for
// a different write:
//
//   - acknowledgements, for their SENT (deferAcks, keepAcks, takeAcks);
//   - rows to hand back unchanged, no attempt spent (keepToRelease,
//     takeToRelease), among them rows whose send got no answer once their
//     request is torn down (holdUnanswered, settle);
//   - rejections, for their RETRY or FAIL (keepFailures, takeFailures);
//   - a batch claimed for the next poll, to send first (setNext, takeNext);
//   - the read-back of a claim whose answer was lost (markClaimLost,
//     lostRows);
//   - and rows a broken sender left unrecorded, which no write takes (stale
//     recovery does), but which the read-back must not take for lost ones
//     (leaveUnrecorded).
//
// pending touches no database: the relay takes what it writes, and puts
// back (or keeps again) what it could not write. It is not safe for
// concurrent use; the relay's pollMu guards it.
type pending struct {
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
	// rows may be PROCESSING under the relay's owner that it does not know
	// of. The next write reads them back and releases them (releaseLost)
	// rather than leave them and their posts' next events to stale recovery.
	lostClaim bool
	// unrecorded are rows a broken sender answered for fewer of than it
	// was given: sent or not, nobody knows, so they are left PROCESSING for
	// stale recovery, and the read-back of a lost claim must not take them
	// for its rows (while they stay PROCESSING at the claim's version).
	unrecorded []outbox.Message
	// next is a batch claimed by a Pump while the batch before was being
	// sent (or claimed by a poll stopped before its send): PROCESSING under
	// the relay's claim, not sent yet. The next poll sends it before it
	// claims anything, unless it is older than maxNextAge; Flush releases
	// it (PENDING again, no attempt spent) when the relay stops or pauses.
	next toSend
}

// unsettledRow is a row whose send ended without an answer, and the
// channel its sender closes once that request can no longer land.
type unsettledRow struct {
	msg     outbox.Message
	settled <-chan struct{}
}

// deferAcks keeps acknowledgements whose SENT write is left to the next
// claim. The write stamps them with the time of the first acknowledgement
// waiting: at, unless some were waiting already.
func (p *pending) deferAcks(msgs []outbox.Message, at time.Time) {
	if len(p.acked) == 0 {
		p.ackedAt = at
	}
	p.acked = append(p.acked, msgs...)
}

// keepAcks keeps acknowledgements whose SENT write failed, for the next
// try; that write stamps them, and those waiting already, with at.
func (p *pending) keepAcks(msgs []outbox.Message, at time.Time) {
	p.acked, p.ackedAt = append(p.acked, msgs...), at
}

// takeAcks returns the acknowledgements waiting and their stamp, and keeps
// none.
func (p *pending) takeAcks() ([]outbox.Message, time.Time) {
	msgs, at := p.acked, p.ackedAt
	p.acked, p.ackedAt = nil, time.Time{}
	return msgs, at
}

// putBackAcks returns acknowledgements taken by takeAcks whose write
// failed, or did not take them all, ahead of any kept since, with their
// stamp. Putting back none changes nothing.
func (p *pending) putBackAcks(msgs []outbox.Message, at time.Time) {
	if len(msgs) == 0 {
		return
	}
	p.acked, p.ackedAt = append(slices.Clip(msgs), p.acked...), at
}

// keepToRelease keeps rows to hand back unchanged at the next write.
func (p *pending) keepToRelease(msgs ...outbox.Message) {
	p.unreleased = append(p.unreleased, msgs...)
}

// takeToRelease returns the rows to hand back, and keeps none.
func (p *pending) takeToRelease() []outbox.Message {
	msgs := p.unreleased
	p.unreleased = nil
	return msgs
}

// holdUnanswered keeps m, whose send got no answer, until settled is
// closed; settle then makes it a row to release.
func (p *pending) holdUnanswered(m outbox.Message, settled <-chan struct{}) {
	p.unsettled = append(p.unsettled, unsettledRow{msg: m, settled: settled})
}

// settle makes the unanswered rows whose request is torn down rows to
// release; with wait, it first waits for each until ctx ends.
func (p *pending) settle(ctx context.Context, wait bool) {
	kept := p.unsettled[:0]
	for _, u := range p.unsettled {
		if wait {
			select {
			case <-u.settled:
			case <-ctx.Done():
			}
		}
		select {
		case <-u.settled:
			p.unreleased = append(p.unreleased, u.msg)
		default:
			kept = append(kept, u)
		}
	}
	clear(p.unsettled[len(kept):])
	p.unsettled = kept
}

// keepFailures keeps rejections whose write failed, for the next write.
func (p *pending) keepFailures(fs ...outbox.Failure) {
	p.unfailed = append(p.unfailed, fs...)
}

// takeFailures returns the rejections to write, and keeps none.
func (p *pending) takeFailures() []outbox.Failure {
	fs := p.unfailed
	p.unfailed = nil
	return fs
}

// leaveUnrecorded notes rows sent without a result to record: left to stale
// recovery, they are nothing to write, but lostRows does not take them for
// a lost claim's while they stay PROCESSING at the version they were sent at.
func (p *pending) leaveUnrecorded(msgs ...outbox.Message) {
	p.unrecorded = append(p.unrecorded, msgs...)
}

// setNext keeps b for the next poll to send first.
func (p *pending) setNext(b toSend) { p.next = b }

// takeNext returns the batch kept for the next poll, and keeps none.
func (p *pending) takeNext() toSend {
	b := p.next
	p.next = toSend{}
	return b
}

// hasNext reports whether a batch waits for the next poll.
func (p *pending) hasNext() bool { return len(p.next.msgs) > 0 }

// markClaimLost notes that a claim returned an error: its commit may have
// gone through, so the next write reads back the claims and releases those
// of lostRows.
func (p *pending) markClaimLost() { p.lostClaim = true }

// claimLost reports whether a read-back is due (markClaimLost).
func (p *pending) claimLost() bool { return p.lostClaim }

// clearClaimLost notes that the read-back is done.
func (p *pending) clearClaimLost() { p.lostClaim = false }

// lostRows returns the rows of owned (every row PROCESSING under the
// relay's owner, read back; reused for the answer) held in none of the
// lists: those a claim without an answer took. An unrecorded send stays
// held while its row is PROCESSING at the version of that claim; once
// stale recovery (or anything else) has moved it on, it is forgotten.
func (p *pending) lostRows(owned []outbox.Message) []outbox.Message {
	held := map[int64]bool{}
	for _, m := range slices.Concat(p.acked, p.next.msgs, p.unreleased) {
		held[m.ID] = true
	}
	for _, u := range p.unsettled {
		held[u.msg.ID] = true
	}
	for _, f := range p.unfailed {
		held[f.Message.ID] = true
	}
	version := make(map[int64]int64, len(owned))
	for _, m := range owned {
		version[m.ID] = m.Version
	}
	p.unrecorded = slices.DeleteFunc(p.unrecorded, func(m outbox.Message) bool {
		v, ok := version[m.ID]
		return !ok || v != m.Version
	})
	for _, m := range p.unrecorded {
		held[m.ID] = true
	}
	return slices.DeleteFunc(owned, func(m outbox.Message) bool { return held[m.ID] })
}

// needsWrite reports whether a write is due: acknowledgements, rows to
// release (the next batch and unanswered rows included), rejections, or the
// read-back of a lost claim. Unrecorded rows are stale recovery's, not due.
func (p *pending) needsWrite() bool {
	return len(p.acked) > 0 || len(p.unreleased) > 0 || len(p.next.msgs) > 0 || len(p.unsettled) > 0 ||
		len(p.unfailed) > 0 || p.lostClaim
}
