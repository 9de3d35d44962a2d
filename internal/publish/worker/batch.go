package worker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// maxBatch bounds the publications whose PUBLISHED writes share one
// statement: an IN list far below every database's placeholder limit, and a
// transaction short enough not to hold SQLite's one write lock for long.
const maxBatch = 500

// maxLoadBatch bounds the publications read in one batch (two IN lists, no
// transaction, no lock): a spike's reads are its lag, so they go in fewer,
// larger statements than the writes.
const maxLoadBatch = 2000

// batchRunners is how many batches of one kind (reads, writes) run at once:
// two, so that one batch's round trips overlap the next one's gathering
// without taking the connection pool from the API and the consumer.
const batchRunners = 2

// loaded is what an attempt reads before it calls the publisher: its
// publication, its post (nil when the post is gone) and the database's
// time, read in one batch with the other attempts due at the same moment.
type loaded struct {
	pub  Publication
	post *reservation.Post
	now  time.Time
	err  error
}

// recordReq asks to record a post published at at; recordRes says how the
// publication ended and whether this worker settled it.
type recordReq struct {
	postID int64
	at     time.Time
}

type recordRes struct {
	status  PublicationStatus
	changed bool
	err     error
}

// claimRes is how the claim of a post ended, once its attempt holds a slot:
// claimed (call the publisher), or not, and then the publication settled as
// the post's status says (status; changed: by this worker; reason: a FAILED
// one's last_error), or left PENDING with err (try again).
type claimRes struct {
	claimed bool
	status  PublicationStatus
	changed bool
	reason  string
	err     error
}

// newGroups sets up the worker's batched reads and writes.
func (w *Worker) newGroups() {
	w.loads = &group[int64, loaded]{max: maxLoadBatch, runners: batchRunners, run: w.loadBatch}
	w.claims = &group[int64, claimRes]{max: maxBatch, runners: batchRunners, run: w.claimBatch}
	w.records = &group[recordReq, recordRes]{max: maxBatch, runners: batchRunners, run: w.recordBatch}
}

// loadBatch reads the publications of ids, the database's time, and the
// posts of the PENDING ones, in three statements.
func (w *Worker) loadBatch(ids []int64) []loaded {
	out := make([]loaded, len(ids))
	fail := func(err error) []loaded {
		for i := range out {
			out[i].err = err
		}
		return out
	}
	db := w.db.WithContext(w.base)
	var pubs []Publication
	if err := db.Where("post_id IN ?", ids).Find(&pubs).Error; err != nil {
		return fail(fmt.Errorf("load publications of %d posts: %w", len(ids), err))
	}
	// The worker's clock may run ahead of the one that wrote scheduledAt:
	// the database's decides, and every time written after is its.
	now, err := w.dbNow(w.base)
	if err != nil {
		return fail(err)
	}
	byPost := make(map[int64]Publication, len(pubs))
	var pending []int64
	for _, p := range pubs {
		byPost[p.PostID] = p
		if p.Status == PublicationPending && !p.ScheduledAt.After(now) {
			pending = append(pending, p.PostID)
		}
	}
	posts := map[int64]*reservation.Post{}
	if len(pending) > 0 {
		var rows []reservation.Post
		if err := db.Where("id IN ?", pending).Find(&rows).Error; err != nil {
			return fail(fmt.Errorf("load %d posts: %w", len(pending), err))
		}
		for i := range rows {
			posts[rows[i].ID] = &rows[i]
		}
	}
	for i, id := range ids {
		pub, ok := byPost[id]
		if !ok {
			out[i].err = fmt.Errorf("load publication of post %d: %w", id, gorm.ErrRecordNotFound)
			continue
		}
		out[i] = loaded{pub: pub, post: posts[id], now: now}
	}
	return out
}

