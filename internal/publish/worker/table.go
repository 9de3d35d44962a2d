package worker

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/postingsvc/posting/event"
	"github.com/postingsvc/posting/internal/publish/inbox"
	"github.com/postingsvc/posting/internal/storage/database"
	"github.com/postingsvc/posting/internal/write/reservation"
)

// tableView is what the worker's database holds about the events of a
// batch, read in two statements before the batch's transaction: their posts
// (status, scheduledAt) and the outbox rows that could have carried them.
//
// The worker acts on a post as the posts table holds it and refuses an
// event the database contradicts (refusal), so that a message the service
// did not write (a forged one, or one of another database) can neither
// change a publication nor move the post's sequence past its real events.
type tableView struct {
	posts map[int64]*reservation.Post // by id; id, status and scheduled_at only
	// bySeq are the outbox rows whose id is the sequence of an event of
	// the batch, byEvent those whose event id is the id of one.
	bySeq   map[int64]outboxRef
	byEvent map[string]outboxRef
	// lastOf is the highest outbox id the database holds per post of the
	// batch's sequenced events (absent: it holds none), last the highest
	// it holds at all (0: none).
	lastOf map[int64]int64
	last   int64
}

// outboxRef is one row of readTable's outbox statement: an outbox row
// (kind "e" by event id, "s" by sequence), or the highest id of a post
// ("p") or of the table ("t").
type outboxRef struct {
	Kind        string  `gorm:"column:kind"`
	ID          *int64  `gorm:"column:id"`
	EventID     *string `gorm:"column:event_id"`
	EventType   *string `gorm:"column:event_type"`
	AggregateID int64   `gorm:"column:aggregate_id"`
}

// readTable reads the tableView of evs: one SELECT of their posts and one of
// the outbox (the rows of their event ids, the highest ids of their posts,
// and, when an event has a sequence, the rows of their sequences and the
// highest id of the table, as one UNION ALL).
func (w *Worker) readTable(ctx context.Context, evs []inbox.Event) (tableView, error) {
	v := tableView{posts: map[int64]*reservation.Post{}, bySeq: map[int64]outboxRef{},
		byEvent: map[string]outboxRef{}, lastOf: map[int64]int64{}}
	if len(evs) == 0 {
		return v, nil
	}
	var postIDs, seqs, seqPosts []int64
	var eventIDs []string
	posts, seqSet, seqPostSet, events := map[int64]bool{}, map[int64]bool{}, map[int64]bool{}, map[string]bool{}
	for _, ev := range evs {
		if !posts[ev.PostID] {
			posts[ev.PostID] = true
			postIDs = append(postIDs, ev.PostID)
		}
		if !events[ev.EventID] {
			events[ev.EventID] = true
			eventIDs = append(eventIDs, ev.EventID)
		}
		// The highest row of every post: a sequence is checked against it,
		// and an event without one needs to know whether rows remain.
		if !seqPostSet[ev.PostID] {
			seqPostSet[ev.PostID] = true
			seqPosts = append(seqPosts, ev.PostID)
		}
		if ev.Sequence > 0 && !seqSet[ev.Sequence] {
			seqSet[ev.Sequence] = true
			seqs = append(seqs, ev.Sequence)
		}
	}
	db := w.db.WithContext(ctx)
	var rows []reservation.Post
	if err := db.Select("id", "status", "scheduled_at").Where("id IN ?", postIDs).Find(&rows).Error; err != nil {
		return v, fmt.Errorf("read %d posts: %w", len(postIDs), err)
	}
	for i := range rows {
		v.posts[rows[i].ID] = &rows[i]
	}
	q := "SELECT 'e' AS kind, id, event_id, event_type, aggregate_id FROM outbox WHERE event_id IN ?"
	q += " UNION ALL SELECT 'p', MAX(id), NULL, NULL, aggregate_id FROM outbox WHERE aggregate_id IN ? GROUP BY aggregate_id"
	args := []any{eventIDs, seqPosts}
	if len(seqs) > 0 {
		q += " UNION ALL SELECT 's', id, event_id, event_type, aggregate_id FROM outbox WHERE id IN ?" +
			" UNION ALL SELECT 't', MAX(id), NULL, NULL, 0 FROM outbox"
		args = append(args, seqs)
	}
	var refs []outboxRef
	if err := db.Raw(q, args...).Scan(&refs).Error; err != nil {
		return v, fmt.Errorf("read the outbox rows of %d events: %w", len(evs), err)
	}
	for _, r := range refs {
		if r.ID == nil {
			continue // MAX of no rows
		}
		switch r.Kind {
		case "e":
			v.byEvent[*r.EventID] = r
		case "s":
			v.bySeq[*r.ID] = r
		case "p":
			v.lastOf[r.AggregateID] = *r.ID
		case "t":
			v.last = *r.ID
		}
	}
	return v, nil
}

