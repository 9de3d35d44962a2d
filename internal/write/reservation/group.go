package reservation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
)

// Defaults of group commit (ServiceConfig.GroupSize, GroupCommitters,
// GroupWait).
const (
	// DefaultGroupSize is the most writes one transaction holds.
	DefaultGroupSize = 100
	// DefaultGroupCommitters is how many group transactions run at once.
	DefaultGroupCommitters = 2
	// DefaultGroupWait is how long a committer waits for its group to fill
	// before it writes: none, for the group forms while the committers
	// are busy, and a write that finds one free is written at once.
	DefaultGroupWait = time.Duration(0)
	// MaxGroupWait bounds GroupWait.
	MaxGroupWait = 100 * time.Millisecond
)

// writeGroups shares database transactions among concurrent writes (group
// commit): creates, keyed or not, and the changes of Update and Cancel. A
// write joins the queue; while fewer than committers group transactions
// run, it becomes a committer and writes the queue, up to size writes, in
// one transaction: the group's unkeyed posts and their events in one
// multi-row INSERT each, then its other writes in post order (a keyed
// create's post, event and key row; a change's UPDATE, held to the version
// read, and its event). A change whose post moved on since it was read is
// refused alone (ErrConflict) and the rest commit; one whose post's row
// another transaction holds is left to its caller, who writes it alone
// (errWriteAlone), as is a change alone in its group. The writes that arrive
// while every committer is busy make the next group. Each write is answered
// once the transaction holding it has committed. A write alone in its group
// is written as it always was, in a transaction of its own. A group whose
// transaction one member's statements failed (a key another request took)
// is written again without it, and it by its caller alone; one whose
// transaction fails otherwise, or again, is written again one write a
// transaction, so a write that fails is answered its own error, as it
// would be alone, and the others are written.
type writeGroups struct {
	svc        *Service
	size       int
	wait       time.Duration
	committers chan struct{}

	mu      sync.Mutex
	pending []*groupedWrite
}

// groupedWrite is one write waiting for its group: an unkeyed create (in),
// or statements of their own (fn).
type groupedWrite struct {
	ctx context.Context
	now time.Time
	// in is an unkeyed create's post; post is the post written.
	in   *CreateInput
	post *Post
	// fn writes any other write through tx, the group's transaction or,
	// alone, its own. ErrConflict from it refuses it alone, having written
	// nothing; any other error fails the group's transaction. post orders
	// it among the group's: the post it changes, 0 for a new one.
	fn     func(tx *gorm.DB) error
	postID int64
	err    error
	done   chan struct{}
	// taken: a committer holds it (under writeGroups.mu).
	taken bool
}

func newWriteGroups(svc *Service, cfg ServiceConfig) *writeGroups {
	return &writeGroups{svc: svc, size: cfg.GroupSize, wait: cfg.GroupWait,
		committers: make(chan struct{}, cfg.GroupCommitters)}
}

// create writes in, checked already, through a group transaction.
func (g *writeGroups) create(ctx context.Context, in CreateInput, now time.Time) (*Post, error) {
	return g.join(&groupedWrite{ctx: ctx, in: &in, now: now, done: make(chan struct{})})
}

// do runs fn, the statements of a write to postID (0: a new post), in a
// group transaction, and returns its error.
func (g *writeGroups) do(ctx context.Context, postID int64, fn func(tx *gorm.DB) error) error {
	_, err := g.join(&groupedWrite{ctx: ctx, fn: fn, postID: postID, done: make(chan struct{})})
	return err
}

// join queues c and returns once a group transaction holding it ended.
func (g *writeGroups) join(c *groupedWrite) (*Post, error) {
	g.mu.Lock()
	g.pending = append(g.pending, c)
	g.mu.Unlock()
	for {
		select {
		case g.committers <- struct{}{}:
			// A group taken ahead of this write may leave it queued;
			// its own caller is the one bound to write it then: the
			// writes of that group are answered and wait no more.
			if g.commitNext(c) {
				<-c.done // in this group or in one another committer took
				return g.answer(c)
			}
		case <-c.done:
			return g.answer(c)
		}
	}
}

// errWriteAlone answers a change (or a write whose statements failed its
// group) that its group did not write: its own caller writes it alone,
// outside any committer's place. A change may wait for its post's row,
// which another transaction may hold for long (a series edit, a peer's
// group, a stalled session); a committer waiting for it would hold up the
// creates and changes of its group, and all writes once every committer's
// place is taken so.
var errWriteAlone = errors.New("written alone by its caller")

