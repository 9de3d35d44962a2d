package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/postingsvc/posting/internal/platform/backoff"
	"github.com/postingsvc/posting/internal/send/outbox"
	"github.com/postingsvc/posting/internal/storage/database"
)

// newOutboxCommand is `posting outbox`: the operator tools against the
// database of --database-url / POSTING_DATABASE_URL. The database, data dir,
// instance id and log format flags have their environment twins; the
// options of one invocation (--status, --limit, --json, ...) do not, so a
// stray variable cannot change what an operator typed.
func newOutboxCommand() *cobra.Command {
	return commandGroup("outbox", "Inspect and repair the outbox: stats, list, requeue, discard, purge",
		(&outboxStats{}).command(), (&outboxList{}).command(), (&outboxRequeue{}).command(),
		(&outboxDiscard{}).command(), (&outboxPurge{}).command())
}

// outboxStats is `posting outbox stats`.
type outboxStats struct {
	operator
	asJSON bool
}

func (c *outboxStats) command() *cobra.Command {
	cmd := c.define(&cobra.Command{
		Use:   "stats",
		Short: "Rows by status, the oldest waiting row, and what FAIL rows hold",
		Args:  noArgs,
	}, nil, c.Run)
	cmd.Flags().BoolVar(&c.asJSON, "json", false, "print JSON for scripts")
	return cmd
}

// Run prints the outbox's state.
func (c *outboxStats) Run(ctx context.Context, _ []string) error {
	now, err := c.now(ctx)
	if err != nil {
		return err
	}
	st, err := outbox.Stats(ctx, c.db, now)
	if err != nil {
		return err
	}
	if c.asJSON {
		return c.printJSON(st)
	}
	return c.print(st)
}

