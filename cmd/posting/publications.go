package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/postingsvc/posting/internal/publish/worker"
)

// newPublicationsCommand is `posting publications`: the worker's
// publications for an operator, against the database of --database-url /
// POSTING_DATABASE_URL, with the flag rules of `posting outbox` (only the
// common flags have environment twins).
func newPublicationsCommand() *cobra.Command {
	return commandGroup("publications", "Inspect the worker's publications and retry refused ones: list, retry",
		(&publicationsList{}).command(), (&publicationsRetry{}).command())
}

// publicationsList is `posting publications list`.
type publicationsList struct {
	operator
	listFlags
	after int64
	st    worker.PublicationStatus // status, parsed
}

func (c *publicationsList) command() *cobra.Command {
	cmd := c.define(&cobra.Command{
		Use:   "list",
		Short: "List publications of one status by post id, with why they failed",
		Long: "Lists the publications of --status (default FAILED: the publisher refused them and the\n" +
			"post stays WORKING) in post id order, with the last error and the post's status.\n" +
			"--after ID continues after the last post id of a previous page.",
		Args: noArgs,
	}, c.check, c.Run)
	c.add(cmd.Flags(), string(worker.PublicationFailed), "PENDING, PUBLISHED, CANCELLED, EXPIRED or FAILED",
		worker.DefaultPublicationListLimit, worker.MaxPublicationListLimit)
	cmd.Flags().Int64Var(&c.after, "after", 0, "show posts with an id above this one (the next page)")
	return cmd
}

func (c *publicationsList) check([]string) (err error) {
	if c.st, err = parseListFlags(&c.listFlags, worker.ParsePublicationStatus); err != nil {
		return err
	}
	if c.after < 0 {
		return badFlag("--after", strconv.FormatInt(c.after, 10), "must not be negative")
	}
	return nil
}

// Run prints one page of publications of one status.
func (c *publicationsList) Run(ctx context.Context, _ []string) error {
	items, err := worker.ListPublications(ctx, c.db, c.st, c.limit, c.after)
	if err != nil {
		return err
	}
	return printList(&c.operator, &c.listFlags, items, fmt.Sprintf("no %s publications", c.st),
		"POST ID\tPOST STATUS\tATTEMPTS\tSCHEDULED AT\tUPDATED AT\tLAST ERROR", func(e worker.PublicationEntry) string {
			postStatus := string(e.PostStatus)
			if postStatus == "" {
				postStatus = "(gone)"
			}
			return fmt.Sprintf("%d\t%s\t%d\t%s\t%s\t%s", e.PostID, postStatus, e.Attempts,
				e.ScheduledAt.Format(time.RFC3339), e.UpdatedAt.Format(time.RFC3339), lastErrorCell(e.LastError))
		})
}

// publicationsRetry is `posting publications retry`.
type publicationsRetry struct {
	operator
	ids []int64 // the arguments, parsed
}

func (c *publicationsRetry) command() *cobra.Command {
	return c.define(&cobra.Command{
		Use:   "retry ID...",
		Short: "Hand FAILED publications back to the worker",
		Long: "Makes each given FAILED publication (by post id) PENDING again, attempts reset and the\n" +
			"last error cleared, and reports each id. The worker that owns its partition publishes it\n" +
			"at once when it next looks for pending publications. A publication that is not FAILED,\n" +
			"whose post is no longer WORKING, or that changed meanwhile is refused and left as it is;\n" +
			"then the exit status is 1.",
	}, c.check, c.Run)
}

func (c *publicationsRetry) check(args []string) (err error) {
	c.ids, err = parseIDs(args, "retry needs at least one ID argument (a post id)", "post id")
	return err
}

// Run retries the given publications and prints one line per id; it
// returns an error (exit 1) when any id was refused.
func (c *publicationsRetry) Run(ctx context.Context, _ []string) error {
	results := worker.RetryPublications(ctx, c.db, c.ids)
	return reportEach(&c.operator, "POST ID", "retried", results, func(r worker.PublicationResult) (int64, string, bool) {
		if r.Err != nil {
			return r.PostID, refusedReason(r.Err), false
		}
		c.audit("publications.retry", []int64{r.PostID}, "event_id", r.Publication.EventID)
		return r.PostID, string(r.Publication.Status), true
	})
}