// answer is c's answer once a committer is done with it.
func (g *writeGroups) answer(c *groupedWrite) (*Post, error) {
	if errors.Is(c.err, errWriteAlone) {
		return g.svc.writeAlone(c)
	}
	return c.post, c.err
}

// changes reports whether c changes a post that exists: its row may be
// held by another transaction.
func (c *groupedWrite) changes() bool { return c.postID != 0 }

// commitNext writes the next group of the queue, holding a committer's
// place, which it gives back, and reports whether a committer has taken
// own by then. A write left in the queue (beyond size) waits for a place
// itself, and takes it.
func (g *writeGroups) commitNext(own *groupedWrite) (taken bool) {
	defer func() { <-g.committers }()
	if g.wait > 0 {
		time.Sleep(g.wait)
	}
	g.mu.Lock()
	n := min(len(g.pending), g.size)
	group := g.pending[:n:n]
	g.pending = g.pending[n:]
	for _, c := range group {
		c.taken = true
	}
	taken = own.taken
	g.mu.Unlock()
	// A panic (the API answers the committer's request 500) answers the
	// rest of its group, who would otherwise wait for ever.
	defer func() {
		if v := recover(); v != nil {
			for _, c := range group {
				c.abandon(v)
			}
			panic(v)
		}
	}()
	var live []*groupedWrite
	for _, c := range group {
		if err := c.ctx.Err(); err != nil {
			c.finish(nil, c.failed(context.Cause(c.ctx)))
			continue
		}
		live = append(live, c)
	}
	switch {
	case len(live) == 0:
		return taken
	case len(live) == 1 && !live[0].changes():
		live[0].finish(g.svc.writeAlone(live[0]))
		return taken
	}
	// A change goes through the group's transaction even alone: it takes
	// its post's row only if no one holds it (else its caller writes it),
	// and meanwhile holds the committer's place, so that the writes
	// arriving queue into the next group instead of each finding a place
	// free and going alone.
	wrote, err := g.commit(live)
	var failed *memberError
	if err != nil && !wrote && len(live) > 1 && errors.As(err, &failed) {
		// One member's statements failed the group (its key taken by
		// another of the group, or by a group that committed first): its
		// caller writes it alone, and the others are written together
		// again, once, rather than each alone, which any client could
		// force on every group by sending a key twice at once. It is
		// answered once they are done: written meanwhile, it would take
		// the key first and fail them again.
		live = slices.DeleteFunc(live, func(c *groupedWrite) bool { return c == failed.member })
		wrote, err = g.commit(live)
		failed.member.finish(nil, errWriteAlone)
	}
	if err == nil {
		return taken
	}
	if wrote && !database.Refused(err) {
		// The commit's answer was lost (a connection cut): the group may
		// be stored, and writing it again could store each post twice.
		// Each write is answered the error, as a write alone is whose
		// commit answer is lost.
		for _, c := range live {
			c.finish(nil, c.failed(err))
		}
		return taken
	}
	// Each alone: a member's own fault fails only its own write.
	// A panic there is the committer's to raise, as it would be raised
	// writing it alone, not the process's end.
	var wg sync.WaitGroup
	var once sync.Once
	var panicked any
	for _, c := range live {
		if c.changes() {
			c.finish(nil, errWriteAlone)
			continue
		}
		wg.Go(func() {
			defer func() {
				if v := recover(); v != nil {
					once.Do(func() { panicked = v })
					c.abandon(v)
				}
			}()
			c.finish(g.svc.writeAlone(c))
		})
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
	return taken
}

// commit writes live in one transaction and answers each member once it
// committed; wrote reports that an error came from the commit, the
// group's writes done.
func (g *writeGroups) commit(live []*groupedWrite) (wrote bool, err error) {
	// The group's transaction is every member's: one member's client
	// going away does not cut it off.
	ctx := context.WithoutCancel(live[0].ctx)
	var results []groupResult
	err = database.Transaction(ctx, g.svc.db, func(tx *gorm.DB) error {
		var err error
		results, err = g.svc.writeGroup(tx, live)
		wrote = err == nil
		return err
	})
	if err == nil {
		for i, c := range live {
			c.finish(results[i].post, results[i].err)
		}
	}
	return wrote, err
}

// memberError is the error of the one member whose statements failed its
// group's transaction.
type memberError struct {
	member *groupedWrite
	err    error
}

func (e *memberError) Error() string { return e.err.Error() }
func (e *memberError) Unwrap() error { return e.err }

// finish answers c with the post written (an unkeyed create's) or err.
func (c *groupedWrite) finish(p *Post, err error) {
	c.post, c.err = p, err
	close(c.done)
}

// failed is err as c's caller reports it: an unkeyed create wraps it,
// the caller of do does.
func (c *groupedWrite) failed(err error) error {
	if c.in != nil {
		return fmt.Errorf("create post: %w", err)
	}
	return err
}

// abandon answers c, unless answered already, with the error of a panic v
// while its group was written. Only the goroutine that finishes c calls it.
func (c *groupedWrite) abandon(v any) {
	select {
	case <-c.done:
	default:
		c.finish(nil, c.failed(fmt.Errorf("panic while its group was written: %v", v)))
	}
}

// writeAlone writes c in a transaction of its own.
func (s *Service) writeAlone(c *groupedWrite) (*Post, error) {
	if c.in != nil {
		return s.createAlone(c.ctx, *c.in, c.now)
	}
	return nil, database.Transaction(c.ctx, s.db, c.fn)
}

// groupResult is what a group's transaction did for one member: the post
// it created (unkeyed), or the error that refused it alone.
type groupResult struct {
	post *Post
	err  error
}

// writeGroup writes group through tx: its unkeyed creates' posts, each its
// member's (owner, trace, clock), and their CREATED events in one multi-row
// INSERT each (insertPosts splits the posts by text, and on SQLite
// database.InsertMany splits both by 50 rows); then its other writes in post
// order, as every writer of several posts locks them, so two groups changing
// the same posts wait for each other, never in a circle. A write that
// returns ErrConflict is refused alone; any other error fails the group. It
// builds fresh posts per call: a retried transaction must not reuse the ids
// a rolled-back attempt was given.
func (s *Service) writeGroup(tx *gorm.DB, group []*groupedWrite) ([]groupResult, error) {
	results := make([]groupResult, len(group))
	var posts []*Post
	var created, others []int
	for i, c := range group {
		if c.in != nil {
			posts = append(posts, s.newPosts(c.ctx, []CreateInput{*c.in}, c.now)[0])
			created = append(created, i)
		} else {
			others = append(others, i)
		}
	}
	if len(posts) > 0 {
		if err := insertPosts(tx, posts); err != nil {
			return nil, err
		}
		if err := appendCreatedEvents(tx, posts); err != nil {
			return nil, err
		}
		for k, i := range created {
			results[i].post = posts[k]
		}
	}
	slices.SortStableFunc(others, func(a, b int) int { return cmp.Compare(group[a].postID, group[b].postID) })
	// The group waits for no other transaction's post row: it locks the
	// rows no one holds, and leaves a change of a held one to its caller
	// (errWriteAlone).
	free, err := lockFree(tx, group, others)
	if err != nil {
		return nil, err
	}
	for _, i := range others {
		c := group[i]
		if c.changes() && !free[c.postID] {
			results[i].err = errWriteAlone
			continue
		}
		// tx's context is the group's (its first member's request): the
		// event's trace is this write's own request's, as written alone.
		results[i].err = c.fn(tx.WithContext(context.WithoutCancel(c.ctx)))
		if results[i].err != nil && !errors.Is(results[i].err, ErrConflict) {
			return nil, &memberError{member: c, err: results[i].err}
		}
	}
	return results, nil
}

// lockFree locks through tx the posts that the members others of group
// change and that no other transaction holds (FOR UPDATE SKIP LOCKED; on
// SQLite, whose one writer is tx, all), and returns their ids.
func lockFree(tx *gorm.DB, group []*groupedWrite, others []int) (map[int64]bool, error) {
	var ids []int64
	for _, i := range others {
		if group[i].changes() {
			ids = append(ids, group[i].postID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var locked []int64
	q := tx.Model(&Post{}).Where("id IN ?", ids).Order("id")
	if err := database.DriverOf(tx).ForUpdateSkipLocked(q).Pluck("id", &locked).Error; err != nil {
		return nil, fmt.Errorf("lock %d changed posts: %w", len(ids), err)
	}
	free := make(map[int64]bool, len(locked))
	for _, id := range locked {
		free[id] = true
	}
	return free, nil
}