func (c *outboxStats) print(st outbox.Summary) error {
	w := c.out
	tw := newTable(w)
	fmt.Fprintln(tw, "STATUS\tROWS")
	for _, s := range outbox.Statuses {
		fmt.Fprintf(tw, "%s\t%d\n", s, st.Counts[s])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nFAIL rows waiting for an operator: %d (discarded: %d)\n", st.Failed, st.Discarded)
	if o := st.OldestWaiting; o != nil {
		fmt.Fprintf(w, "oldest waiting: id %d (post %d, %s), created %s, %s ago\n",
			o.ID, o.PostID, o.Status, o.Created.Format(time.RFC3339), o.Age.Round(time.Second))
	} else {
		fmt.Fprintln(w, "oldest waiting: none")
	}
	fmt.Fprintf(w, "blocked behind a FAIL row of their post: %d\n", st.Blocked)
	if len(st.Blocking) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "BLOCKING ID\tEVENT ID\tPOST ID\tBLOCKED")
	for _, b := range st.Blocking {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\n", b.ID, b.EventID, b.PostID, b.Blocked)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "release them with: posting outbox requeue ID... (or discard ID...)")
	return err
}

// outboxList is `posting outbox list`.
type outboxList struct {
	operator
	listFlags
	st outbox.Status // status, parsed
}

func (c *outboxList) command() *cobra.Command {
	cmd := c.define(&cobra.Command{
		Use:   "list",
		Short: "List rows of one status, oldest first",
		Args:  noArgs,
	}, c.check, c.Run)
	c.add(cmd.Flags(), string(outbox.StatusFail), "PENDING, PROCESSING, SENT, RETRY or FAIL", outbox.DefaultListLimit, outbox.MaxListLimit)
	return cmd
}

func (c *outboxList) check([]string) (err error) {
	c.st, err = parseListFlags(&c.listFlags, outbox.ParseStatus)
	return err
}

// Run prints the rows of one status, oldest first.
func (c *outboxList) Run(ctx context.Context, _ []string) error {
	items, err := outbox.List(ctx, c.db, c.st, c.limit)
	if err != nil {
		return err
	}
	return printList(&c.operator, &c.listFlags, items, fmt.Sprintf("no %s rows", c.st),
		"ID\tEVENT ID\tTYPE\tPOST ID\tFAILED ATTEMPTS\tCREATED\tLAST ERROR", func(e outbox.Entry) string {
			return fmt.Sprintf("%d\t%s\t%s\t%d\t%d\t%s\t%s", e.ID, e.EventID, e.EventType, e.PostID, e.RetryCount,
				e.Created.Format(time.RFC3339), lastErrorCell(e.LastError))
		})
}

// outboxRequeue is `posting outbox requeue`.
type outboxRequeue struct {
	operator
	all bool
	ids []int64 // the arguments, parsed
}

func (c *outboxRequeue) command() *cobra.Command {
	cmd := c.define(&cobra.Command{
		Use:   "requeue ID... | --all-failed",
		Short: "Make FAIL rows PENDING again with their retries reset",
		Long: "Makes each given FAIL row PENDING again, retries reset and due now, and reports each id.\n" +
			"Rows that are not FAIL, are discarded or changed meanwhile are refused and left as they are;\n" +
			"then the exit status is 1. --all-failed requeues every FAIL row that is not discarded.",
	}, c.check, c.Run)
	cmd.Flags().BoolVar(&c.all, "all-failed", false, "requeue every FAIL row that is not discarded")
	return cmd
}

func (c *outboxRequeue) check(args []string) error {
	if c.all {
		if len(args) > 0 {
			return usageError{errors.New("requeue: give IDs or --all-failed, not both")}
		}
		return nil
	}
	ids, err := parseIDs(args, "requeue needs at least one ID argument, or --all-failed", "outbox row id")
	c.ids = ids
	return err
}

// Run requeues the given rows, or every FAIL row with --all-failed.
func (c *outboxRequeue) Run(ctx context.Context, _ []string) error {
	now, err := c.now(ctx)
	if err != nil {
		return err
	}
	if !c.all {
		return c.reportRows("requeued", outbox.Requeue(ctx, c.db, c.ids, now))
	}
	n, err := outbox.RequeueAllFailed(ctx, c.db, now, 0)
	if err != nil {
		return err
	}
	c.audit("outbox.requeue_failed", []int64{}, "requeued", n)
	fmt.Fprintf(c.out, "requeued %d FAIL rows\n", n)
	return nil
}

// outboxDiscard is `posting outbox discard`.
type outboxDiscard struct {
	operator
	ids []int64 // the arguments, parsed
}

func (c *outboxDiscard) command() *cobra.Command {
	return c.define(&cobra.Command{
		Use:   "discard ID...",
		Short: "Give up on FAIL rows: they stay FAIL in the history and stop holding their post",
		Long: "Marks each given FAIL row discarded: it keeps status FAIL and its history, gets a note in\n" +
			"last_error, and no longer holds the later events of its post, which the relay then sends.\n" +
			"A discarded row cannot be requeued. Refused ids make the exit status 1.",
	}, c.check, c.Run)
}

func (c *outboxDiscard) check(args []string) (err error) {
	c.ids, err = parseIDs(args, "discard needs at least one ID argument", "outbox row id")
	return err
}

// Run discards the given rows.
func (c *outboxDiscard) Run(ctx context.Context, _ []string) error {
	now, err := c.now(ctx)
	if err != nil {
		return err
	}
	return c.reportRows("discarded", outbox.Discard(ctx, c.db, c.ids, now))
}

// reportRows prints one line per outbox row id and returns an error (exit 1)
// when any id was refused.
func (o *operator) reportRows(verb string, results []outbox.RowResult) error {
	return reportEach(o, "ID", verb, results, func(r outbox.RowResult) (int64, string, bool) {
		if r.Err != nil {
			return r.ID, refusedReason(r.Err), false
		}
		action := map[string]string{"requeued": "outbox.requeue", "discarded": "outbox.discard"}[verb]
		o.audit(action, []int64{r.ID}, "event_id", r.Row.EventID, "post_id", r.Row.PostID)
		return r.ID, string(r.Row.Status), true
	})
}

// outboxPurge is `posting outbox purge`.
type outboxPurge struct {
	operator
	olderThan, pause, progressEvery time.Duration
	batch                           int
}

// defaultPurgeProgressEvery is how often `posting outbox purge` reports how
// far it got: a purge of 500k rows runs minutes.
const defaultPurgeProgressEvery = 10 * time.Second

func (c *outboxPurge) command() *cobra.Command {
	cmd := c.define(&cobra.Command{
		Use:   "purge",
		Short: "Delete SENT rows sent longer ago than --older-than, in small batches",
		Long: "Deletes SENT rows sent longer ago than --older-than, never rows of another status,\n" +
			"--batch-size rows per statement with --pause between statements: what the background\n" +
			"cleaner of serve does with POSTING_OUTBOX_RETENTION, once. It runs to the end, and logs\n" +
			"how many rows it deleted and how many remain every --progress-every.",
		Args: noArgs,
	}, c.check, c.Run)
	cmd.Flags().DurationVar(&c.olderThan, "older-than", outbox.DefaultRetention, "delete SENT rows sent longer ago than this")
	cmd.Flags().IntVar(&c.batch, "batch-size", outbox.DefaultPurgeBatchSize, fmt.Sprintf("rows per DELETE statement (1..%d)", outbox.MaxPurgeBatchSize))
	cmd.Flags().DurationVar(&c.pause, "pause", outbox.DefaultPurgePause, "pause between two DELETE statements")
	cmd.Flags().DurationVar(&c.progressEvery, "progress-every", defaultPurgeProgressEvery, "log the rows deleted and remaining this often")
	return cmd
}

func (c *outboxPurge) check([]string) error {
	if c.olderThan <= 0 {
		return badFlag("--older-than", c.olderThan.String(), "must be positive")
	}
	if c.batch < 1 || c.batch > outbox.MaxPurgeBatchSize {
		return badFlag("--batch-size", strconv.Itoa(c.batch), fmt.Sprintf("want 1..%d", outbox.MaxPurgeBatchSize))
	}
	if c.pause < 0 {
		return badFlag("--pause", c.pause.String(), "must not be negative")
	}
	if c.progressEvery <= 0 {
		return badFlag("--progress-every", c.progressEvery.String(), "must be positive")
	}
	return nil
}

// Run deletes old SENT rows, to the end: it has no HTTP timeout to answer
// within. It purges in rounds of --progress-every, the bounded call of the
// admin route, and logs the figures of each round that leaves rows.
func (c *outboxPurge) Run(ctx context.Context, _ []string) error {
	now, err := c.now(ctx)
	if err != nil {
		return err
	}
	cutoff := database.Normalize(now.Add(-c.olderThan))
	deleted := 0
	for {
		var res outbox.PurgeResult
		res, err = outbox.PurgeWithin(ctx, c.db, cutoff, c.batch, c.pause, c.progressEvery)
		deleted += res.Deleted
		if err != nil || res.Complete {
			break
		}
		c.log.Info("purge progress", "deleted", deleted, "remaining", res.Remaining, "sent_before", cutoff)
		// The round ended before its last pause.
		if !backoff.Sleep(ctx, c.pause) {
			err = ctx.Err()
			break
		}
	}
	c.audit("outbox.purge", []int64{}, "deleted", deleted, "sent_before", cutoff)
	fmt.Fprintf(c.out, "deleted %d SENT rows sent before %s\n", deleted, cutoff.Format(time.RFC3339))
	return err
}