// refusal says why the worker refuses ev, whose plan is p, or "" when it
// takes it: RefusedUnknownPost, RefusedUnknownSequence or
// RefusedContradicted (see their doc).
//
// The outbox row of an event is its proof: the event's id names a row of
// the same post, type and sequence (the sequence is the row's id). A row
// the cleaner deleted (SENT, older than the retention) proves nothing, so a
// sequence without a row is taken only if it is not above the highest
// outbox id the database holds for the post, or, when it holds none any
// more, for the whole table: a redelivery of an old event whose row was
// purged passes, while a sequence above anything the database wrote, which
// would make every later real event of the post out of order, is refused.
// What a sequence below that bound can still do is limited: it can only
// overtake events already written, and the worker acts on the post as its
// table says whatever the message says. An event without a sequence (a
// producer older than it) is checked by its post, its event id's row and
// the table's statuses only: it takes no part in the order check either.
// Its event id must name a row of the post, unless no row of the post is
// left (purged).
func (v tableView) refusal(ev inbox.Event, p plan) string {
	post := v.posts[ev.PostID]
	if post == nil {
		return RefusedUnknownPost
	}
	if r, ok := v.byEvent[ev.EventID]; ok {
		if r.AggregateID != ev.PostID || r.EventType == nil || *r.EventType != string(ev.Type) ||
			(ev.Sequence > 0 && *r.ID != ev.Sequence) {
			return RefusedUnknownSequence
		}
	} else if ev.Sequence > 0 {
		if _, ok := v.bySeq[ev.Sequence]; ok {
			return RefusedUnknownSequence // the row of another event
		}
		last, ok := v.lastOf[ev.PostID]
		if !ok {
			last = v.last
		}
		if ev.Sequence > last {
			return RefusedUnknownSequence
		}
	}
	switch {
	case ev.Type == event.ReservationEvent && post.Status == reservation.StatusReserved:
		return RefusedContradicted
	case p.action == event.ActionCancelled && post.Status != reservation.StatusCancelled,
		p.action == event.ActionExpired && post.Status != reservation.StatusExpired:
		return RefusedContradicted
	}
	if _, ok := v.byEvent[ev.EventID]; !ok && ev.Sequence == 0 {
		// Without a sequence, the event's row is its only proof: an id
		// that names no row of a post whose rows remain was never written
		// (a forged id would become the webhook's Idempotency-Key). A post
		// with no row left was purged: its old events pass.
		if _, rows := v.lastOf[ev.PostID]; rows {
			return RefusedUnknownSequence
		}
	}
	return ""
}

// apply makes p act on ev's post as the table holds it: a reservation is
// scheduled at the post's scheduled_at, whatever the message says; a
// CANCELLED or EXPIRED posting event (which refusal let through only for a
// post of that status) settles the pending publication so.
func (v tableView) apply(ev inbox.Event, p *plan) {
	if p.pub != nil {
		p.pub.ScheduledAt = database.Normalize(v.posts[ev.PostID].ScheduledAt)
	}
	switch p.action {
	case event.ActionCancelled:
		p.end = PublicationCancelled
	case event.ActionExpired:
		p.end = PublicationExpired
	}
}

// ignore marks ev ignored on its span: it asks nothing of the worker
// (plan.ignored). The returned count tells ObserveConsumed; HandleBatch
// makes it only once the batch is settled, since a failed batch is handed
// over again one event at a time (and each event is counted then).
func (w *Worker) ignore(ev inbox.Event, span trace.Span) (count func()) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("posting.ignored", true))
	}
	return func() {
		if w.cfg.ObserveConsumed != nil {
			w.cfg.ObserveConsumed(string(ev.Type), OutcomeIgnored)
		}
	}
}

// maxRefusedLogged bounds the posts whose refusal the worker remembers
// having logged: a flood of forged keys costs at most this many ids.
const maxRefusedLogged = 4096

// postSet is a bounded set of post ids: once full, the oldest id is
// forgotten first.
type postSet struct {
	mu    sync.Mutex
	ids   map[int64]struct{}
	order []int64 // ring of the ids, oldest at next once full
	next  int
}

// add adds id and reports whether it was not in the set.
func (s *postSet) add(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ids[id]; ok {
		return false
	}
	if s.ids == nil {
		s.ids = make(map[int64]struct{}, maxRefusedLogged)
	}
	if len(s.order) < maxRefusedLogged {
		s.order = append(s.order, id)
	} else {
		delete(s.ids, s.order[s.next])
		s.order[s.next] = id
		s.next = (s.next + 1) % maxRefusedLogged
	}
	s.ids[id] = struct{}{}
	return true
}

// refusedMessages are the log lines of the refusals, by reason.
var refusedMessages = map[string]string{
	RefusedUnknownPost: "event refused: its post is not in the worker's database " +
		"(is the worker on the database the service writes?)",
	RefusedUnknownSequence: "event refused: the database never wrote it with this sequence; " +
		"the post's real events go on",
	RefusedContradicted: "event refused: the posts table contradicts it; the post is handled as the table says",
}

// refuse marks ev refused for reason on its span, and logs it unless an
// event of its post was logged refused before (logged once per post, as
// long as the worker remembers it: see maxRefusedLogged). The returned
// count tells ObserveRefused and ObserveConsumed; HandleBatch makes it only
// once the batch is settled, as for ignore.
func (w *Worker) refuse(ev inbox.Event, reason string, span trace.Span) (count func()) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("posting.refused", reason))
	}
	if w.refusedLogged.add(ev.PostID) {
		w.log.Warn(refusedMessages[reason], "reason", reason, "post_id", ev.PostID, "event_id", ev.EventID,
			"event_type", ev.Type, "sequence", ev.Sequence, "at", ev.Coordinates())
	}
	return func() {
		if w.cfg.ObserveRefused != nil {
			w.cfg.ObserveRefused(reason)
		}
		if w.cfg.ObserveConsumed != nil {
			w.cfg.ObserveConsumed(string(ev.Type), OutcomeRefused)
		}
	}
}