// claimBatch claims the posts ids for a publisher call, each only while it
// is WORKING and either claimed before or its publishBy has not passed by
// the database's clock: one UPDATE that sets publish_claimed_at (an earlier
// claim's is kept), with the database's time of that statement
// (database.NowExpr), so the attempts that got their slots at the same time
// share one statement and no clock read. Serve's expirer leaves a claimed
// post alone, so a post is either published by its claimer or expired,
// never both.
//
// A claim made in time stands past the deadline: the receiver may have been
// told already (a call that failed or timed out, a worker killed between
// the receiver's answer and the commit), so the post is never expired after
// a call; it is called again, with the same idempotency key, until it is
// PUBLISHED or the publisher refuses it (FAILED, for an operator).
//
// When the UPDATE did not match every post (one cancelled, expired or
// published since it was read, one past its publishBy and never claimed, or
// one claimed by an earlier attempt, which MySQL does not count as a
// changed row), one transaction reads them again by the database's clock: a
// post claimed before is claimed; a WORKING post never claimed whose
// publishBy passed is expired there by the worker itself
// (reservation.Expire, which writes its POSTING_EVENT EXPIRED) and its
// publication settled EXPIRED in the same transaction; every other
// publication settles as its post's status says.
func (w *Worker) claimBatch(ids []int64) []claimRes {
	ctx, cancel := context.WithTimeout(w.base, 30*time.Second)
	defer cancel()
	out := make([]claimRes, len(ids))
	fail := func(err error) []claimRes {
		for i := range out {
			out[i] = claimRes{status: PublicationPending, err: err}
		}
		return out
	}
	uniq := slices.Compact(slices.Sorted(slices.Values(ids)))
	now := database.NowExpr(w.db)
	res := w.db.WithContext(ctx).Exec("UPDATE posts SET publish_claimed_at = COALESCE(publish_claimed_at, ?) "+
		"WHERE id IN ? AND status = ? AND (publish_claimed_at IS NOT NULL OR publish_by IS NULL OR publish_by >= ?)",
		now, uniq, reservation.StatusWorking, now)
	if res.Error != nil {
		return fail(fmt.Errorf("claim %d posts: %w", len(uniq), res.Error))
	}
	if int(res.RowsAffected) == len(uniq) {
		for i := range out {
			out[i] = claimRes{claimed: true}
		}
		return out
	}
	var verdicts map[int64]claimRes
	err := database.Transaction(ctx, w.db, func(tx *gorm.DB) error {
		verdicts = make(map[int64]claimRes, len(uniq)) // a retried transaction starts afresh
		return unclaimed(ctx, tx, uniq, verdicts)
	})
	if err != nil {
		return fail(fmt.Errorf("claim %d posts: %w", len(uniq), err))
	}
	for i, id := range ids {
		out[i] = verdicts[id]
	}
	return out
}

// unclaimed is claimBatch's transaction: it reads the posts ids again by
// the database's clock and writes into verdicts which are claimed and how
// the publications of the others ended.
func unclaimed(ctx context.Context, tx *gorm.DB, ids []int64, verdicts map[int64]claimRes) error {
	now, err := database.Now(ctx, tx)
	if err != nil {
		return err
	}
	var posts []reservation.Post
	if err := tx.Select("id", "status", "publish_by", "publish_claimed_at").Where("id IN ?", ids).Find(&posts).Error; err != nil {
		return fmt.Errorf("read %d posts: %w", len(ids), err)
	}
	byID := make(map[int64]*reservation.Post, len(posts))
	for i := range posts {
		byID[posts[i].ID] = &posts[i]
	}
	settleAs := func(id int64, st PublicationStatus, reason string) error {
		var lastError *string
		if reason != "" {
			lastError = &reason
		}
		changed, err := settle(tx, id, st, now, lastError)
		// A post published by someone else is not a publication of
		// this worker's to count.
		verdicts[id] = claimRes{status: st, changed: changed && st != PublicationPublished, reason: reason}
		return err
	}
	var late []int64
	for _, id := range ids {
		p := byID[id]
		var err error
		switch {
		case p == nil:
			err = settleAs(id, PublicationCancelled, "")
		case p.Status == reservation.StatusWorking && p.PublishClaimedAt != nil:
			verdicts[id] = claimRes{claimed: true} // a claim made in time stands
		case p.Status == reservation.StatusWorking && p.PublishBy != nil && p.PublishBy.Before(now):
			late = append(late, id)
		case p.Status == reservation.StatusWorking:
			// Not matched by the claim, yet WORKING in time now: it
			// changed between the two reads; the next attempt decides.
			verdicts[id] = claimRes{status: PublicationPending, err: fmt.Errorf("claim post %d: changed meanwhile", id)}
		case p.Status == reservation.StatusCancelled:
			err = settleAs(id, PublicationCancelled, "")
		case p.Status == reservation.StatusExpired:
			err = settleAs(id, PublicationExpired, "")
		case p.Status == reservation.StatusPublished:
			err = settleAs(id, PublicationPublished, "")
		default:
			err = settleAs(id, PublicationFailed, fmt.Sprintf("post is %s, not %s", p.Status, reservation.StatusWorking))
		}
		if err != nil {
			return err
		}
	}
	if len(late) == 0 {
		return nil
	}
	expired, err := reservation.Expire(tx, late, now, false)
	if err != nil {
		return err
	}
	done := make(map[int64]bool, len(expired))
	for _, p := range expired {
		done[p.ID] = true
	}
	for _, id := range late {
		if !done[id] {
			verdicts[id] = claimRes{status: PublicationPending, err: fmt.Errorf("expire post %d: changed meanwhile", id)}
			continue
		}
		if err := settleAs(id, PublicationExpired, ""); err != nil {
			return err
		}
	}
	return nil
}

