package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/postingsvc/posting/worker"
)

// newPublicationsCommand is `posting publications`: the worker's
// publications for an operator, against the database of --database-url /
// POSTING_DATABASE_URL, with the flag rules of `posting outbox` (only the
// common flags have environment twins).
func newPublicationsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "publications",
		Short: "Inspect the worker's publications and retry refused ones: list, retry",
		Args:  outboxNoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(publicationsListCommand(), publicationsRetryCommand())
	return cmd
}

func publicationsListCommand() *cobra.Command {
	var s settings
	var asJSON bool
	var status string
	var limit int
	var after int64
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List publications of one status by post id, with why they failed",
		Long: "Lists the publications of --status (default FAILED: the publisher refused them and the\n" +
			"post stays WORKING) in post id order, with the last error and the post's status.\n" +
			"--after ID continues after the last post id of a previous page.",
		Args: outboxNoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := worker.ParsePublicationStatus(status)
			if err != nil {
				return outboxBadFlag("--status", status, "want PENDING, PUBLISHED, CANCELLED or FAILED")
			}
			if limit < 1 || limit > worker.MaxPublicationListLimit {
				return outboxBadFlag("--limit", strconv.Itoa(limit), fmt.Sprintf("want 1..%d", worker.MaxPublicationListLimit))
			}
			if after < 0 {
				return outboxBadFlag("--after", strconv.FormatInt(after, 10), "must not be negative")
			}
			return outboxWithDB(cmd, &s, func(c outboxCtx) error {
				items, err := worker.ListPublications(cmd.Context(), c.db, st, limit, after)
				if err != nil {
					return err
				}
				if asJSON {
					return outboxJSON(cmd.OutOrStdout(), map[string]any{"items": items})
				}
				return publicationsPrintList(cmd.OutOrStdout(), st, items)
			})
		},
	}
	addCommonFlags(cmd.Flags(), &s)
	cmd.Flags().StringVar(&status, "status", string(worker.PublicationFailed), "PENDING, PUBLISHED, CANCELLED or FAILED")
	cmd.Flags().IntVar(&limit, "limit", worker.DefaultPublicationListLimit, fmt.Sprintf("rows to show (1..%d)", worker.MaxPublicationListLimit))
	cmd.Flags().Int64Var(&after, "after", 0, "show posts with an id above this one (the next page)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

func publicationsRetryCommand() *cobra.Command {
	var s settings
	cmd := &cobra.Command{
		Use:   "retry ID...",
		Short: "Hand FAILED publications back to the worker",
		Long: "Makes each given FAILED publication (by post id) PENDING again, attempts reset and the\n" +
			"last error cleared, and reports each id. The worker that owns its partition publishes it\n" +
			"at once when it next looks for pending publications. A publication that is not FAILED,\n" +
			"whose post is no longer WORKING, or that changed meanwhile is refused and left as it is;\n" +
			"then the exit status is 1.",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("retry needs at least one ID argument (a post id)")}
			}
			ids := make([]int64, 0, len(args))
			for _, a := range args {
				id, err := strconv.ParseInt(a, 10, 64)
				if err != nil || id <= 0 {
					return usageError{fmt.Errorf("invalid ID argument %q: want a positive post id", a)}
				}
				ids = append(ids, id)
			}
			return outboxWithDB(cmd, &s, func(c outboxCtx) error {
				return publicationsReport(c, cmd.OutOrStdout(), worker.RetryPublications(cmd.Context(), c.db, ids))
			})
		},
	}
	addCommonFlags(cmd.Flags(), &s)
	return cmd
}

func publicationsPrintList(w io.Writer, status worker.PublicationStatus, items []worker.PublicationEntry) error {
	if len(items) == 0 {
		_, err := fmt.Fprintf(w, "no %s publications\n", status)
		return err
	}
	tw := outboxTable(w)
	fmt.Fprintln(tw, "POST ID\tPOST STATUS\tATTEMPTS\tSCHEDULED AT\tUPDATED AT\tLAST ERROR")
	for _, e := range items {
		postStatus := string(e.PostStatus)
		if postStatus == "" {
			postStatus = "(gone)"
		}
		lastErr := "-"
		if e.LastError != nil && *e.LastError != "" {
			lastErr = outboxOneLine(*e.LastError, 100)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\n", e.PostID, postStatus, e.Attempts,
			e.ScheduledAt.Format(time.RFC3339), e.UpdatedAt.Format(time.RFC3339), lastErr)
	}
	return tw.Flush()
}

// publicationsReport prints one line per id and returns an error (exit 1)
// when any id was refused.
func publicationsReport(c outboxCtx, w io.Writer, results []worker.PublicationResult) error {
	tw := outboxTable(w)
	fmt.Fprintln(tw, "POST ID\tRESULT")
	refused := 0
	for _, r := range results {
		if r.Err != nil {
			refused++
			reason := r.Err.Error()
			var pe *worker.PublicationError
			if errors.As(r.Err, &pe) {
				reason = pe.Reason
			}
			fmt.Fprintf(tw, "%d\tnot retried: %s\n", r.PostID, reason)
			continue
		}
		c.log.Info("publication retried by an operator", "post_id", r.PostID, "event_id", r.Publication.EventID)
		fmt.Fprintf(tw, "%d\tretried (now %s)\n", r.PostID, r.Publication.Status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if refused > 0 {
		return fmt.Errorf("%d of %d ids not retried", refused, len(results))
	}
	return nil
}
