package reservation

import (
	"context"
	"fmt"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
)

// Defaults of group commit (ServiceConfig.GroupSize, GroupCommitters,
// GroupWait).
const (
	// DefaultGroupSize is the most creates one transaction holds.
	DefaultGroupSize = 100
	// DefaultGroupCommitters is how many group transactions run at once.
	DefaultGroupCommitters = 2
	// DefaultGroupWait is how long a committer waits for its group to fill
	// before it writes: none, for the group forms while the committers
	// are busy, and a create that finds one free is written at once.
	DefaultGroupWait = time.Duration(0)
	// MaxGroupWait bounds GroupWait.
	MaxGroupWait = 100 * time.Millisecond
)

// createGroups shares database transactions among concurrent creates (group
// commit). A create joins the queue; while fewer than committers group
// transactions run, it becomes a committer and writes the queue, up to
// size creates, in one transaction: its posts and their events in one
// multi-row INSERT each. The creates that arrive while every committer is
// busy make the next group. Each create is answered once the transaction
// holding it has committed. A create alone in its group is written as
// Create always wrote one. A group whose transaction fails is written again
// one create a transaction, so a create that fails is answered its own
// error and the others are written.
type createGroups struct {
	svc        *Service
	size       int
	wait       time.Duration
	committers chan struct{}

	mu      sync.Mutex
	pending []*groupedCreate
}

// groupedCreate is one create waiting for its group.
type groupedCreate struct {
	ctx  context.Context
	in   CreateInput
	now  time.Time
	post *Post
	err  error
	done chan struct{}
	// taken: a committer holds it (under createGroups.mu).
	taken bool
}

func newCreateGroups(svc *Service, cfg ServiceConfig) *createGroups {
	return &createGroups{svc: svc, size: cfg.GroupSize, wait: cfg.GroupWait,
		committers: make(chan struct{}, cfg.GroupCommitters)}
}

// create writes in, checked already, through a group transaction.
func (g *createGroups) create(ctx context.Context, in CreateInput, now time.Time) (*Post, error) {
	c := &groupedCreate{ctx: ctx, in: in, now: now, done: make(chan struct{})}
	g.mu.Lock()
	g.pending = append(g.pending, c)
	g.mu.Unlock()
	for {
		select {
		case g.committers <- struct{}{}:
			// A group taken ahead of this create may leave it queued;
			// its own caller is the one bound to write it then: the
			// creates of that group are answered and wait no more.
			if g.commitNext(c) {
				<-c.done // in this group or in one another committer took
				return c.post, c.err
			}
		case <-c.done:
			return c.post, c.err
		}
	}
}

// commitNext writes the next group of the queue, holding a committer's
// place, which it gives back, and reports whether a committer has taken
// own by then. A create left in the queue (beyond size) waits for a place
// itself, and takes it.
func (g *createGroups) commitNext(own *groupedCreate) (taken bool) {
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
	var live []*groupedCreate
	for _, c := range group {
		if err := c.ctx.Err(); err != nil {
			c.finish(nil, fmt.Errorf("create post: %w", context.Cause(c.ctx)))
			continue
		}
		live = append(live, c)
	}
	switch len(live) {
	case 0:
		return taken
	case 1:
		live[0].finish(g.svc.createAlone(live[0].ctx, live[0].in, live[0].now))
		return taken
	}
	// The group's transaction is every member's: one member's client
	// going away does not cut it off.
	ctx := context.WithoutCancel(live[0].ctx)
	var posts []*Post
	wrote := false // the group's writes were done: an error came from the commit
	err := database.Transaction(ctx, g.svc.db, func(tx *gorm.DB) error {
		var err error
		posts, err = g.svc.insertGroup(tx, live)
		wrote = err == nil
		return err
	})
	if err == nil {
		for i, c := range live {
			c.finish(posts[i], nil)
		}
		return taken
	}
	if wrote && !database.Refused(err) {
		// The commit's answer was lost (a connection cut): the group may
		// be stored, and writing it again could store each post twice.
		// Each create is answered the error, as a create alone is whose
		// commit answer is lost.
		for _, c := range live {
			c.finish(nil, fmt.Errorf("create post: %w", err))
		}
		return taken
	}
	// Each alone: a member's own fault fails only its own create.
	// A panic there is the committer's to raise, as it would be raised
	// writing the create alone, not the process's end.
	var wg sync.WaitGroup
	var once sync.Once
	var panicked any
	for _, c := range live {
		wg.Go(func() {
			defer func() {
				if v := recover(); v != nil {
					once.Do(func() { panicked = v })
					c.abandon(v)
				}
			}()
			c.finish(g.svc.createAlone(c.ctx, c.in, c.now))
		})
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
	return taken
}

func (c *groupedCreate) finish(p *Post, err error) {
	c.post, c.err = p, err
	close(c.done)
}

// abandon answers c, unless answered already, with the error of a panic v
// while its group was written. Only the goroutine that finishes c calls it.
func (c *groupedCreate) abandon(v any) {
	select {
	case <-c.done:
	default:
		c.finish(nil, fmt.Errorf("create post: panic while its group was written: %v", v))
	}
}

// insertGroup writes the posts of group, each its member's (owner, trace,
// clock), and their CREATED events through tx, in one multi-row INSERT
// each. It builds fresh posts per call: a retried transaction must not
// reuse the ids a rolled-back attempt was given.
func (s *Service) insertGroup(tx *gorm.DB, group []*groupedCreate) ([]*Post, error) {
	posts := make([]*Post, len(group))
	for i, c := range group {
		posts[i] = s.newPosts(c.ctx, []CreateInput{c.in}, c.now)[0]
	}
	if err := database.InsertMany(tx, posts); err != nil {
		return nil, fmt.Errorf("insert %d posts: %w", len(posts), err)
	}
	if err := appendCreatedEvents(tx, posts); err != nil {
		return nil, err
	}
	return posts, nil
}