// recordBatch records the posts of reqs PUBLISHED, with their publications,
// in one transaction: one UPDATE of the posts and one of the publications per
// publication time (the attempts read together share one). A post that is
// not WORKING any more (cancelled, or published by someone else, since it was
// read) is left as it is and its publication settled from its status.
func (w *Worker) recordBatch(reqs []recordReq) []recordRes {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := make([]recordRes, len(reqs))
	err := database.Transaction(ctx, w.db, func(tx *gorm.DB) error {
		out = make([]recordRes, len(reqs)) // a retried attempt starts afresh
		byAt := map[time.Time][]int{}
		var ats []time.Time
		for i, r := range reqs {
			if _, ok := byAt[r.at]; !ok {
				ats = append(ats, r.at)
			}
			byAt[r.at] = append(byAt[r.at], i)
		}
		for _, at := range ats {
			if err := recordAt(tx, reqs, byAt[at], at, out); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		out = make([]recordRes, len(reqs)) // fn may not have run at all (BEGIN failed)
		for i := range reqs {
			out[i] = recordRes{status: PublicationPending, err: fmt.Errorf("record publication of post %d: %w", reqs[i].postID, err)}
		}
	}
	return out
}

// recordAt records the requests idx of reqs, all published at at, through
// tx, into out.
func recordAt(tx *gorm.DB, reqs []recordReq, idx []int, at time.Time, out []recordRes) error {
	ids := make([]int64, len(idx))
	for k, i := range idx {
		ids[k] = reqs[i].postID
	}
	marked, status, err := reservation.MarkPublished(tx, ids, at)
	if err != nil {
		return err
	}
	if len(marked) < len(ids) {
		for _, i := range idx {
			id := reqs[i].postID
			if marked[id] {
				continue
			}
			st := PublicationCancelled
			switch status[id] {
			case reservation.StatusPublished:
				st = PublicationPublished
			case reservation.StatusExpired:
				st = PublicationExpired
			}
			changed, err := settle(tx, id, st, at, nil)
			if err != nil {
				return err
			}
			out[i] = recordRes{status: st, changed: changed}
		}
	}
	var markedIDs []int64
	for _, id := range ids {
		if marked[id] {
			markedIDs = append(markedIDs, id)
		}
	}
	if len(markedIDs) == 0 {
		return nil
	}
	pendingIDs, pendingSet, err := database.PluckSet[int64](tx.Model(&Publication{}).
		Where("post_id IN ? AND status = ?", markedIDs, PublicationPending), "post_id")
	if err != nil {
		return fmt.Errorf("read %d publications: %w", len(markedIDs), err)
	}
	if len(pendingIDs) > 0 {
		if err := tx.Model(&Publication{}).Where("post_id IN ? AND status = ?", pendingIDs, PublicationPending).
			Updates(map[string]any{"status": PublicationPublished, "published_at": at, "updated_at": at,
				"attempts": gorm.Expr("attempts + 1"), "last_error": nil}).Error; err != nil {
			return fmt.Errorf("settle %d publications published: %w", len(pendingIDs), err)
		}
	}
	for _, i := range idx {
		if id := reqs[i].postID; marked[id] {
			out[i] = recordRes{status: PublicationPublished, changed: pendingSet[id]}
		}
	}
	return nil
}
